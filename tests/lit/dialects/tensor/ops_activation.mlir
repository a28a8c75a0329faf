// RUN: %roundtrip %s | FileCheck %s

// CHECK-LABEL: func.func @unary_activations(
// CHECK:         %[[SIG:.*]] = tensor.sigmoid %x : tensor<8x16xf32>
// CHECK-NEXT:    %[[SIN:.*]] = tensor.sin %[[SIG]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[COS:.*]] = tensor.cos %[[SIN]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[ERF:.*]] = tensor.erf %[[COS]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[SILU:.*]] = tensor.silu %[[ERF]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[ABS:.*]] = tensor.abs %[[SILU]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[LOG1P:.*]] = tensor.log1p %[[ABS]] : tensor<8x16xf32>
// CHECK-NEXT:    func.return %[[LOG1P]] : tensor<8x16xf32>
func.func @unary_activations(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = tensor.sigmoid %x : tensor<8x16xf32>
  %1 = tensor.sin %0 : tensor<8x16xf32>
  %2 = tensor.cos %1 : tensor<8x16xf32>
  %3 = tensor.erf %2 : tensor<8x16xf32>
  %4 = tensor.silu %3 : tensor<8x16xf32>
  %5 = tensor.abs %4 : tensor<8x16xf32>
  %6 = tensor.log1p %5 : tensor<8x16xf32>
  func.return %6 : tensor<8x16xf32>
}

// The default approximation ("none", erf) is the absent attribute.
// CHECK-LABEL: func.func @gelu_approximations(
// CHECK:         %[[EXACT:.*]] = tensor.gelu %x : tensor<4xf32>
// CHECK-NEXT:    %[[TANH:.*]] = tensor.gelu %[[EXACT]] {approximate = "tanh"} : tensor<4xf32>
// CHECK-NEXT:    %[[NONE:.*]] = tensor.gelu %[[TANH]] {approximate = "none"} : tensor<4xf32>
func.func @gelu_approximations(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.gelu %x : tensor<4xf32>
  %1 = tensor.gelu %0 {approximate = "tanh"} : tensor<4xf32>
  %2 = tensor.gelu %1 {approximate = "none"} : tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// A rank-0 exponent broadcasts; integer tensors may be clamped with integer bounds.
// CHECK-LABEL: func.func @pow_and_clamp(
// CHECK:         %[[P:.*]] = tensor.pow %x, %e : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %[[C:.*]] = tensor.clamp %[[P]] {max = 6.0, min = 0.0} : tensor<8x16xf32>
// CHECK-NEXT:    %[[LO:.*]] = tensor.clamp %[[C]] {min = -1.5} : tensor<8x16xf32>
// CHECK-NEXT:    %[[I:.*]] = tensor.clamp %i {max = 63, min = 0} : tensor<8xi64>
func.func @pow_and_clamp(%x: tensor<8x16xf32>, %e: tensor<f32>, %i: tensor<8xi64>) -> (tensor<8x16xf32>, tensor<8xi64>) {
  %0 = tensor.pow %x, %e : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
  %1 = tensor.clamp %0 {max = 6.0, min = 0.0} : tensor<8x16xf32>
  %2 = tensor.clamp %1 {min = -1.5} : tensor<8x16xf32>
  %3 = tensor.clamp %i {max = 63, min = 0} : tensor<8xi64>
  func.return %2, %3 : tensor<8x16xf32>, tensor<8xi64>
}

// sign is also defined on integers (the backward of abs uses it).
// CHECK-LABEL: func.func @sign_ops(
// CHECK:         %[[F:.*]] = tensor.sign %x : tensor<4xf32>
// CHECK-NEXT:    %[[I:.*]] = tensor.sign %i : tensor<4xi64>
func.func @sign_ops(%x: tensor<4xf32>, %i: tensor<4xi64>) -> (tensor<4xf32>, tensor<4xi64>) {
  %0 = tensor.sign %x : tensor<4xf32>
  %1 = tensor.sign %i : tensor<4xi64>
  func.return %0, %1 : tensor<4xf32>, tensor<4xi64>
}
