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

// -----

func.func @clamp_bound_not_a_number(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.clamp' op attribute 'min' must be an integer or a float, got "0"}}
  %0 = tensor.clamp %x {min = "0"} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @pow_not_broadcastable(%x: tensor<4xf32>, %e: tensor<3xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.pow' op shapes [4] and [3] are not broadcast-compatible}}
  %0 = tensor.pow %x, %e : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @compare_without_predicate(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error@+1 {{'tensor.compare' op requires attribute 'predicate'}}
  %0 = tensor.compare %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// -----

func.func @compare_element_types(%a: tensor<4xf32>, %b: tensor<4xi32>) -> tensor<4xi1> {
  // expected-error@+1 {{'tensor.compare' op operands have different element types: f32, i32}}
  %0 = tensor.compare %a, %b {predicate = "eq"} : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xi1>
  func.return %0 : tensor<4xi1>
}

// -----

func.func @not_of_floats(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.not' op expects an integer or i1 tensor, got tensor<4xf32>}}
  %0 = tensor.not %a : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @select_condition_not_i1(%c: tensor<4xi32>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.select' op condition must be an i1 tensor, got tensor<4xi32>}}
  %0 = tensor.select %c, %a, %a : (tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @select_not_broadcastable(%c: tensor<3xi1>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.select' op shapes [3] and [4] are not broadcast-compatible}}
  %0 = tensor.select %c, %a, %a : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @log_softmax_of_integers(%x: tensor<4x8xi64>) -> tensor<4x8xi64> {
  // expected-error@+1 {{'tensor.log_softmax' op expects a floating-point tensor, got tensor<4x8xi64>}}
  %0 = tensor.log_softmax %x {dim = 1} : tensor<4x8xi64>
  func.return %0 : tensor<4x8xi64>
}

// -----

func.func @cumsum_dim_not_an_integer(%x: tensor<4x8xi64>) -> tensor<4x8xi64> {
  // expected-error@+1 {{'tensor.cumsum' op attribute 'dim' must be an integer, got [1]}}
  %0 = tensor.cumsum %x {dim = [1]} : tensor<4x8xi64>
  func.return %0 : tensor<4x8xi64>
}

// -----

func.func @var_of_integers(%x: tensor<4x8xi64>) -> tensor<4xi64> {
  // expected-error@+1 {{'tensor.var' op expects a floating-point tensor, got tensor<4x8xi64>}}
  %0 = tensor.var %x {correction = 1, dims = [1]} : (tensor<4x8xi64>) -> tensor<4xi64>
  func.return %0 : tensor<4xi64>
}

// -----

func.func @slice_step_not_positive(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'tensor.slice' op step must be positive, got 0}}
  %0 = tensor.slice %x {dim = 0, end = 8, start = 0, step = 0} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @slice_dim_out_of_range(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'tensor.slice' op dim 1 is out of range for a rank-1 tensor}}
  %0 = tensor.slice %x {dim = 1, end = 8, start = 0, step = 1} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @slice_result_length(%x: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.slice' op result type tensor<4xf32> does not match the inferred type tensor<3xf32>}}
  %0 = tensor.slice %x {dim = 0, end = 8, start = 0, step = 3} : (tensor<8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @insert_slice_element_types(%d: tensor<2x8xf32>, %s: tensor<2x4xf16>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'tensor.insert_slice' op operands have different element types: f16, f32}}
  %0 = tensor.insert_slice %d, %s {dim = 1, end = 8, start = 4, step = 1} : (tensor<2x8xf32>, tensor<2x4xf16>) -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// -----

func.func @concat_without_operands() -> tensor<2xf32> {
  // expected-error@+1 {{'tensor.concat' op needs at least one operand}}
  %0 = tensor.concat {dim = 0} : () -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @concat_ranks_differ(%a: tensor<2x4xf32>, %b: tensor<4xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'tensor.concat' op operand tensor<4xf32> does not match tensor<2x4xf32> outside dim 0}}
  %0 = tensor.concat %a, %b {dim = 0} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// -----

func.func @concat_dim_out_of_range(%a: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{'tensor.concat' op dim 2 is out of range for a rank-2 tensor}}
  %0 = tensor.concat %a {dim = 2} : tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

func.func @concat_element_types(%a: tensor<2x4xf32>, %b: tensor<2x4xbf16>) -> tensor<4x4xf32> {
  // expected-error@+1 {{'tensor.concat' op operands have different element types: bf16, f32}}
  %0 = tensor.concat %a, %b {dim = 0} : (tensor<2x4xf32>, tensor<2x4xbf16>) -> tensor<4x4xf32>
  func.return %0 : tensor<4x4xf32>
}

// -----

func.func @pad_float_value_on_integers(%x: tensor<2x8xi64>) -> tensor<2x9xi64> {
  // expected-error@+1 {{'tensor.pad' op float padding value for an integer tensor tensor<2x8xi64>}}
  %0 = tensor.pad %x {high = [0, 1], low = [0, 0], value = 0.5} : (tensor<2x8xi64>) -> tensor<2x9xi64>
  func.return %0 : tensor<2x9xi64>
}

// -----

func.func @pad_negative_size(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'tensor.pad' op padding gives a negative size [-1, 8]}}
  %0 = tensor.pad %x {high = [-2, 0], low = [-1, 0], value = 0.0} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// -----

func.func @pad_low_not_integers(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'tensor.pad' op attribute 'low' must be an array of integers}}
  %0 = tensor.pad %x {high = [0, 0], low = [0.0, 0.0], value = 0.0} : tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// -----

func.func @pad_without_value(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'tensor.pad' op requires attribute 'value'}}
  %0 = tensor.pad %x {high = [0, 0], low = [0, 0]} : tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// -----

func.func @embedding_weight_rank(%w: tensor<64xf32>, %ids: tensor<8xi64>) -> tensor<8xf32> {
  // expected-error@+1 {{'tensor.embedding' op weight must have rank 2, got tensor<64xf32>}}
  %0 = tensor.embedding %w, %ids : (tensor<64xf32>, tensor<8xi64>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @gather_float_index(%x: tensor<16x64xf32>, %i: tensor<16x1xf32>) -> tensor<16x1xf32> {
  // expected-error@+1 {{'tensor.gather' op index must be an integer tensor, got tensor<16x1xf32>}}
  %0 = tensor.gather %x, %i {dim = 1} : (tensor<16x64xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
  func.return %0 : tensor<16x1xf32>
}

// -----

func.func @gather_dim_out_of_range(%x: tensor<16x64xf32>, %i: tensor<16x1xi64>) -> tensor<16x1xf32> {
  // expected-error@+1 {{'tensor.gather' op dim -1 is out of range for a rank-2 tensor}}
  %0 = tensor.gather %x, %i {dim = -1} : (tensor<16x64xf32>, tensor<16x1xi64>) -> tensor<16x1xf32>
  func.return %0 : tensor<16x1xf32>
}

// -----

func.func @scatter_bad_reduce(%x: tensor<16x64xf32>, %i: tensor<16x1xi64>, %s: tensor<16x1xf32>) -> tensor<16x64xf32> {
  // expected-error@+1 {{'tensor.scatter' op attribute 'reduce' must be one of 'add'}}
  %0 = tensor.scatter %x, %i, %s {dim = 1, reduce = "max"} : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf32>) -> tensor<16x64xf32>
  func.return %0 : tensor<16x64xf32>
}

// -----

func.func @scatter_index_too_big(%x: tensor<16x64xf32>, %i: tensor<32x1xi64>, %s: tensor<32x1xf32>) -> tensor<16x64xf32> {
  // expected-error@+1 {{'tensor.scatter' op index tensor<32x1xi64> does not fit tensor<16x64xf32> outside dim 1}}
  %0 = tensor.scatter %x, %i, %s {dim = 1} : (tensor<16x64xf32>, tensor<32x1xi64>, tensor<32x1xf32>) -> tensor<16x64xf32>
  func.return %0 : tensor<16x64xf32>
}

// -----

func.func @scatter_source_element_type(%x: tensor<16x64xf32>, %i: tensor<16x1xi64>, %s: tensor<16x1xf16>) -> tensor<16x64xf32> {
  // expected-error@+1 {{'tensor.scatter' op operands have different element types: f16, f32}}
  %0 = tensor.scatter %x, %i, %s {dim = 1} : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf16>) -> tensor<16x64xf32>
  func.return %0 : tensor<16x64xf32>
}

// -----

func.func @scatter_float_index(%x: tensor<16x64xf32>, %i: tensor<16x1xf32>, %s: tensor<16x1xf32>) -> tensor<16x64xf32> {
  // expected-error@+1 {{'tensor.scatter' op index must be an integer tensor, got tensor<16x1xf32>}}
  %0 = tensor.scatter %x, %i, %s {dim = 1} : (tensor<16x64xf32>, tensor<16x1xf32>, tensor<16x1xf32>) -> tensor<16x64xf32>
  func.return %0 : tensor<16x64xf32>
}

// -----

func.func @scatter_dim_out_of_range(%x: tensor<16x64xf32>, %i: tensor<16x1xi64>, %s: tensor<16x1xf32>) -> tensor<16x64xf32> {
  // expected-error@+1 {{'tensor.scatter' op dim 2 is out of range for a rank-2 tensor}}
  %0 = tensor.scatter %x, %i, %s {dim = 2} : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf32>) -> tensor<16x64xf32>
  func.return %0 : tensor<16x64xf32>
}

// -----

func.func @index_without_indices(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.index' op needs a tensor and at least one index tensor}}
  %0 = tensor.index %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @index_too_many_indices(%x: tensor<4xf32>, %i: tensor<2xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{'tensor.index' op 2 index tensors for a rank-1 tensor}}
  %0 = tensor.index %x, %i, %i : (tensor<4xf32>, tensor<2xi64>, tensor<2xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @index_float_index(%x: tensor<4xf32>, %i: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'tensor.index' op index must be an integer tensor, got tensor<2xf32>}}
  %0 = tensor.index %x, %i : (tensor<4xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @index_indices_not_broadcastable(%x: tensor<4x4xf32>, %i: tensor<2xi64>, %j: tensor<3xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{'tensor.index' op shapes [2] and [3] are not broadcast-compatible}}
  %0 = tensor.index %x, %i, %j : (tensor<4x4xf32>, tensor<2xi64>, tensor<3xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @index_put_without_values(%x: tensor<4xf32>, %i: tensor<2xi64>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.index_put' op needs a tensor, at least one index tensor and the values}}
  %0 = tensor.index_put %x, %i : (tensor<4xf32>, tensor<2xi64>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @index_put_values_shape(%x: tensor<64x32xf32>, %i: tensor<16xi64>, %v: tensor<2x16x32xf32>) -> tensor<64x32xf32> {
  // expected-error@+1 {{'tensor.index_put' op values tensor<2x16x32xf32> do not broadcast to the indexed shape [16, 32]}}
  %0 = tensor.index_put %x, %i, %v : (tensor<64x32xf32>, tensor<16xi64>, tensor<2x16x32xf32>) -> tensor<64x32xf32>
  func.return %0 : tensor<64x32xf32>
}

// -----

func.func @index_put_values_element_type(%x: tensor<64x32xf32>, %i: tensor<16xi64>, %v: tensor<16x32xf16>) -> tensor<64x32xf32> {
  // expected-error@+1 {{'tensor.index_put' op operands have different element types: f16, f32}}
  %0 = tensor.index_put %x, %i, %v : (tensor<64x32xf32>, tensor<16xi64>, tensor<16x32xf16>) -> tensor<64x32xf32>
  func.return %0 : tensor<64x32xf32>
}

// -----

func.func @index_put_accumulate_not_bool(%x: tensor<64x32xf32>, %i: tensor<16xi64>, %v: tensor<32xf32>) -> tensor<64x32xf32> {
  // expected-error@+1 {{'tensor.index_put' op attribute 'accumulate' must be a boolean, got 1}}
  %0 = tensor.index_put %x, %i, %v {accumulate = 1} : (tensor<64x32xf32>, tensor<16xi64>, tensor<32xf32>) -> tensor<64x32xf32>
  func.return %0 : tensor<64x32xf32>
}
