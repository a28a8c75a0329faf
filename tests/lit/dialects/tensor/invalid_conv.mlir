// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @channels_do_not_fit(%x: tensor<2x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<2x4x6x6xf32> {
  // expected-error@+1 {{'tensor.conv' op input channels 3 and weight tensor<4x2x3x3xf32> do not fit groups = 1}}
  %y = tensor.conv %x, %w {stride = [1, 1], padding = [0, 0], dilation = [1, 1]} : (tensor<2x3x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<2x4x6x6xf32>
  func.return %y : tensor<2x4x6x6xf32>
}

// -----

func.func @stride_per_spatial_dim(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32> {
  // expected-error@+1 {{'tensor.conv' op attribute 'stride' needs 2 values (one per spatial dim), got [1]}}
  %y = tensor.conv %x, %w {stride = [1], padding = [0, 0], dilation = [1, 1]} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32>
  func.return %y : tensor<2x4x6x6xf32>
}

// -----

func.func @kernel_larger_than_input(%x: tensor<2x3x2x2xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x4x1x1xf32> {
  // expected-error@+1 {{'tensor.conv' op kernel [3, 3] does not fit input [2, 2]}}
  %y = tensor.conv %x, %w {stride = [1, 1], padding = [0, 0], dilation = [1, 1]} : (tensor<2x3x2x2xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x1x1xf32>
  func.return %y : tensor<2x4x1x1xf32>
}

// -----

func.func @wrong_output_type(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32> {
  // expected-error@+1 {{'tensor.conv' op result type tensor<2x4x8x8xf32> does not match the inferred type tensor<2x4x6x6xf32>}}
  %y = tensor.conv %x, %w {stride = [1, 1], padding = [0, 0], dilation = [1, 1]} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
  func.return %y : tensor<2x4x8x8xf32>
}

// -----

func.func @input_grad_of_another_shape(%dy: tensor<2x4x6x6xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x3x9x9xf32> {
  // expected-error@+1 {{'tensor.conv_input_grad' op output gradient tensor<2x4x6x6xf32> does not match convolving tensor<2x3x9x9xf32> with tensor<4x3x3x3xf32>}}
  %dx = tensor.conv_input_grad %dy, %w {stride = [1, 1], padding = [0, 0], dilation = [1, 1]} : (tensor<2x4x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x9x9xf32>
  func.return %dx : tensor<2x3x9x9xf32>
}
