// RUN: %roundtrip %s | FileCheck %s

// CHECK-LABEL: func.func @conv2d_and_grads(
// CHECK:         %[[Y:.*]] = tensor.conv %x, %w {dilation = [1, 1], groups = 1, padding = [1, 1], stride = [2, 2]} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
// CHECK-NEXT:    tensor.conv_input_grad %[[Y]], %w {dilation = [1, 1], groups = 1, padding = [1, 1], stride = [2, 2]} : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x8x8xf32>
// CHECK-NEXT:    tensor.conv_weight_grad %x, %[[Y]] {dilation = [1, 1], groups = 1, padding = [1, 1], stride = [2, 2]} : (tensor<2x3x8x8xf32>, tensor<2x4x4x4xf32>) -> tensor<4x3x3x3xf32>
func.func @conv2d_and_grads(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>)
    -> (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) {
  %y = tensor.conv %x, %w {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
  %dx = tensor.conv_input_grad %y, %w {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1} : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x8x8xf32>
  %dw = tensor.conv_weight_grad %x, %y {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1} : (tensor<2x3x8x8xf32>, tensor<2x4x4x4xf32>) -> tensor<4x3x3x3xf32>
  func.return %dx, %dw : tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>
}

// Grouped 1-D convolution with dilation.
// CHECK-LABEL: func.func @conv1d_groups(
// CHECK:         tensor.conv %x, %w {dilation = [2], groups = 2, padding = [0], stride = [1]} : (tensor<2x4x16xf32>, tensor<6x2x3xf32>) -> tensor<2x6x12xf32>
func.func @conv1d_groups(%x: tensor<2x4x16xf32>, %w: tensor<6x2x3xf32>) -> tensor<2x6x12xf32> {
  %y = tensor.conv %x, %w {stride = [1], padding = [0], dilation = [2], groups = 2} : (tensor<2x4x16xf32>, tensor<6x2x3xf32>) -> tensor<2x6x12xf32>
  func.return %y : tensor<2x6x12xf32>
}
