// RUN: %spmdc-opt %s -p sharding-propagation | FileCheck %s

shard.mesh @mesh = <["dp" = 2, "tp" = 2]>

// Column-parallel then row-parallel: the hidden activation is S(1) on tp, the
// second matmul's output P(sum): its contraction dim is sharded.
// CHECK-LABEL: func.func @megatron_mlp
// CHECK: tensor.matmul %x, %w1 {shard.sharding = [#shard<@mesh, [R, S(1)]>]}
// CHECK: tensor.relu %h {shard.sharding = [#shard<@mesh, [R, S(1)]>]}
// CHECK: tensor.matmul %a, %w2 {shard.sharding = [#shard<@mesh, [R, P(sum)]>]}
func.func @megatron_mlp(%x: tensor<8x16xf32>,
                        %w1: tensor<16x32xf32> {shard.sharding = #shard<@mesh, [R, S(1)]>},
                        %w2: tensor<32x16xf32> {shard.sharding = #shard<@mesh, [R, S(0)]>}) -> tensor<8x16xf32> {
  %h = tensor.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a = tensor.relu %h : tensor<8x32xf32>
  %y = tensor.matmul %a, %w2 : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}

// The batch layout flows through elementwise ops and broadcasts of a replicated bias.
// CHECK-LABEL: func.func @batch_parallel
// CHECK-SAME: %x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}
// CHECK-SAME: %b: tensor<16xf32> {shard.sharding = #shard<@mesh, [R, R]>}
// CHECK: tensor.add %x, %b {shard.sharding = [#shard<@mesh, [S(0), R]>]}
// CHECK: tensor.exp %0 {shard.sharding = [#shard<@mesh, [S(0), R]>]}
func.func @batch_parallel(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}, %b: tensor<16xf32>) -> tensor<8x16xf32> {
  %0 = tensor.add %x, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %1 = tensor.exp %0 : tensor<8x16xf32>
  func.return %1 : tensor<8x16xf32>
}

// Summing over a sharded dim leaves a Partial; summing over the other keeps the shard.
// CHECK-LABEL: func.func @reductions
// CHECK: tensor.sum %x {dims = [0], keepdim = false, shard.sharding = [#shard<@mesh, [P(sum), R]>]}
// CHECK: tensor.sum %x {dims = [1], keepdim = false, shard.sharding = [#shard<@mesh, [S(0), R]>]}
// CHECK: tensor.max %x {dims = [0], keepdim = false, shard.sharding = [#shard<@mesh, [P(max), R]>]}
func.func @reductions(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> (tensor<16xf32>, tensor<8xf32>, tensor<16xf32>) {
  %0 = tensor.sum %x {dims = [0], keepdim = false} : (tensor<8x16xf32>) -> tensor<16xf32>
  %1 = tensor.sum %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>
  %2 = tensor.max %x {dims = [0], keepdim = false} : (tensor<8x16xf32>) -> tensor<16xf32>
  func.return %0, %1, %2 : tensor<16xf32>, tensor<8xf32>, tensor<16xf32>
}

// User annotations win: the annotated value keeps its layout even though its
// producer would have left it sharded.
// CHECK-LABEL: func.func @annotation_wins
// CHECK: tensor.relu %x {shard.sharding = [#shard<@mesh, [S(0), R]>]}
// CHECK: shard.annotate %0 {shard.sharding = [#shard<@mesh, [R, R]>], sharding = #shard<@mesh, [R, R]>}
// CHECK: tensor.exp %1 {shard.sharding = [#shard<@mesh, [R, R]>]}
func.func @annotation_wins(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> tensor<8x16xf32> {
  %0 = tensor.relu %x : tensor<8x16xf32>
  %1 = shard.annotate %0 {sharding = #shard<@mesh, [R, R]>} : tensor<8x16xf32>
  %2 = tensor.exp %1 : tensor<8x16xf32>
  func.return %2 : tensor<8x16xf32>
}

// Backward: a constant takes the layout its user needs; an annotated result
// decides the layout of a value nothing else constrains.
// CHECK-LABEL: func.func @backward_to_constant
// CHECK: tensor.constant {shard.sharding = [#shard<@mesh, [S(0), R]>], value = dense<1.0>
// CHECK: tensor.mul %x, %c {shard.sharding = [#shard<@mesh, [S(0), R]>]}
func.func @backward_to_constant(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> tensor<8x16xf32> {
  %c = tensor.constant {value = dense<1.0> : tensor<8x16xf32>} : tensor<8x16xf32>
  %0 = tensor.mul %x, %c : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// A non-splat constant differs per element: it must stay replicated.
// CHECK-LABEL: func.func @do_not_shard_nonsplat_constant
// CHECK: tensor.constant {shard.sharding = [#shard<@mesh, [R, R]>]
func.func @do_not_shard_nonsplat_constant(%x: tensor<2xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> tensor<2xf32> {
  %c = tensor.constant {value = dense<[1.0, 2.0]> : tensor<2xf32>} : tensor<2xf32>
  %0 = tensor.mul %x, %c : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// P(sum) + R cannot stay Partial (R would be added n times): the cost model picks
// reduce-scatter into S(0) over all-reduce into R.
// CHECK-LABEL: func.func @do_not_make_partial_from_replicated
// CHECK: tensor.add %x, %y {shard.sharding = [#shard<@mesh, [S(0), R]>]}
func.func @do_not_make_partial_from_replicated(%x: tensor<8xf32> {shard.sharding = #shard<@mesh, [P(sum), R]>}, %y: tensor<8xf32>) -> tensor<8xf32> {
  %0 = tensor.add %x, %y : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// Embedding backward: scattering batch-sharded gradients into a zero table leaves each
// rank a partial table (the zeros are Partial for free): no gather of the activations.
// CHECK-LABEL: func.func @embedding_backward_is_partial
// CHECK: tensor.constant {shard.sharding = [#shard<@mesh, [P(sum), R]>], value = dense<0.0>
// CHECK: tensor.index_put %z, %ids, %g {accumulate = true, shard.sharding = [#shard<@mesh, [P(sum), R]>]}
func.func @embedding_backward_is_partial(%ids: tensor<8xi64> {shard.sharding = #shard<@mesh, [S(0), R]>},
                                         %g: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>})
    -> (tensor<32x16xf32> {spmdc.grad_of = "wte.weight", shard.sharding = #shard<@mesh, [S(0), R]>}) {
  %z = tensor.constant {value = dense<0.0> : tensor<32x16xf32>} : tensor<32x16xf32>
  %0 = tensor.index_put %z, %ids, %g {accumulate = true} : (tensor<32x16xf32>, tensor<8xi64>, tensor<8x16xf32>) -> tensor<32x16xf32>
  func.return %0 : tensor<32x16xf32>
}

// Without accumulate the positions are overwritten, not summed: no Partial.
// CHECK-LABEL: func.func @do_not_make_overwriting_index_put_partial
// CHECK-NOT: P(sum)
// CHECK: func.return
func.func @do_not_make_overwriting_index_put_partial(%ids: tensor<8xi64> {shard.sharding = #shard<@mesh, [S(0), R]>},
                                                     %g: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> tensor<32x16xf32> {
  %z = tensor.constant {value = dense<0.0> : tensor<32x16xf32>} : tensor<32x16xf32>
  %0 = tensor.index_put %z, %ids, %g {accumulate = false} : (tensor<32x16xf32>, tensor<8xi64>, tensor<8x16xf32>) -> tensor<32x16xf32>
  func.return %0 : tensor<32x16xf32>
}

// A tied embedding's gradient, returned unreduced (gradient accumulation): CSE leaves one zero
// constant under both scatter-adds (wte's and wpe's). Each keeps its partial sum (sharing a zero
// made Partial costs nothing: no reduction per user), so the add of the two partial sums (the lm_head
// matmul's and the scatter-add's) stays a partial sum too, not a reduce-scatter per micro-batch.
// CHECK-LABEL: func.func @tied_grad_shared_zero
// CHECK: %zero = tensor.constant {shard.sharding = [#shard<@mesh, [P(sum), R]>]
// CHECK: tensor.index_put %zero, %pos, %dp {accumulate = true, shard.sharding = [#shard<@mesh, [P(sum), R]>]}
// CHECK: tensor.index_put %zero, %ids, %dy {accumulate = true, shard.sharding = [#shard<@mesh, [P(sum), R]>]}
// CHECK: tensor.add %mm, %ip {shard.sharding = [#shard<@mesh, [P(sum), R]>]}
func.func @tied_grad_shared_zero(%ids: tensor<4x8xi64> {shard.sharding = #shard<@mesh, [S(0), R]>},
                                 %dy: tensor<4x8x32xf32> {shard.sharding = #shard<@mesh, [S(0), R]>},
                                 %pos: tensor<4x8xi64> {shard.sharding = #shard<@mesh, [S(0), R]>},
                                 %dp: tensor<4x8x32xf32> {shard.sharding = #shard<@mesh, [S(0), R]>},
                                 %gt: tensor<64x32xf32> {shard.sharding = #shard<@mesh, [S(1), R]>},
                                 %h: tensor<32x32xf32> {shard.sharding = #shard<@mesh, [S(0), R]>})
    -> (tensor<64x32xf32>, tensor<64x32xf32>) {
  %zero = tensor.constant {value = dense<0.0> : tensor<64x32xf32>} : tensor<64x32xf32>
  %mm = tensor.matmul %gt, %h : (tensor<64x32xf32>, tensor<32x32xf32>) -> tensor<64x32xf32>
  %wpe = tensor.index_put %zero, %pos, %dp {accumulate = true} : (tensor<64x32xf32>, tensor<4x8xi64>, tensor<4x8x32xf32>) -> tensor<64x32xf32>
  %ip = tensor.index_put %zero, %ids, %dy {accumulate = true} : (tensor<64x32xf32>, tensor<4x8xi64>, tensor<4x8x32xf32>) -> tensor<64x32xf32>
  %g = tensor.add %mm, %ip : tensor<64x32xf32>
  func.return %g, %wpe : tensor<64x32xf32>, tensor<64x32xf32>
}
