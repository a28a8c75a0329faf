// RUN: %spmdc-opt %s -p bucket-collectives | FileCheck %s

shard.mesh @mesh = <["dp" = 2]>

// Parameter gathers of one block merge into one bucket, placed at the first of them; a
// block of one parameter joins its neighbour instead of launching alone; gradient
// reduce-scatters of a block merge after their last operand.
// CHECK-LABEL: func.func @per_block
// CHECK:      %[[B0:.*]]:3 = comm.all_gather_bucket %h.0.w1, %h.0.w2, %h.1.w1 {axis = "dp", dims = [0, 0, 0], mesh = @mesh}
// CHECK-NOT:  comm.all_gather %
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

// Two blocks of two parameters each: a bucket per block. The embedding (one parameter,
// first) joins the next block's bucket.
// CHECK-LABEL: func.func @two_blocks
// CHECK:      comm.all_gather_bucket %wte, %h.0.w1, %h.0.w2 {axis = "dp", dims = [0, 0, 0], mesh = @mesh}
// CHECK:      comm.all_gather_bucket %h.1.w1, %h.1.w2 {axis = "dp", dims = [0, 0], mesh = @mesh}
func.func @two_blocks(%wte: tensor<4x8xf32> {spmdc.param = "wte"}, %h.0.w1: tensor<4x8xf32> {spmdc.param = "h.0.w1"},
                      %h.0.w2: tensor<4x8xf32> {spmdc.param = "h.0.w2"}, %h.1.w1: tensor<4x8xf32> {spmdc.param = "h.1.w1"},
                      %h.1.w2: tensor<4x8xf32> {spmdc.param = "h.1.w2"}, %x: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {spmdc.rank = 0} {
  %e = comm.all_gather %wte {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %x0 = tensor.matmul %x, %e : tensor<8x8xf32> loc("wte/aten.mm")
  %a = comm.all_gather %h.0.w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %m = tensor.matmul %x0, %a : tensor<8x8xf32> loc("h.0.fc/aten.mm")
  %b = comm.all_gather %h.0.w2 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %n = tensor.matmul %m, %b : tensor<8x8xf32> loc("h.0.fc2/aten.mm")
  %c = comm.all_gather %h.1.w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %o = tensor.matmul %n, %c : tensor<8x8xf32> loc("h.1.fc/aten.mm")
  %d = comm.all_gather %h.1.w2 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %p = tensor.matmul %o, %d : tensor<8x8xf32> loc("h.1.fc2/aten.mm")
  func.return %p : tensor<8x8xf32>
}

// DDP: the gradient all-reduces of a block (replicated parameters) become one
// all_reduce_bucket after their last operand; the loss's all-reduce is left alone.
// CHECK-LABEL: func.func @ddp
// CHECK:      %[[L:.*]] = comm.all_reduce %loss
// CHECK:      %[[R:.*]]:2 = comm.all_reduce_bucket %g1, %g2 {axes = ["dp"], mesh = @mesh, op = "sum"} : (tensor<8x8xf32>, tensor<8xf32>) -> (tensor<8x8xf32>, tensor<8xf32>)
// CHECK-NEXT: func.return %[[L]], %[[R]]#0, %[[R]]#1
func.func @ddp(%h.0.w: tensor<8x8xf32> {spmdc.param = "h.0.w"}, %h.0.b: tensor<8xf32> {spmdc.param = "h.0.b"},
               %x: tensor<8x8xf32>, %loss: tensor<f32>)
    -> (tensor<f32> {spmdc.loss}, tensor<8x8xf32> {spmdc.grad_of = "h.0.w"}, tensor<8xf32> {spmdc.grad_of = "h.0.b"}) attributes {spmdc.rank = 0} {
  %l = comm.all_reduce %loss {axes = ["dp"], mesh = @mesh, op = "sum"} : tensor<f32>
  %g1 = tensor.exp %x : tensor<8x8xf32>
  %r1 = comm.all_reduce %g1 {axes = ["dp"], mesh = @mesh, op = "sum"} : tensor<8x8xf32>
  %g2 = tensor.sum %x {dims = [0]} : (tensor<8x8xf32>) -> tensor<8xf32>
  %r2 = comm.all_reduce %g2 {axes = ["dp"], mesh = @mesh, op = "sum"} : tensor<8xf32>
  func.return %l, %r1, %r2 : tensor<f32>, tensor<8x8xf32>, tensor<8xf32>
}

// Manual buckets (the plan's `buckets`, as `spmdc.bucket` on the parameters): the two blocks'
// gathers become one bucket because the user grouped them; the embedding, in a bucket of its
// own, does not join them even alone.
// CHECK-LABEL: func.func @manual
// CHECK:      comm.all_gather %wte
// CHECK:      comm.all_gather_bucket %h.0.w1, %h.1.w1 {axis = "dp", dims = [0, 0], mesh = @mesh}
// CHECK-NOT:  comm.all_gather
func.func @manual(%wte: tensor<4x8xf32> {spmdc.param = "wte", spmdc.bucket = "wte"},
                  %h.0.w1: tensor<4x8xf32> {spmdc.param = "h.0.w1", spmdc.bucket = "h.*"},
                  %h.1.w1: tensor<4x8xf32> {spmdc.param = "h.1.w1", spmdc.bucket = "h.*"}, %x: tensor<8x8xf32>)
    -> tensor<8x8xf32> attributes {spmdc.rank = 0} {
  %e = comm.all_gather %wte {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %x0 = tensor.matmul %x, %e : tensor<8x8xf32> loc("wte/aten.mm")
  %a = comm.all_gather %h.0.w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %m = tensor.matmul %x0, %a : tensor<8x8xf32> loc("h.0.fc/aten.mm")
  %c = comm.all_gather %h.1.w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %o = tensor.matmul %m, %c : tensor<8x8xf32> loc("h.1.fc/aten.mm")
  func.return %o : tensor<8x8xf32>
}
