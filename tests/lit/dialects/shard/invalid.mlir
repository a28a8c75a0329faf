// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @placement_out_of_range(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.annotate' op sharding: placement S(5) on mesh axis 'dp' is out of range for rank-2 tensor tensor<8x16xf32>}}
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(5), R]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @negative_shard_dim(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.annotate' op sharding: placement S(-1) on mesh axis 'tp' is out of range for rank-2 tensor tensor<8x16xf32>}}
  %0 = shard.annotate %x {sharding = #shard<@mesh, [R, S(-1)]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @shard_a_scalar(%x: tensor<f32>) -> tensor<f32> {
  // expected-error@+1 {{'shard.annotate' op sharding: placement S(0) on mesh axis 'tp' is out of range for rank-0 tensor tensor<f32>}}
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0)]>} : tensor<f32>
  func.return %0 : tensor<f32>
}

// -----

func.func @unknown_mesh(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.annotate' op sharding: sharding refers to unknown mesh '@nowhere'}}
  %0 = shard.annotate %x {sharding = #shard<@nowhere, [S(0)]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

func.func @mesh_is_a_function(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.annotate' op sharding: sharding refers to unknown mesh '@mesh_is_a_function'}}
  %0 = shard.annotate %x {sharding = #shard<@mesh_is_a_function, [R]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
func.func @too_few_placements(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.annotate' op sharding: sharding #shard<@mesh, [S(0)]> has 1 placements but mesh '@mesh' has 2 axes}}
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0)]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @sharding_not_a_sharding(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'shard.annotate' op attribute 'sharding' must be a #shard<...> attribute, got "S(0)"}}
  %0 = shard.annotate %x {sharding = "S(0)"} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @annotate_without_sharding(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'shard.annotate' op requires attribute 'sharding'}}
  %0 = shard.annotate %x : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @annotate_changes_type(%x: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'shard.annotate' op result type tensor<4xf32> does not match the inferred type tensor<8xf32>}}
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0)]>} : (tensor<8xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @redistribute_changes_type(%x: tensor<8xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'shard.redistribute' op result type tensor<2xf32> does not match the inferred type tensor<8xf32>}}
  %0 = shard.redistribute %x {from = #shard<@mesh, [R]>, to = #shard<@mesh, [S(0)]>} : (tensor<8xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @redistribute_bad_from(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'shard.redistribute' op 'from' sharding: placement S(1) on mesh axis 'tp' is out of range for rank-1 tensor tensor<8xf32>}}
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(1)]>, to = #shard<@mesh, [R]>} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @redistribute_bad_to(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'shard.redistribute' op 'to' sharding: sharding refers to unknown mesh '@other'}}
  %0 = shard.redistribute %x {from = #shard<@mesh, [R]>, to = #shard<@other, [R]>} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @a = <["tp" = 4]>
shard.mesh @b = <["tp" = 4]>
func.func @redistribute_across_meshes(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'shard.redistribute' op 'from' is on mesh '@a' but 'to' is on '@b'; both must use the same mesh}}
  %0 = shard.redistribute %x {from = #shard<@a, [S(0)]>, to = #shard<@b, [S(0)]>} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @redistribute_without_to(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'shard.redistribute' op requires attribute 'to'}}
  %0 = shard.redistribute %x {from = #shard<@mesh, [R]>} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

// expected-error@+1 {{'shard.mesh' op mesh axis 'tp' has size 0; sizes must be positive}}
shard.mesh @mesh = <["dp" = 2, "tp" = 0]>

// -----

// expected-error@+1 {{'shard.mesh' op mesh axis 'dp' has size -2; sizes must be positive}}
shard.mesh @mesh = <["dp" = -2]>

// -----

// expected-error@+1 {{'shard.mesh' op duplicate mesh axis name 'tp'}}
shard.mesh @mesh = <["tp" = 2, "tp" = 4]>

// -----

// expected-error@+1 {{'shard.mesh' op has 2 axis names but 1 sizes}}
"shard.mesh"() {axes = ["dp", "tp"], shape = [2], sym_name = "mesh"} : () -> ()

// -----

// expected-error@+1 {{'shard.mesh' op 'axes' must be an array of strings}}
"shard.mesh"() {axes = [0, 1], shape = [2, 2], sym_name = "mesh"} : () -> ()

// -----

// expected-error@+1 {{'shard.mesh' op 'shape' must be an array of integers}}
"shard.mesh"() {axes = ["dp"], shape = ["2"], sym_name = "mesh"} : () -> ()

// -----

// expected-error@+1 {{'shard.mesh' op requires attribute 'shape'}}
"shard.mesh"() {axes = ["dp"], sym_name = "mesh"} : () -> ()

// -----

// expected-error@+1 {{'shard.mesh' op attribute 'axes' must be an array, got "dp"}}
"shard.mesh"() {axes = "dp", shape = [2], sym_name = "mesh"} : () -> ()

// -----

shard.mesh @mesh = <["tp" = 2]>
func.func @result_sharding_not_shardings(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.neg' op 'shard.sharding' must be an array of #shard<...> attributes}}
  %0 = tensor.neg %a {shard.sharding = #shard<@mesh, [R]>} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

shard.mesh @mesh = <["tp" = 2]>
func.func @result_sharding_entries_not_shardings(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.neg' op 'shard.sharding' must be an array of #shard<...> attributes}}
  %0 = tensor.neg %a {shard.sharding = ["R"]} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

shard.mesh @mesh = <["tp" = 2]>
func.func @result_sharding_count(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.neg' op 'shard.sharding' has 0 entries for 1 results}}
  %0 = tensor.neg %a {shard.sharding = []} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 2]>
func.func @result_sharding_out_of_range(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error@+1 {{'tensor.relu' op 'shard.sharding' of result #0: placement S(2) on mesh axis 'tp' is out of range for rank-2 tensor tensor<4x4xf32>}}
  %0 = tensor.relu %a {shard.sharding = [#shard<@mesh, [R, S(2)]>]} : tensor<4x4xf32>
  func.return %0 : tensor<4x4xf32>
}

// -----

func.func @result_sharding_unknown_mesh(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.relu' op 'shard.sharding' of result #0: sharding refers to unknown mesh '@gone'}}
  %0 = tensor.relu %a {shard.sharding = [#shard<@gone, [R]>]} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

shard.mesh @mesh = <["tp" = 2]>
func.func @unknown_partial_reduction(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{unknown partial reduction 'prod' (expected one of sum, avg, max, min)}}
  %0 = shard.annotate %a {sharding = #shard<@mesh, [P(prod)]>} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
