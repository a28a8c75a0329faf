// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @result_type_disagrees_with_inferred(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'tensor.add' op result type tensor<8xf32> does not match the inferred type tensor<4xf32>}}
  %0 = tensor.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @result_element_type_disagrees(%a: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error@+1 {{'tensor.exp' op result type tensor<4xf16> does not match the inferred type tensor<4xf32>}}
  %0 = "tensor.exp"(%a) : (tensor<4xf32>) -> tensor<4xf16>
  func.return %0 : tensor<4xf16>
}

// -----

func.func @not_broadcast_compatible(%a: tensor<8x16xf32>, %b: tensor<8xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'tensor.mul' op shapes [8, 16] and [8] are not broadcast-compatible}}
  %0 = tensor.mul %a, %b : (tensor<8x16xf32>, tensor<8xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

func.func @different_element_types(%a: tensor<4xf32>, %b: tensor<4xi32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.sub' op operands have different element types: f32, i32}}
  %0 = tensor.sub %a, %b : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @float_only_unary_on_integers(%a: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error@+1 {{'tensor.exp' op expects a floating-point tensor, got tensor<4xi32>}}
  %0 = tensor.exp %a : tensor<4xi32>
  func.return %0 : tensor<4xi32>
}

// -----

func.func @mean_of_integers(%a: tensor<4x2xi64>) -> tensor<4xi64> {
  // expected-error@+1 {{'tensor.mean' op expects a floating-point tensor, got tensor<4x2xi64>}}
  %0 = tensor.mean %a {dims = [1]} : (tensor<4x2xi64>) -> tensor<4xi64>
  func.return %0 : tensor<4xi64>
}

// -----

func.func @wrong_operand_count(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.add' op expected 2 operands, but found 1}}
  %0 = "tensor.add"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @wrong_result_count(%a: tensor<4xf32>) {
  // expected-error@+1 {{'tensor.relu' op expected 1 results, but found 0}}
  "tensor.relu"(%a) : (tensor<4xf32>) -> ()
  func.return
}

// -----

func.func @unexpected_region(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.neg' op expected 0 regions, but found 1}}
  %0 = "tensor.neg"(%a) ({
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduction_without_dims(%a: tensor<4x2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.sum' op requires attribute 'dims'}}
  %0 = tensor.sum %a : (tensor<4x2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduction_dims_not_an_array(%a: tensor<4x2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.sum' op attribute 'dims' must be an array, got 1}}
  %0 = tensor.sum %a {dims = 1} : (tensor<4x2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduction_dims_not_integers(%a: tensor<4x2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.max' op attribute 'dims' must be an array of integers}}
  %0 = tensor.max %a {dims = [true]} : (tensor<4x2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduction_dim_out_of_range(%a: tensor<4x2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.sum' op reduction dim 2 is out of range for a rank-2 tensor}}
  %0 = tensor.sum %a {dims = [2]} : (tensor<4x2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduction_negative_dim(%a: tensor<4x2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.sum' op reduction dim -1 is out of range for a rank-2 tensor}}
  %0 = tensor.sum %a {dims = [-1]} : (tensor<4x2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduction_dim_repeated(%a: tensor<4x2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.sum' op reduction dim [1, 1] repeats a dim}}
  %0 = tensor.sum %a {dims = [1, 1]} : (tensor<4x2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @keepdim_not_a_bool(%a: tensor<4x2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.sum' op attribute 'keepdim' must be a boolean, got 1}}
  %0 = tensor.sum %a {dims = [1], keepdim = 1} : (tensor<4x2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @reduction_keepdim_shape(%a: tensor<4x2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.sum' op result type tensor<4xf32> does not match the inferred type tensor<4x1xf32>}}
  %0 = tensor.sum %a {dims = [1], keepdim = true} : (tensor<4x2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @permute_wrong_length(%a: tensor<4x2xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{'tensor.permute' op perm [1, 0, 2] has 3 entries for a rank-2 tensor}}
  %0 = tensor.permute %a {perm = [1, 0, 2]} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

func.func @permute_entry_out_of_range(%a: tensor<4x2xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{'tensor.permute' op perm entry 2 is out of range for a rank-2 tensor}}
  %0 = tensor.permute %a {perm = [2, 0]} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

func.func @permute_repeats_dim(%a: tensor<4x2xf32>) -> tensor<4x4xf32> {
  // expected-error@+1 {{'tensor.permute' op perm entry [0, 0] repeats a dim}}
  %0 = tensor.permute %a {perm = [0, 0]} : (tensor<4x2xf32>) -> tensor<4x4xf32>
  func.return %0 : tensor<4x4xf32>
}

// -----

func.func @permute_not_integers(%a: tensor<4x2xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{'tensor.permute' op attribute 'perm' must be an array of integers}}
  %0 = tensor.permute %a {perm = ["1", "0"]} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

func.func @permute_without_perm(%a: tensor<4x2xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{'tensor.permute' op requires attribute 'perm'}}
  %0 = tensor.permute %a : (tensor<4x2xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

func.func @reshape_element_count(%a: tensor<4x2xf32>) -> tensor<9xf32> {
  // expected-error@+1 {{'tensor.reshape' op cannot reshape tensor<4x2xf32> (8 elements) to tensor<9xf32> (9 elements)}}
  %0 = tensor.reshape %a : (tensor<4x2xf32>) -> tensor<9xf32>
  func.return %0 : tensor<9xf32>
}

// -----

func.func @reshape_element_type(%a: tensor<4x2xf32>) -> tensor<8xf16> {
  // expected-error@+1 {{'tensor.reshape' op element types differ: f32 vs f16}}
  %0 = tensor.reshape %a : (tensor<4x2xf32>) -> tensor<8xf16>
  func.return %0 : tensor<8xf16>
}

// -----

func.func @broadcast_incompatible(%a: tensor<3xf32>) -> tensor<4x4xf32> {
  // expected-error@+1 {{'tensor.broadcast' op cannot broadcast tensor<3xf32> to tensor<4x4xf32>}}
  %0 = tensor.broadcast %a : (tensor<3xf32>) -> tensor<4x4xf32>
  func.return %0 : tensor<4x4xf32>
}

// -----

func.func @broadcast_to_lower_rank(%a: tensor<2x4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.broadcast' op cannot broadcast tensor<2x4xf32> to tensor<4xf32>}}
  %0 = tensor.broadcast %a : (tensor<2x4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @broadcast_element_type(%a: tensor<4xf32>) -> tensor<2x4xi32> {
  // expected-error@+1 {{'tensor.broadcast' op element types differ: f32 vs i32}}
  %0 = tensor.broadcast %a : (tensor<4xf32>) -> tensor<2x4xi32>
  func.return %0 : tensor<2x4xi32>
}

// -----

func.func @cast_changes_shape(%a: tensor<4x2xf32>) -> tensor<8xf16> {
  // expected-error@+1 {{'tensor.cast' op result tensor<8xf16> must have the shape of operand tensor<4x2xf32>}}
  %0 = tensor.cast %a : (tensor<4x2xf32>) -> tensor<8xf16>
  func.return %0 : tensor<8xf16>
}

// -----

func.func @matmul_rank1(%a: tensor<4xf32>, %b: tensor<4x2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'tensor.matmul' op operands must have rank >= 2, got tensor<4xf32> and tensor<4x2xf32>}}
  %0 = tensor.matmul %a, %b : (tensor<4xf32>, tensor<4x2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @matmul_contracting_dims(%a: tensor<8x16xf32>, %b: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error@+1 {{'tensor.matmul' op contracting dims differ: 16 (lhs dim 1) vs 8 (rhs dim 0)}}
  %0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}

// -----

func.func @matmul_batch_dims(%a: tensor<2x8x16xf32>, %b: tensor<3x16x4xf32>) -> tensor<2x8x4xf32> {
  // expected-error@+1 {{'tensor.matmul' op shapes [2] and [3] are not broadcast-compatible}}
  %0 = tensor.matmul %a, %b : (tensor<2x8x16xf32>, tensor<3x16x4xf32>) -> tensor<2x8x4xf32>
  func.return %0 : tensor<2x8x4xf32>
}

// -----

func.func @matmul_element_types(%a: tensor<8x16xf32>, %b: tensor<16x4xbf16>) -> tensor<8x4xf32> {
  // expected-error@+1 {{'tensor.matmul' op operands have different element types: bf16, f32}}
  %0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16x4xbf16>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}

// -----

func.func @matmul_result_shape(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'tensor.matmul' op result type tensor<8x16xf32> does not match the inferred type tensor<8x4xf32>}}
  %0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

func.func @constant_type_mismatch() -> tensor<2xf32> {
  // expected-error@+1 {{'tensor.constant' op result type tensor<2xf32> does not match the inferred type tensor<4xf32>}}
  %0 = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @constant_not_dense() -> tensor<f32> {
  // expected-error@+1 {{'tensor.constant' op attribute 'value' must be a dense<...> attribute, got 1.0}}
  %0 = tensor.constant {value = 1.0} : tensor<f32>
  func.return %0 : tensor<f32>
}

// -----

func.func @constant_without_value() -> tensor<f32> {
  // expected-error@+1 {{'tensor.constant' op requires attribute 'value'}}
  %0 = tensor.constant : tensor<f32>
  func.return %0 : tensor<f32>
}

// -----

func.func @dense_not_rectangular() -> tensor<2x2xf32> {
  // expected-error@+1 {{dense literal is not rectangular}}
  %0 = tensor.constant {value = dense<[[1.0, 2.0], [3.0]]> : tensor<2x2xf32>} : tensor<2x2xf32>
  func.return %0 : tensor<2x2xf32>
}

// -----

func.func @dense_shape_mismatch() -> tensor<3xf32> {
  // expected-error@+1 {{dense literal of shape (2,) does not match tensor<3xf32>}}
  %0 = tensor.constant {value = dense<[1.0, 2.0]> : tensor<3xf32>} : tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

shard.mesh @mesh = <["tp" = 2]>
func.func @result_sharding_count(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.exp' op 'shard.sharding' has 2 entries for 1 results}}
  %0 = tensor.exp %a {shard.sharding = [#shard<@mesh, [R]>, #shard<@mesh, [R]>]} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
