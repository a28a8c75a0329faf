// RUN: %spmdc-opt %s -p 'sharding-propagation' --split-input-file --verify-diagnostics
// RUN: not %spmdc-opt %s -p 'sharding-propagation{trace}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION

// Data-parallel and tensor-parallel meshes declared separately and both used in one
// function; they must be the axes of a single mesh.
shard.mesh @dp = <["dp" = 2]>
shard.mesh @tp = <["tp" = 2]>
// expected-error@+1 {{'func.func' op uses several meshes (@dp, @tp); one mesh per function is supported}}
func.func @two_meshes_on_arguments(%x: tensor<8x16xf32> {shard.sharding = #shard<@dp, [S(0)]>},
                                   %w: tensor<16x4xf32> {shard.sharding = #shard<@tp, [S(1)]>}) -> tensor<8x4xf32> {
  %0 = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}

// -----

// The second mesh can also come from an annotation inside the body.
shard.mesh @dp = <["dp" = 2]>
shard.mesh @tp = <["tp" = 2]>
// expected-error@+1 {{'func.func' op uses several meshes (@dp, @tp); one mesh per function is supported}}
func.func @second_mesh_in_annotation(%x: tensor<8x16xf32> {shard.sharding = #shard<@dp, [S(0)]>}) -> tensor<8x16xf32> {
  %0 = tensor.relu %x : tensor<8x16xf32>
  %1 = shard.annotate %0 {sharding = #shard<@tp, [S(1)]>} : tensor<8x16xf32>
  func.return %1 : tensor<8x16xf32>
}

// sharding-propagation takes no options (tracing is SPMDC_TRACE_PROPAGATION=1).
// UNKNOWN-OPTION: spmdc-opt: error: pass 'sharding-propagation' has no option 'trace' (options: none)
