// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @unknown_distribution() -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.random' op unknown distribution 'poisson'; expected one of uniform, normal, bernoulli, randint}}
  %0 = tensor.random {distribution = "poisson"} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @missing_parameter() -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.random' op distribution 'normal' needs attribute 'std'}}
  %0 = tensor.random {distribution = "normal", mean = 0.0} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @parameter_of_another_distribution() -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.random' op attribute 'mean' is not a parameter of distribution 'bernoulli'}}
  %0 = tensor.random {distribution = "bernoulli", p = 0.5, mean = 0.0} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @probability_out_of_range() -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.random' op bernoulli probability p = 1.5 is outside [0, 1]}}
  %0 = tensor.random {distribution = "bernoulli", p = 1.5} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @empty_integer_range() -> tensor<4xi64> {
  // expected-error@+1 {{'tensor.random' op randint needs integers low < high, got [3, 3)}}
  %0 = tensor.random {distribution = "randint", low = 3, high = 3} : tensor<4xi64>
  func.return %0 : tensor<4xi64>
}

// -----

func.func @normal_integers() -> tensor<4xi64> {
  // expected-error@+1 {{'tensor.random' op distribution 'normal' needs a floating-point result, got tensor<4xi64>}}
  %0 = tensor.random {distribution = "normal", mean = 0.0, std = 1.0} : tensor<4xi64>
  func.return %0 : tensor<4xi64>
}

// -----

func.func @piece_outside_the_tensor() -> tensor<4x16xf32> {
  // expected-error@+1 {{'tensor.random' op piece [4, 16] at offset [6, 0] does not fit global shape [8, 16]}}
  %0 = tensor.random {distribution = "bernoulli", p = 0.9, global_shape = [8, 16], offset = [6, 0]} : tensor<4x16xf32>
  func.return %0 : tensor<4x16xf32>
}

// -----

func.func @offset_without_global_shape() -> tensor<4x16xf32> {
  // expected-error@+1 {{'tensor.random' op attributes 'global_shape' and 'offset' go together, as integer arrays}}
  %0 = tensor.random {distribution = "bernoulli", p = 0.9, offset = [0, 0]} : tensor<4x16xf32>
  func.return %0 : tensor<4x16xf32>
}

// -----

func.func @stream_without_seed() -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.random' op attribute 'stream' needs the counter mode's seed operand}}
  %0 = tensor.random {distribution = "bernoulli", p = 0.9, stream = 0} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @seed_of_wrong_type(%s: tensor<i32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.random' op seed operand must be tensor<i64>, got tensor<i32>}}
  %0 = tensor.random %s {distribution = "bernoulli", p = 0.9, stream = 0} : (tensor<i32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
