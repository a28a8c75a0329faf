// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_gather_result_not_gathered_shape(%x: tensor<2x16xf32>) -> tensor<4x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op operand type tensor<2x16xf32> is not a chunk of tensor<4x16xf32> along dim 0 over 4 ranks (expected tensor<1x16xf32>)}}
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<4x16xf32>
  func.return %0 : tensor<4x16xf32>
}

// -----

// 13 over 4 ranks is 4, 4, 4, 1: a piece of 3 is not one of them.
shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_gather_uneven_wrong_piece(%x: tensor<3x16xf32>) -> tensor<13x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op operand type tensor<3x16xf32> is not a chunk of tensor<13x16xf32> along dim 0 over 4 ranks (expected tensor<1x16xf32> or tensor<4x16xf32>)}}
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<3x16xf32>) -> tensor<13x16xf32>
  func.return %0 : tensor<13x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_gather_other_dim_changes(%x: tensor<2x16xf32>) -> tensor<8x8xf32> {
  // expected-error@+1 {{'comm.all_gather' op operand type tensor<2x16xf32> is not a chunk of tensor<8x8xf32> along dim 0 over 4 ranks (expected tensor<2x8xf32>)}}
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x8xf32>
  func.return %0 : tensor<8x8xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_slice_wrong_piece(%x: tensor<13x16xf32>) -> tensor<3x16xf32> {
  // expected-error@+1 {{'comm.all_slice' op result type tensor<3x16xf32> is not a chunk of tensor<13x16xf32> along dim 0 over 4 ranks (expected tensor<1x16xf32> or tensor<4x16xf32>)}}
  %0 = comm.all_slice %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<3x16xf32>
  func.return %0 : tensor<3x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @reduce_scatter_wrong_piece(%x: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // expected-error@+1 {{'comm.reduce_scatter' op result type tensor<4x16xf32> is not a chunk of tensor<8x16xf32> along dim 0 over 4 ranks (expected tensor<2x16xf32>)}}
  %0 = comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x16xf32>) -> tensor<4x16xf32>
  func.return %0 : tensor<4x16xf32>
}

// -----

func.func @unknown_mesh(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op refers to unknown mesh '@nowhere'}}
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @nowhere} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

func.func @mesh_is_a_function(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_reduce' op refers to unknown mesh '@mesh_is_a_function'}}
  %0 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh_is_a_function, op = "sum"} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @unknown_axis(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op mesh '@mesh' has no axis 'pp' (axes: dp, tp)}}
  %0 = comm.all_gather %x {axis = "pp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_reduce_unknown_axis(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'comm.all_reduce' op mesh '@mesh' has no axis 'sp' (axes: dp, tp)}}
  %0 = comm.all_reduce %x {axes = ["tp", "sp"], mesh = @mesh, op = "sum"} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @element_types_differ(%x: tensor<2x16xf32>) -> tensor<8x16xbf16> {
  // expected-error@+1 {{'comm.all_gather' op element types differ: f32 vs bf16}}
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xbf16>
  func.return %0 : tensor<8x16xbf16>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @ranks_differ(%x: tensor<2x16xf32>) -> tensor<128xf32> {
  // expected-error@+1 {{'comm.all_gather' op operand rank 2 differs from result rank 1}}
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<128xf32>
  func.return %0 : tensor<128xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @dim_out_of_range(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_slice' op dim 2 is out of range for rank-2 tensor}}
  %0 = comm.all_slice %x {axis = "tp", dim = 2, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @split_dim_out_of_range(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_to_all' op split_dim -1 is out of range for rank-2 tensor}}
  %0 = comm.all_to_all %x {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = -1} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @concat_dim_out_of_range(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_to_all' op concat_dim 3 is out of range for rank-2 tensor}}
  %0 = comm.all_to_all %x {axis = "tp", concat_dim = 3, mesh = @mesh, split_dim = 0} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_reduce_bad_op(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'comm.all_reduce' op 'op' must be one of sum, avg, max, min}}
  %0 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "prod"} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @reduce_scatter_bad_op(%x: tensor<8xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'comm.reduce_scatter' op 'op' must be one of sum, avg, max, min}}
  %0 = comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "or"} : (tensor<8xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_reduce_no_axes(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'comm.all_reduce' op 'axes' must be a non-empty array of axis names}}
  %0 = comm.all_reduce %x {axes = [], mesh = @mesh, op = "sum"} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_reduce_axes_not_names(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'comm.all_reduce' op 'axes' must be a non-empty array of axis names}}
  %0 = comm.all_reduce %x {axes = [1], mesh = @mesh, op = "sum"} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_reduce_axis_twice(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'comm.all_reduce' op 'axes' names an axis twice}}
  %0 = comm.all_reduce %x {axes = ["tp", "tp"], mesh = @mesh, op = "sum"} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_reduce_changes_type(%x: tensor<8xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'comm.all_reduce' op result type tensor<2xf32> does not match the inferred type tensor<8xf32>}}
  %0 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : (tensor<8xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_to_all_same_dim_changes_type(%x: tensor<8x16xf32>) -> tensor<2x16xf32> {
  // expected-error@+1 {{'comm.all_to_all' op with split_dim == concat_dim the result type must equal tensor<8x16xf32>}}
  %0 = comm.all_to_all %x {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 0} : (tensor<8x16xf32>) -> tensor<2x16xf32>
  func.return %0 : tensor<2x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @all_to_all_wrong_shape(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_to_all' op result type tensor<8x16xf32> is not operand tensor<2x16xf32> split along dim 1 and gathered along dim 0 over 4 ranks}}
  %0 = comm.all_to_all %x {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @missing_axis(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op requires attribute 'axis'}}
  %0 = comm.all_gather %x {dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @missing_dim(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op requires attribute 'dim'}}
  %0 = comm.all_gather %x {axis = "tp", mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @missing_op(%x: tensor<8x16xf32>) -> tensor<2x16xf32> {
  // expected-error@+1 {{'comm.reduce_scatter' op requires attribute 'op'}}
  %0 = comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<2x16xf32>
  func.return %0 : tensor<2x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @missing_split_dim(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_to_all' op requires attribute 'split_dim'}}
  %0 = comm.all_to_all %x {axis = "tp", concat_dim = 0, mesh = @mesh} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @mesh_not_a_symbol(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op attribute 'mesh' must be a symbol reference (@name), got "mesh"}}
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = "mesh"} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @axis_not_a_string(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op attribute 'axis' must be a string, got ["tp"]}}
  %0 = comm.all_gather %x {axis = ["tp"], dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @dim_not_an_integer(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op attribute 'dim' must be an integer, got 0.0}}
  %0 = comm.all_gather %x {axis = "tp", dim = 0.0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @two_operands(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather' op expected 1 operands, but found 2}}
  %0 = "comm.all_gather"(%x, %x) {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @bucket_pair_count(%x: tensor<2x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.all_gather_bucket' op 'dims' must list one integer per operand (1)}}
  %0 = comm.all_gather_bucket %x {axis = "tp", dims = [0, 1], mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @bucket_wrong_piece(%x: tensor<3x16xf32>, %y: tensor<2x4xf32>) -> (tensor<8x16xf32>, tensor<8x4xf32>) {
  // expected-error@+1 {{'comm.all_gather_bucket' op operand type tensor<3x16xf32> is not a chunk of tensor<8x16xf32> along dim 0 over 4 ranks}}
  %0:2 = comm.all_gather_bucket %x, %y {axis = "tp", dims = [0, 0], mesh = @mesh} : (tensor<3x16xf32>, tensor<2x4xf32>) -> (tensor<8x16xf32>, tensor<8x4xf32>)
  func.return %0#0, %0#1 : tensor<8x16xf32>, tensor<8x4xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @bucket_results(%x: tensor<8x16xf32>, %y: tensor<8x4xf32>) -> tensor<2x16xf32> {
  // expected-error@+1 {{'comm.reduce_scatter_bucket' op needs as many results as operands (>= 1), got 2 operands and 1 results}}
  %0 = comm.reduce_scatter_bucket %x, %y {axis = "tp", dims = [0, 0], mesh = @mesh, op = "sum"} : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<2x16xf32>
  func.return %0 : tensor<2x16xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @keep_at_origin_unknown_axis(%b: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'comm.keep_at_origin' op mesh '@mesh' has no axis 'dp' (axes: tp)}}
  %0 = comm.keep_at_origin %b {axes = ["dp"], mesh = @mesh} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @keep_at_origin_changes_type(%b: tensor<8x16xf32>) -> tensor<8x8xf32> {
  // expected-error@+1 {{'comm.keep_at_origin' op result type tensor<8x8xf32> does not match the inferred type tensor<8x16xf32>}}
  %0 = comm.keep_at_origin %b {axes = ["tp"], mesh = @mesh} : (tensor<8x16xf32>) -> tensor<8x8xf32>
  func.return %0 : tensor<8x8xf32>
}
