// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @compare_unknown_predicate(%a: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error@+1 {{'tensor.compare' op attribute 'predicate' must be one of 'eq', 'ne', 'lt', 'le', 'gt', 'ge'}}
  %0 = tensor.compare %a, %a {predicate = "approx"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// -----

func.func @compare_result_not_i1(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.compare' op result type tensor<4xf32> does not match the inferred type tensor<4xi1>}}
  %0 = tensor.compare %a, %a {predicate = "eq"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @and_of_floats(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.and' op expects integer or i1 operands, got f32}}
  %0 = tensor.and %a, %a : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @select_condition_not_i1(%c: tensor<4xf32>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.select' op condition must be an i1 tensor, got tensor<4xf32>}}
  %0 = tensor.select %c, %a, %a : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @select_values_differ(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xi64>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.select' op operands have different element types: f32, i64}}
  %0 = tensor.select %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xi64>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
