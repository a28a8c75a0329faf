// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @slice_out_of_bounds(%x: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.slice' op slice [6, 10) is out of bounds for dim 0 of size 8}}
  %0 = tensor.slice %x {dim = 0, end = 10, start = 6, step = 1} : (tensor<8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @slice_wrong_result(%x: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.slice' op result type tensor<4xf32> does not match the inferred type tensor<3xf32>}}
  %0 = tensor.slice %x {dim = 0, end = 6, start = 0, step = 2} : (tensor<8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @slice_missing_step(%x: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.slice' op requires attribute 'step'}}
  %0 = tensor.slice %x {dim = 0, end = 4, start = 0} : (tensor<8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @concat_mismatched_dims(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x6xf32> {
  // expected-error@+1 {{'tensor.concat' op operand tensor<4x3xf32> does not match tensor<2x3xf32> outside dim 1}}
  %0 = tensor.concat %a, %b {dim = 1} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x6xf32>
  func.return %0 : tensor<2x6xf32>
}

// -----

func.func @insert_slice_wrong_source(%d: tensor<2x8xf32>, %s: tensor<2x3xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'tensor.insert_slice' op source tensor<2x3xf32> does not match the slice shape [2, 4]}}
  %0 = tensor.insert_slice %d, %s {dim = 1, end = 4, start = 0, step = 1} : (tensor<2x8xf32>, tensor<2x3xf32>) -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// -----

func.func @pad_wrong_rank(%x: tensor<2x8xf32>) -> tensor<2x9xf32> {
  // expected-error@+1 {{'tensor.pad' op 'low' and 'high' need 2 entries each}}
  %0 = tensor.pad %x {high = [1], low = [0], value = 0.0} : (tensor<2x8xf32>) -> tensor<2x9xf32>
  func.return %0 : tensor<2x9xf32>
}

// -----

func.func @embedding_float_indices(%w: tensor<64x32xf32>, %i: tensor<8xf32>) -> tensor<8x32xf32> {
  // expected-error@+1 {{'tensor.embedding' op indices must be an integer tensor, got tensor<8xf32>}}
  %0 = tensor.embedding %w, %i : (tensor<64x32xf32>, tensor<8xf32>) -> tensor<8x32xf32>
  func.return %0 : tensor<8x32xf32>
}

// -----

func.func @gather_index_too_large(%x: tensor<4x8xf32>, %i: tensor<5x1xi64>) -> tensor<5x1xf32> {
  // expected-error@+1 {{'tensor.gather' op index tensor<5x1xi64> does not fit tensor<4x8xf32> outside dim 1}}
  %0 = tensor.gather %x, %i {dim = 1} : (tensor<4x8xf32>, tensor<5x1xi64>) -> tensor<5x1xf32>
  func.return %0 : tensor<5x1xf32>
}

// -----

func.func @scatter_source_shape(%x: tensor<4x8xf32>, %i: tensor<4x1xi64>, %s: tensor<4x2xf32>) -> tensor<4x8xf32> {
  // expected-error@+1 {{'tensor.scatter' op source tensor<4x2xf32> must have the index's shape [4, 1]}}
  %0 = tensor.scatter %x, %i, %s {dim = 1} : (tensor<4x8xf32>, tensor<4x1xi64>, tensor<4x2xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @index_put_values_do_not_broadcast(%x: tensor<64x32xf32>, %i: tensor<8xi64>, %v: tensor<8x16xf32>) -> tensor<64x32xf32> {
  // expected-error@+1 {{'tensor.index_put' op values tensor<8x16xf32> do not broadcast to the indexed shape [8, 32]}}
  %0 = tensor.index_put %x, %i, %v : (tensor<64x32xf32>, tensor<8xi64>, tensor<8x16xf32>) -> tensor<64x32xf32>
  func.return %0 : tensor<64x32xf32>
}

// -----

func.func @reverse_repeated_dim(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+1 {{'tensor.reverse' op reversed dim [1, 1] repeats a dim}}
  %0 = tensor.reverse %x {dims = [1, 1]} : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
