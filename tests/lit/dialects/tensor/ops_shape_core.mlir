// RUN: %roundtrip %s | FileCheck %s

// A diagonal of two dims (the others lead, the diagonal last) and its backward, the diagonal
// written into zeros.
// CHECK-LABEL: func.func @diagonal_and_scatter(
// CHECK:         %[[D:.*]] = tensor.diagonal %x {dim1 = 0, dim2 = 2, offset = 1} : (tensor<3x2x4xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %[[M:.*]] = tensor.diagonal %m {dim1 = 0, dim2 = 1, offset = -1} : (tensor<4x3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %[[Z:.*]] = tensor.constant {value = dense<0.0> : tensor<3x2x4xf32>} : tensor<3x2x4xf32>
// CHECK-NEXT:    tensor.diagonal_scatter %[[Z]], %[[D]] {dim1 = 0, dim2 = 2, offset = 1} : (tensor<3x2x4xf32>, tensor<2x3xf32>) -> tensor<3x2x4xf32>
func.func @diagonal_and_scatter(%x: tensor<3x2x4xf32>, %m: tensor<4x3xf32>) -> (tensor<3x2x4xf32>, tensor<3xf32>) {
  %d = tensor.diagonal %x {offset = 1, dim1 = 0, dim2 = 2} : (tensor<3x2x4xf32>) -> tensor<2x3xf32>
  %e = tensor.diagonal %m {offset = -1, dim1 = 0, dim2 = 1} : (tensor<4x3xf32>) -> tensor<3xf32>
  %z = tensor.constant {value = dense<0.0> : tensor<3x2x4xf32>} : tensor<3x2x4xf32>
  %s = tensor.diagonal_scatter %z, %d {offset = 1, dim1 = 0, dim2 = 2} : (tensor<3x2x4xf32>, tensor<2x3xf32>) -> tensor<3x2x4xf32>
  func.return %s, %e : tensor<3x2x4xf32>, tensor<3xf32>
}

// A mixture-of-experts layer: 10 rows in 4 groups (rows 0-2, none, 3-7; rows 8-9 in none: zeros),
// its input gradient (transposed weights) and its weight gradient.
// CHECK-LABEL: func.func @grouped_matmul(
// CHECK:         %[[OFFS:.*]] = tensor.constant {value = dense<[3, 3, 8, 8]> : tensor<4xi32>} : tensor<4xi32>
// CHECK-NEXT:    %[[Y:.*]] = tensor.grouped_matmul %x, %w, %[[OFFS]] : (tensor<10x8xf32>, tensor<4x8x6xf32>, tensor<4xi32>) -> tensor<10x6xf32>
// CHECK-NEXT:    tensor.grouped_matmul %[[Y]], %w, %[[OFFS]] {transpose_w = true} : (tensor<10x6xf32>, tensor<4x8x6xf32>, tensor<4xi32>) -> tensor<10x8xf32>
// CHECK-NEXT:    tensor.grouped_matmul_wgrad %x, %[[Y]], %[[OFFS]] : (tensor<10x8xf32>, tensor<10x6xf32>, tensor<4xi32>) -> tensor<4x8x6xf32>
func.func @grouped_matmul(%x: tensor<10x8xf32>, %w: tensor<4x8x6xf32>) -> (tensor<10x6xf32>, tensor<10x8xf32>, tensor<4x8x6xf32>) {
  %offs = tensor.constant {value = dense<[3, 3, 8, 8]> : tensor<4xi32>} : tensor<4xi32>
  %y = tensor.grouped_matmul %x, %w, %offs : (tensor<10x8xf32>, tensor<4x8x6xf32>, tensor<4xi32>) -> tensor<10x6xf32>
  %dx = tensor.grouped_matmul %y, %w, %offs {transpose_w = true} : (tensor<10x6xf32>, tensor<4x8x6xf32>, tensor<4xi32>) -> tensor<10x8xf32>
  %dw = tensor.grouped_matmul_wgrad %x, %y, %offs : (tensor<10x8xf32>, tensor<10x6xf32>, tensor<4xi32>) -> tensor<4x8x6xf32>
  func.return %y, %dx, %dw : tensor<10x6xf32>, tensor<10x8xf32>, tensor<4x8x6xf32>
}
