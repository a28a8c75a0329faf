// RUN: %spmdc-opt %s -p 'lower-redistribution' | FileCheck %s
// RUN: %spmdc-opt %s -p 'lower-redistribution,partition{rank=3}' | FileCheck %s --check-prefix=LOCAL

// Each primitive on 4 ranks lowers to exactly one collective, with uneven sizes 13 and 14.
shard.mesh @mesh = <["tp" = 4]>

// CHECK-LABEL: func.func @s_to_r
// CHECK-NEXT: comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh
// CHECK-NEXT: func.return
// LOCAL-LABEL: func.func @s_to_r
// LOCAL: comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<1x14xf32>) -> tensor<13x14xf32>
func.func @s_to_r(%x: tensor<13x14xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<13x14xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0)]>, to = #shard<@mesh, [R]>} : tensor<13x14xf32>
  func.return %0 : tensor<13x14xf32>
}

// CHECK-LABEL: func.func @r_to_s
// CHECK-NEXT: comm.all_slice %x {axis = "tp", dim = 1, mesh = @mesh
// CHECK-NEXT: func.return
// LOCAL-LABEL: func.func @r_to_s
// LOCAL: comm.all_slice %x {axis = "tp", dim = 1, mesh = @mesh} : (tensor<13x14xf32>) -> tensor<13x2xf32>
func.func @r_to_s(%x: tensor<13x14xf32> {shard.sharding = #shard<@mesh, [R]>}) -> tensor<13x14xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [R]>, to = #shard<@mesh, [S(1)]>} : tensor<13x14xf32>
  func.return %0 : tensor<13x14xf32>
}

// CHECK-LABEL: func.func @p_to_r
// CHECK-NEXT: comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"
// CHECK-NEXT: func.return
func.func @p_to_r(%x: tensor<13x14xf32> {shard.sharding = #shard<@mesh, [P(sum)]>}) -> tensor<13x14xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [P(sum)]>, to = #shard<@mesh, [R]>} : tensor<13x14xf32>
  func.return %0 : tensor<13x14xf32>
}

// CHECK-LABEL: func.func @p_to_s
// CHECK-NEXT: comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "sum"
// CHECK-NEXT: func.return
// LOCAL-LABEL: func.func @p_to_s
// LOCAL: comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<13x14xf32>) -> tensor<1x14xf32>
func.func @p_to_s(%x: tensor<13x14xf32> {shard.sharding = #shard<@mesh, [P(sum)]>}) -> tensor<13x14xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [P(sum)]>, to = #shard<@mesh, [S(0)]>} : tensor<13x14xf32>
  func.return %0 : tensor<13x14xf32>
}

// CHECK-LABEL: func.func @s0_to_s1
// CHECK-NEXT: comm.all_to_all %x {axis = "tp", concat_dim = 0, mesh = @mesh
// CHECK-SAME: split_dim = 1
// CHECK-NEXT: func.return
// LOCAL-LABEL: func.func @s0_to_s1
// LOCAL: comm.all_to_all %x {{.*}} : (tensor<1x14xf32>) -> tensor<13x2xf32>
func.func @s0_to_s1(%x: tensor<13x14xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<13x14xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0)]>, to = #shard<@mesh, [S(1)]>} : tensor<13x14xf32>
  func.return %0 : tensor<13x14xf32>
}

// CHECK-LABEL: func.func @do_not_communicate_same_layout
// CHECK-NOT: comm.
// CHECK: func.return %x
func.func @do_not_communicate_same_layout(%x: tensor<13x14xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<13x14xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0)]>, to = #shard<@mesh, [S(0)]>} : tensor<13x14xf32>
  func.return %0 : tensor<13x14xf32>
}
