// RUN: %roundtrip %s | FileCheck %s

// Extremes, products and the first extreme's index (max.dim / min.dim: a reduction and an arg-reduction).
// CHECK-LABEL: func.func @extremes_and_products(
// CHECK:         tensor.min %x {dims = [1], keepdim = false} : (tensor<4x6xf32>) -> tensor<4xf32>
// CHECK-NEXT:    tensor.prod %x {dims = [1], keepdim = true} : (tensor<4x6xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    tensor.prod %n {dims = [0, 1], keepdim = false} : (tensor<4x6xi64>) -> tensor<i64>
// CHECK-NEXT:    tensor.argmax %x {dim = 1, keepdim = false} : (tensor<4x6xf32>) -> tensor<4xi64>
// CHECK-NEXT:    tensor.argmin %x {dim = 0, keepdim = true} : (tensor<4x6xf32>) -> tensor<1x6xi64>
// CHECK-NEXT:    tensor.argmax %n {keepdim = false} : (tensor<4x6xi64>) -> tensor<i64>
func.func @extremes_and_products(%x: tensor<4x6xf32>, %n: tensor<4x6xi64>) -> (tensor<4xf32>, tensor<4x1xf32>, tensor<i64>, tensor<4xi64>, tensor<1x6xi64>, tensor<i64>) {
  %0 = tensor.min %x {dims = [1], keepdim = false} : (tensor<4x6xf32>) -> tensor<4xf32>
  %1 = tensor.prod %x {dims = [1], keepdim = true} : (tensor<4x6xf32>) -> tensor<4x1xf32>
  %2 = tensor.prod %n {dims = [0, 1], keepdim = false} : (tensor<4x6xi64>) -> tensor<i64>
  %3 = tensor.argmax %x {dim = 1, keepdim = false} : (tensor<4x6xf32>) -> tensor<4xi64>
  %4 = tensor.argmin %x {dim = 0, keepdim = true} : (tensor<4x6xf32>) -> tensor<1x6xi64>
  %5 = tensor.argmax %n {keepdim = false} : (tensor<4x6xi64>) -> tensor<i64>
  func.return %0, %1, %2, %3, %4, %5 : tensor<4xf32>, tensor<4x1xf32>, tensor<i64>, tensor<4xi64>, tensor<1x6xi64>, tensor<i64>
}

// Ordering along a dim: top-k, sort (stable, descending) and the product scan.
// CHECK-LABEL: func.func @ordering(
// CHECK:         %v:2 = tensor.topk %x {dim = 1, k = 2, largest = true, sorted = true} : (tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
// CHECK-NEXT:    %s:2 = tensor.sort %x {descending = true, dim = 0, stable = true} : (tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xi64>)
// CHECK-NEXT:    %ns:2 = tensor.sort %n {dim = 1} : tensor<4x6xi64>
// CHECK-NEXT:    tensor.cumprod %x {dim = 1} : tensor<4x6xf32>
// CHECK-NEXT:    func.return %v#0, %v#1, %s#0, %ns#1, %ns#0, %c
func.func @ordering(%x: tensor<4x6xf32>, %n: tensor<4x6xi64>) -> (tensor<4x2xf32>, tensor<4x2xi64>, tensor<4x6xf32>, tensor<4x6xi64>, tensor<4x6xi64>, tensor<4x6xf32>) {
  %v, %i = tensor.topk %x {dim = 1, k = 2, largest = true, sorted = true} : (tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
  %s, %p = tensor.sort %x {descending = true, dim = 0, stable = true} : (tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xi64>)
  %ns, %np = tensor.sort %n {dim = 1} : (tensor<4x6xi64>) -> (tensor<4x6xi64>, tensor<4x6xi64>)
  %c = tensor.cumprod %x {dim = 1} : tensor<4x6xf32>
  func.return %v, %i, %s, %np, %ns, %c : tensor<4x2xf32>, tensor<4x2xi64>, tensor<4x6xf32>, tensor<4x6xi64>, tensor<4x6xi64>, tensor<4x6xf32>
}

// Indexed reads and reductions into indexed places; a histogram (routing counts).
// CHECK-LABEL: func.func @index_select_scatter_reduce_histc(
// CHECK:         tensor.index_select %x, %rows {dim = 0} : (tensor<4x6xf32>, tensor<8xi64>) -> tensor<8x6xf32>
// CHECK-NEXT:    tensor.scatter_reduce %x, %idx, %src {dim = 1, include_self = true, reduce = "amax"} : (tensor<4x6xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:    tensor.scatter_reduce %x, %idx, %src {dim = 1, include_self = false, reduce = "mean"} : (tensor<4x6xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:    tensor.histc %x {bins = 4, max = 1.0, min = -1.0} : (tensor<4x6xf32>) -> tensor<4xf32>
func.func @index_select_scatter_reduce_histc(%x: tensor<4x6xf32>, %rows: tensor<8xi64>, %idx: tensor<4x2xi64>, %src: tensor<4x2xf32>) -> (tensor<8x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4xf32>) {
  %0 = tensor.index_select %x, %rows {dim = 0} : (tensor<4x6xf32>, tensor<8xi64>) -> tensor<8x6xf32>
  %1 = tensor.scatter_reduce %x, %idx, %src {dim = 1, include_self = true, reduce = "amax"} : (tensor<4x6xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x6xf32>
  %2 = tensor.scatter_reduce %x, %idx, %src {dim = 1, include_self = false, reduce = "mean"} : (tensor<4x6xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x6xf32>
  %3 = tensor.histc %x {bins = 4, max = 1.0, min = -1.0} : (tensor<4x6xf32>) -> tensor<4xf32>
  func.return %0, %1, %2, %3 : tensor<8x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4xf32>
}

// A random permutation drawn from torch's generator (eager mode).
// CHECK-LABEL: func.func @permutation(
// CHECK:         tensor.randperm : tensor<6xi64>
func.func @permutation() -> tensor<6xi64> {
  %0 = tensor.randperm : tensor<6xi64>
  func.return %0 : tensor<6xi64>
}
