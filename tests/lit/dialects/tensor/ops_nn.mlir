// RUN: %roundtrip %s | FileCheck %s

// CHECK-LABEL: func.func @softmax_family(
// CHECK:         %[[SM:.*]] = tensor.softmax %x {dim = 3} : tensor<2x4x8x8xf32>
// CHECK-NEXT:    %[[LSM:.*]] = tensor.log_softmax %l {dim = 1} : tensor<16x64xf32>
func.func @softmax_family(%x: tensor<2x4x8x8xf32>, %l: tensor<16x64xf32>) -> (tensor<2x4x8x8xf32>, tensor<16x64xf32>) {
  %0 = tensor.softmax %x {dim = 3} : tensor<2x4x8x8xf32>
  %1 = tensor.log_softmax %l {dim = 1} : tensor<16x64xf32>
  func.return %0, %1 : tensor<2x4x8x8xf32>, tensor<16x64xf32>
}

// cumsum works on integers too (position ids from an attention mask).
// CHECK-LABEL: func.func @cumsum_positions(
// CHECK:         %[[C:.*]] = tensor.cumsum %m {dim = 1} : tensor<2x8xi64>
func.func @cumsum_positions(%m: tensor<2x8xi64>) -> tensor<2x8xi64> {
  %0 = tensor.cumsum %m {dim = 1} : tensor<2x8xi64>
  func.return %0 : tensor<2x8xi64>
}

// LayerNorm statistics: biased variance and mean over the feature dim.
// CHECK-LABEL: func.func @layer_norm_statistics(
// CHECK:         %[[VAR:.*]] = tensor.var %x {correction = 0, dims = [2], keepdim = true} : (tensor<2x8x32xf32>) -> tensor<2x8x1xf32>
// CHECK-NEXT:    %[[UNB:.*]] = tensor.var %x {correction = 1, dims = [0, 1, 2], keepdim = false} : (tensor<2x8x32xf32>) -> tensor<f32>
func.func @layer_norm_statistics(%x: tensor<2x8x32xf32>) -> (tensor<2x8x1xf32>, tensor<f32>) {
  %0 = tensor.var %x {correction = 0, dims = [2], keepdim = true} : (tensor<2x8x32xf32>) -> tensor<2x8x1xf32>
  %1 = tensor.var %x {correction = 1, dims = [0, 1, 2], keepdim = false} : (tensor<2x8x32xf32>) -> tensor<f32>
  func.return %0, %1 : tensor<2x8x1xf32>, tensor<f32>
}
