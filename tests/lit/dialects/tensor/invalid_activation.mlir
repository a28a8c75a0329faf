// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @sigmoid_of_integers(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error@+1 {{'tensor.sigmoid' op expects a floating-point tensor, got tensor<4xi64>}}
  %0 = tensor.sigmoid %x : tensor<4xi64>
  func.return %0 : tensor<4xi64>
}

// -----

func.func @gelu_unknown_approximation(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.gelu' op attribute 'approximate' must be one of 'none', 'tanh'}}
  %0 = tensor.gelu %x {approximate = "fast"} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @pow_mixed_element_types(%x: tensor<4xf32>, %e: tensor<i64>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.pow' op operands have different element types: f32, i64}}
  %0 = tensor.pow %x, %e : (tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @clamp_without_bounds(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.clamp' op needs at least one of 'min' and 'max'}}
  %0 = tensor.clamp %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @clamp_float_bound_on_integers(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error@+1 {{'tensor.clamp' op float bounds on an integer tensor tensor<4xi64>}}
  %0 = tensor.clamp %x {max = 2.5} : tensor<4xi64>
  func.return %0 : tensor<4xi64>
}
