// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @softmax_dim_out_of_range(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'tensor.softmax' op dim 2 is out of range for a rank-2 tensor}}
  %0 = tensor.softmax %x {dim = 2} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

func.func @softmax_of_integers(%x: tensor<8xi64>) -> tensor<8xi64> {
  // expected-error@+1 {{'tensor.softmax' op expects a floating-point tensor, got tensor<8xi64>}}
  %0 = tensor.softmax %x {dim = 0} : tensor<8xi64>
  func.return %0 : tensor<8xi64>
}

// -----

func.func @cumsum_without_dim(%x: tensor<8xi64>) -> tensor<8xi64> {
  // expected-error@+1 {{'tensor.cumsum' op requires attribute 'dim'}}
  %0 = tensor.cumsum %x : tensor<8xi64>
  func.return %0 : tensor<8xi64>
}

// -----

func.func @var_without_correction(%x: tensor<8x16xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'tensor.var' op requires attribute 'correction'}}
  %0 = tensor.var %x {dims = [1]} : (tensor<8x16xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
