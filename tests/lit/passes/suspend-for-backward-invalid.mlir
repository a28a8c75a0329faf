// RUN: %spmdc-opt %s -p 'suspend-for-backward{first=1 count=1}' --split-input-file --verify-diagnostics
// RUN: not %spmdc-opt %s -p 'suspend-for-backward{first=1 count=3}' --split-input-file 2>&1 | FileCheck %s --check-prefix=TOO-MANY

// A model output that reads the output gradient cannot be handed back before the backward.
// TOO-MANY: error: 'func.func' op suspend-for-backward: inputs 1..3 do not exist (the function has 2 inputs)
// expected-error@+1 {{'func.func' op suspend-for-backward: result #1 (a model output) depends on the inputs resumed after the suspension}}
func.func @main(%x: tensor<4xf32>, %g: tensor<4xf32>) -> (tensor<f32> {spmdc.loss}, tensor<4xf32>) {
  %m = tensor.mul %x, %g : tensor<4xf32>
  %l = tensor.sum %m {dims = [0], keepdim = false} : (tensor<4xf32>) -> tensor<f32>
  func.return %l, %m : tensor<f32>, tensor<4xf32>
}

// -----

// func.suspend names, for each operand, the function result it is.
func.func @names_a_missing_result(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.suspend' op 'results' must give, for each of its 1 operands, the index of a result of the function (0..0), got [3]}}
  %g = func.suspend %x {results = [3]} : tensor<4xf32>
  func.return %x : tensor<4xf32>
}

// -----

func.func @hands_back_another_value(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.exp %x : tensor<4xf32>
  // expected-error@+1 {{'func.suspend' op operand for result #0 is not the value the function returns there}}
  %g = func.suspend %x {results = [0]} : tensor<4xf32>
  func.return %e : tensor<4xf32>
}

// -----

func.func @suspends_twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.suspend' op a function may suspend at most once}}
  %g = func.suspend %x {results = [0]} : tensor<4xf32>
  %h = func.suspend %x {results = [0]} : tensor<4xf32>
  func.return %x : tensor<4xf32>
}
