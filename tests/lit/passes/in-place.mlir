// RUN: %spmdc-opt %s -p in-place | FileCheck %s

// A chain of elementwise ops on buffers that die at their next use: every link but the
// first writes into the buffer it reads (operand #0, or #1 when #0 is still needed).
// CHECK-LABEL: func.func @chain(
// CHECK:      %[[M:.*]] = tensor.matmul %x, %w
// CHECK-NEXT: %[[A:.*]] = tensor.add %[[M]], %b {inplace = 0}
// CHECK-NEXT: %[[T:.*]] = tensor.tanh %[[A]] {inplace = 0}
// CHECK-NEXT: %[[S:.*]] = tensor.mul %x2, %[[T]] {inplace = 1}
// CHECK-NEXT: func.return %[[S]], %x2
func.func @chain(%x: tensor<4x8xf32>, %w: tensor<8x4xf32>, %b: tensor<4xf32>, %x2: tensor<4x4xf32>)
    -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %m = tensor.matmul %x, %w : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %a = tensor.add %m, %b : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %t = tensor.tanh %a : tensor<4x4xf32>
  %s = tensor.mul %x2, %t : tensor<4x4xf32>
  func.return %s, %x2 : tensor<4x4xf32>, tensor<4x4xf32>
}

// Never into an argument (a parameter or an input), a buffer still used later, a smaller
// operand (broadcast to the result), or the result of a cast (`.to` may return its input itself);
// the buffer's last use may write into it.
// CHECK-LABEL: func.func @not_in_place(
// CHECK:      %[[E:.*]] = tensor.exp %x : tensor<4x4xf32>
// CHECK-NEXT: %[[R:.*]] = tensor.relu %v : tensor<4xf32>
// CHECK-NEXT: tensor.add %[[E]], %[[R]] : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: tensor.neg %[[E]] {inplace = 0} : tensor<4x4xf32>
// CHECK-NEXT: %[[C:.*]] = tensor.cast %x
// CHECK-NEXT: %[[D:.*]] = tensor.cast %[[C]]
// CHECK-NEXT: tensor.exp %[[D]] : tensor<4x4xf32>
func.func @not_in_place(%x: tensor<4x4xf32>, %v: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %e = tensor.exp %x : tensor<4x4xf32>
  %r = tensor.relu %v : tensor<4xf32>
  %s = tensor.add %e, %r : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %n = tensor.neg %e : tensor<4x4xf32>
  %c = tensor.cast %x : (tensor<4x4xf32>) -> tensor<4x4xf16>
  %d = tensor.cast %c : (tensor<4x4xf16>) -> tensor<4x4xf32>
  %z = tensor.exp %d : tensor<4x4xf32>
  func.return %n, %s, %z : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// A buffer read through a view by the same op (its transpose) is not written while read.
// CHECK-LABEL: func.func @read_through_a_view(
// CHECK:      %[[P:.*]] = tensor.permute
// CHECK-NEXT: tensor.add %[[E:.*]], %[[P]] : tensor<4x4xf32>
func.func @read_through_a_view(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %e = tensor.exp %x : tensor<4x4xf32>
  %p = tensor.permute %e {perm = [1, 0]} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %s = tensor.add %e, %p : tensor<4x4xf32>
  func.return %s : tensor<4x4xf32>
}

// A cross-entropy's backward scatters into zeros (a splat constant: `torch.full` on every call) that
// die there: written in place (`scatter_`), and the next elementwise op writes into the scatter's
// result (a gather or a scatter always returns a new tensor). Never into a dense constant (a large
// one is a tensor shared between calls) or an argument.
// CHECK-LABEL: func.func @scatter(
// CHECK:      %[[S:.*]] = tensor.scatter %{{.*}}, %i, %s {dim = 1, inplace = 0}
// CHECK-NEXT: tensor.mul %[[S]], %k {inplace = 0}
// CHECK:      tensor.scatter %{{.*}}, %i, %s {dim = 1} :
// CHECK:      tensor.scatter %x, %i, %s {dim = 1} :
func.func @scatter(%x: tensor<4x8xf32>, %i: tensor<4x1xi64>, %s: tensor<4x1xf32>, %k: tensor<4x1xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %z = tensor.constant {value = dense<0.0> : tensor<4x8xf32>} : tensor<4x8xf32>
  %g = tensor.scatter %z, %i, %s {dim = 1} : (tensor<4x8xf32>, tensor<4x1xi64>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %m = tensor.mul %g, %k : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %d = tensor.constant {value = dense<[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]]> : tensor<4x8xf32>} : tensor<4x8xf32>
  %h = tensor.scatter %d, %i, %s {dim = 1} : (tensor<4x8xf32>, tensor<4x1xi64>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %a = tensor.scatter %x, %i, %s {dim = 1} : (tensor<4x8xf32>, tensor<4x1xi64>, tensor<4x1xf32>) -> tensor<4x8xf32>
  func.return %m, %h, %a : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
