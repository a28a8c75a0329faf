// RUN: %spmdc-opt %s -p 'sharding-propagation' | FileCheck %s --check-prefix=PROP
// RUN: %spmdc-opt %s -p 'sharding-propagation,insert-redistribution,lower-redistribution' | FileCheck %s --check-prefix=LOWER
// RUN: %spmdc-opt %s -p 'sharding-propagation,insert-redistribution,lower-redistribution,partition{rank=1}' | FileCheck %s --check-prefix=LOCAL

// A fused q|k|v projection stored SS(1, 3) on 4 ranks: each rank holds its columns of q, of k
// and of v. The matmul keeps the strided layout, slicing out one of the three parts gives a
// plain S(1), joining three S(1) parts gives SS(1, 3) again; no communication until the
// replicated result, which gathers each part (reshape to [8, 3, 32], all_gather dim 2, reshape).
shard.mesh @mesh = <["tp" = 4]>

// PROP-LABEL: func.func @fused_qkv
// PROP: tensor.matmul %x, %w {shard.sharding = [#shard<@mesh, [SS(1, 3)]>]}
// PROP: tensor.slice %qkv {dim = 1, end = 64, shard.sharding = [#shard<@mesh, [S(1)]>], start = 32
// PROP: tensor.relu %k {shard.sharding = [#shard<@mesh, [S(1)]>]}
// PROP: tensor.concat %q, %a, %v {dim = 1, shard.sharding = [#shard<@mesh, [SS(1, 3)]>]}

// LOWER-LABEL: func.func @fused_qkv
// LOWER-NOT: comm.
// LOWER: %[[V:.*]] = tensor.reshape %cat {shard.sharding = [#shard<@mesh, [S(2)]>]} : (tensor<8x96xf32>) -> tensor<8x3x32xf32>
// LOWER-NEXT: %[[G:.*]] = comm.all_gather %[[V]] {axis = "tp", dim = 2, mesh = @mesh, shard.sharding = [#shard<@mesh, [R]>]}
// LOWER-NEXT: tensor.reshape %[[G]] {shard.sharding = [#shard<@mesh, [R]>]} : (tensor<8x3x32xf32>) -> tensor<8x96xf32>
// LOWER-NOT: comm.

// Rank 1 holds columns 8-15 of each part: 24 local columns, k is local columns 8-15.
// LOCAL-LABEL: func.func @fused_qkv
// LOCAL-SAME: %w: tensor<32x24xf32> {shard.sharding = #shard<@mesh, [SS(1, 3)]>}
// LOCAL: tensor.slice %qkv {dim = 1, end = 16, start = 8, step = 1} : (tensor<8x24xf32>) -> tensor<8x8xf32>
// LOCAL: comm.all_gather %{{.*}} {axis = "tp", dim = 2, mesh = @mesh} : (tensor<8x3x8xf32>) -> tensor<8x3x32xf32>
func.func @fused_qkv(%x: tensor<8x32xf32>, %w: tensor<32x96xf32> {shard.sharding = #shard<@mesh, [SS(1, 3)]>})
    -> (tensor<8x96xf32> {shard.sharding = #shard<@mesh, [R]>}) {
  %qkv = tensor.matmul %x, %w : (tensor<8x32xf32>, tensor<32x96xf32>) -> tensor<8x96xf32>
  %q = tensor.slice %qkv {dim = 1, end = 32, start = 0, step = 1} : (tensor<8x96xf32>) -> tensor<8x32xf32>
  %k = tensor.slice %qkv {dim = 1, end = 64, start = 32, step = 1} : (tensor<8x96xf32>) -> tensor<8x32xf32>
  %v = tensor.slice %qkv {dim = 1, end = 96, start = 64, step = 1} : (tensor<8x96xf32>) -> tensor<8x32xf32>
  %a = tensor.relu %k : tensor<8x32xf32>
  %cat = tensor.concat %q, %a, %v {dim = 1} : (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x96xf32>
  func.return %cat : tensor<8x96xf32>
}

// A packed qkv viewed [b, t, 3, heads, head_dim]: SS(2, 3) on the merged dim is S(3) (heads).
// PROP-LABEL: func.func @packed_heads
// PROP: tensor.reshape %y {shard.sharding = [#shard<@mesh, [S(3)]>]} : (tensor<2x4x96xf32>) -> tensor<2x4x3x4x8xf32>
// LOWER-LABEL: func.func @packed_heads
// LOWER-NOT: comm.
// LOWER: func.return
func.func @packed_heads(%y: tensor<2x4x96xf32> {shard.sharding = #shard<@mesh, [SS(2, 3)]>})
    -> (tensor<2x4x3x4x8xf32> {shard.sharding = #shard<@mesh, [S(3)]>}) {
  %0 = tensor.reshape %y : (tensor<2x4x96xf32>) -> tensor<2x4x3x4x8xf32>
  func.return %0 : tensor<2x4x3x4x8xf32>
}

// From a pending sum: one reduce-scatter of each part.
// LOWER-LABEL: func.func @partial_to_strided
// LOWER: comm.reduce_scatter %{{.*}} {axis = "tp", dim = 1, mesh = @mesh, op = "sum", shard.sharding = [#shard<@mesh, [S(1)]>]} : tensor<3x6xf32>
// LOWER-NOT: comm.
func.func @partial_to_strided(%p: tensor<18xf32> {shard.sharding = #shard<@mesh, [P(sum)]>})
    -> (tensor<18xf32> {shard.sharding = #shard<@mesh, [SS(0, 3)]>}) {
  func.return %p : tensor<18xf32>
}

// The backward of slicing part 1 out: writing it into part 1 of zeros keeps SS(1, 3), and on
// rank 1 writes local columns 8-15 of 24.
// PROP-LABEL: func.func @write_part
// PROP: tensor.insert_slice %z, %g {dim = 1, end = 64, shard.sharding = [#shard<@mesh, [SS(1, 3)]>], start = 32
// LOWER-LABEL: func.func @write_part
// LOWER-NOT: comm.
// LOWER: func.return
// LOCAL-LABEL: func.func @write_part
// LOCAL: tensor.insert_slice %{{.*}}, %g {dim = 1, end = 16, start = 8, step = 1} : (tensor<8x24xf32>, tensor<8x8xf32>) -> tensor<8x24xf32>
func.func @write_part(%g: tensor<8x32xf32> {shard.sharding = #shard<@mesh, [S(1)]>})
    -> (tensor<8x96xf32> {shard.sharding = #shard<@mesh, [SS(1, 3)]>}) {
  %z = tensor.constant {value = dense<0.0> : tensor<8x96xf32>} : tensor<8x96xf32>
  %0 = tensor.insert_slice %z, %g {dim = 1, end = 64, start = 32, step = 1} : (tensor<8x96xf32>, tensor<8x32xf32>) -> tensor<8x96xf32>
  func.return %0 : tensor<8x96xf32>
}
