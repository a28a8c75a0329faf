// RUN: %spmdc-opt %s -p bucket-collectives | FileCheck %s

shard.mesh @mesh = <["dp" = 2]>

// Parameter gathers of one block merge into one bucket, placed at the first of them;
// another block gets its own; gradient reduce-scatters of a block merge after their
// last operand.
// CHECK-LABEL: func.func @per_block
// CHECK:      %[[B0:.*]]:2 = comm.all_gather_bucket %h.0.w1, %h.0.w2 {axis = "dp", dims = [0, 0], mesh = @mesh}
// CHECK:      comm.all_gather %h.1.w1
// CHECK:      %[[S:.*]]:2 = comm.reduce_scatter_bucket %g1, %g2 {axis = "dp", dims = [0, 0], mesh = @mesh, op = "sum"}
// CHECK-NEXT: func.return %[[S]]#0, %[[S]]#1
func.func @per_block(%h.0.w1: tensor<4x8xf32> {spmdc.param = "h.0.w1"}, %h.0.w2: tensor<4x8xf32> {spmdc.param = "h.0.w2"},
                     %h.1.w1: tensor<4x8xf32> {spmdc.param = "h.1.w1"}, %x: tensor<8x8xf32>)
    -> (tensor<4x8xf32> {spmdc.grad_of = "h.0.w1"}, tensor<4x8xf32> {spmdc.grad_of = "h.0.w2"}) attributes {spmdc.rank = 0} {
  %a = comm.all_gather %h.0.w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %m = tensor.matmul %x, %a : tensor<8x8xf32> loc("h.0.fc/aten.mm")
  %b = comm.all_gather %h.0.w2 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %n = tensor.matmul %m, %b : tensor<8x8xf32> loc("h.0.fc2/aten.mm")
  %c = comm.all_gather %h.1.w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %o = tensor.matmul %n, %c : tensor<8x8xf32> loc("h.1.fc/aten.mm")
  %g1 = tensor.exp %o : tensor<8x8xf32>
  %g2 = tensor.neg %o : tensor<8x8xf32>
  %r1 = comm.reduce_scatter %g1 {axis = "dp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  %r2 = comm.reduce_scatter %g2 {axis = "dp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %r1, %r2 : tensor<4x8xf32>, tensor<4x8xf32>
}

// Gathers of activations (not parameters) are never bucketed.
// CHECK-LABEL: func.func @do_not_bucket_activations
// CHECK-NOT: bucket
func.func @do_not_bucket_activations(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) attributes {spmdc.rank = 0} {
  %a = comm.all_gather %x {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %b = comm.all_gather %y {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  func.return %a, %b : tensor<8x8xf32>, tensor<8x8xf32>
}
