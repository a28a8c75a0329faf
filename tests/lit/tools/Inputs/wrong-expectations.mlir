func.func @message_differs(%a: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{does not match the inferred type tensor<16xf32>}}
  %0 = tensor.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @wrong_line(%a: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error@+2 {{does not match the inferred type}}
  %0 = tensor.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @not_expected(%a: tensor<4xf32>) -> tensor<8xf32> {
  %0 = tensor.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @valid_but_error_expected(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{anything}}
  func.return %a : tensor<4xf32>
}
