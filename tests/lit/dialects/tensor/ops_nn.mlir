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

// Attention with a causal mask and with a boolean mask; its gradient recomputes the probabilities.
// CHECK-LABEL: func.func @attention_forms(
// CHECK:         %[[O:.*]] = tensor.attention %q, %k, %v {is_causal = true, scale = 0.5} : tensor<1x2x4x4xf32>
// CHECK-NEXT:    %[[M:.*]] = tensor.attention %q, %k, %v, %m {scale = 0.5} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<1x2x4x4xf32>
// CHECK-NEXT:    %[[G:.*]]:3 = tensor.attention_grad %do, %q, %k, %v, %[[O]] {is_causal = true, scale = 0.5} : tensor<1x2x4x4xf32>
func.func @attention_forms(%q: tensor<1x2x4x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>,
                           %m: tensor<1x1x4x4xi1>, %do: tensor<1x2x4x4xf32>)
    -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %o = tensor.attention %q, %k, %v {is_causal = true, scale = 0.5} : tensor<1x2x4x4xf32>
  %om = tensor.attention %q, %k, %v, %m {scale = 0.5} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<1x2x4x4xf32>
  %g:3 = tensor.attention_grad %do, %q, %k, %v, %o {is_causal = true, scale = 0.5} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>)
  func.return %om, %g#0, %g#2 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// Boolean reductions of masks.
// CHECK-LABEL: func.func @mask_reductions(
// CHECK:         tensor.all %m {dims = [1], keepdim = false} : (tensor<2x8xi1>) -> tensor<2xi1>
// CHECK-NEXT:    tensor.any %m {dims = [0, 1], keepdim = true} : (tensor<2x8xi1>) -> tensor<1x1xi1>
func.func @mask_reductions(%m: tensor<2x8xi1>) -> (tensor<2xi1>, tensor<1x1xi1>) {
  %0 = tensor.all %m {dims = [1], keepdim = false} : (tensor<2x8xi1>) -> tensor<2xi1>
  %1 = tensor.any %m {dims = [0, 1], keepdim = true} : (tensor<2x8xi1>) -> tensor<1x1xi1>
  func.return %0, %1 : tensor<2xi1>, tensor<1x1xi1>
}
