// RUN: %roundtrip %s | FileCheck %s

// Eager mode (no operand): the draws single-device PyTorch makes.
// CHECK-LABEL: func.func @eager_draws(
// CHECK:         tensor.random {distribution = "bernoulli", p = 0.9} : tensor<8x16xf32>
// CHECK-NEXT:    tensor.random {distribution = "uniform", high = 1.0, low = 0.0} : tensor<8x16xbf16>
// CHECK-NEXT:    tensor.random {distribution = "normal", mean = 0.0, std = 2.0} : tensor<4xf32>
// CHECK-NEXT:    tensor.random {distribution = "randint", high = 10, low = 0} : tensor<4xi64>
func.func @eager_draws() -> (tensor<8x16xf32>, tensor<8x16xbf16>, tensor<4xf32>, tensor<4xi64>) {
  %0 = tensor.random {distribution = "bernoulli", p = 0.9} : tensor<8x16xf32>
  %1 = tensor.random {distribution = "uniform", low = 0.0, high = 1.0} : tensor<8x16xbf16>
  %2 = tensor.random {distribution = "normal", mean = 0.0, std = 2.0} : tensor<4xf32>
  %3 = tensor.random {distribution = "randint", low = 0, high = 10} : tensor<4xi64>
  func.return %0, %1, %2, %3 : tensor<8x16xf32>, tensor<8x16xbf16>, tensor<4xf32>, tensor<4xi64>
}

// A rank's piece of a global draw (after partition), and the counter mode.
// CHECK-LABEL: func.func @pieces_and_counters(
// CHECK:         tensor.random {distribution = "bernoulli", global_shape = [8, 16], offset = [4, 0], p = 0.9} : tensor<4x16xf32>
// CHECK-NEXT:    %[[S:.*]] = tensor.rng_seed : tensor<i64>
// CHECK-NEXT:    tensor.random %[[S]] {distribution = "bernoulli", p = 0.9, stream = 0} : (tensor<i64>) -> tensor<8x16xf32>
func.func @pieces_and_counters() -> (tensor<4x16xf32>, tensor<8x16xf32>) {
  %0 = tensor.random {distribution = "bernoulli", p = 0.9, global_shape = [8, 16], offset = [4, 0]} : tensor<4x16xf32>
  %s = tensor.rng_seed : tensor<i64>
  %1 = tensor.random %s {distribution = "bernoulli", p = 0.9, stream = 0} : (tensor<i64>) -> tensor<8x16xf32>
  func.return %0, %1 : tensor<4x16xf32>, tensor<8x16xf32>
}
