// RUN: %spmdc-opt %s -p 'bucket-collectives{mode=auto}' | FileCheck %s
// RUN: not %spmdc-opt %s -p 'bucket-collectives{mode=fast}' 2>&1 | FileCheck %s --check-prefix=BAD

shard.mesh @mesh = <["dp" = 2]>

// BAD: mode must be 'blocks' or 'auto', got 'fast'

// The cost model (mode=auto) ignores blocks. Three small gathers with almost no compute
// between their uses: launched alone each would be exposed (nothing to hide behind), so
// they share one bucket.
// CHECK-LABEL: func.func @latency_bound
// CHECK:     comm.all_gather_bucket %w0, %w1, %w2 {axis = "dp", dims = [0, 0, 0], mesh = @mesh}
// CHECK-NOT: comm.all_gather
func.func @latency_bound(%w0: tensor<4x8xf32> {spmdc.param = "a.w"}, %w1: tensor<4x8xf32> {spmdc.param = "b.w"},
                         %w2: tensor<4x8xf32> {spmdc.param = "c.w"}, %x: tensor<8x8xf32>) -> tensor<8x8xf32>
    attributes {spmdc.rank = 0} {
  %a = comm.all_gather %w0 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %y = tensor.matmul %x, %a : tensor<8x8xf32> loc("a/aten.mm")
  %b = comm.all_gather %w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %z = tensor.matmul %y, %b : tensor<8x8xf32> loc("b/aten.mm")
  %c = comm.all_gather %w2 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %o = tensor.matmul %z, %c : tensor<8x8xf32> loc("c/aten.mm")
  func.return %o : tensor<8x8xf32>
}

// A large matmul between the first and second use: the second gather hides behind it when
// launched on its own, so the first bucket closes; the third, with little compute before
// it, joins the second.
// CHECK-LABEL: func.func @closes_where_compute_hides
// CHECK:     %[[A:.*]] = comm.all_gather %w0 {axis = "dp", dim = 0, mesh = @mesh}
// CHECK:     tensor.matmul %big, %big
// CHECK:     comm.all_gather_bucket %w1, %w2 {axis = "dp", dims = [0, 0], mesh = @mesh}
func.func @closes_where_compute_hides(%w0: tensor<4x8xf32> {spmdc.param = "a.w"}, %w1: tensor<4x8xf32> {spmdc.param = "b.w"},
                                      %w2: tensor<4x8xf32> {spmdc.param = "c.w"}, %x: tensor<8x8xf32>,
                                      %big: tensor<2048x2048xf32>) -> (tensor<8x8xf32>, tensor<2048x2048xf32>)
    attributes {spmdc.rank = 0} {
  %a = comm.all_gather %w0 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %y = tensor.matmul %x, %a : tensor<8x8xf32> loc("a/aten.mm")
  %m = tensor.matmul %big, %big : tensor<2048x2048xf32> loc("a/aten.mm")
  %b = comm.all_gather %w1 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %z = tensor.matmul %y, %b : tensor<8x8xf32> loc("b/aten.mm")
  %c = comm.all_gather %w2 {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %o = tensor.matmul %z, %c : tensor<8x8xf32> loc("c/aten.mm")
  func.return %o, %m : tensor<8x8xf32>, tensor<2048x2048xf32>
}
