// RUN: %spmdc-opt %s -p 'insert-redistribution' --split-input-file --verify-diagnostics
// RUN: not %spmdc-opt %s -p 'insert-redistribution{shared=false}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION

// insert-redistribution run without sharding-propagation: the op has no layout.
shard.mesh @mesh = <["tp" = 4]>
func.func @op_without_layout(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<8x16xf32> {
  // expected-error@+1 {{'tensor.relu' op has no 'shard.sharding'; run sharding-propagation first}}
  %0 = tensor.relu %x : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// The same mistake on a typical input, whose only layouts are annotations: the
// annotated argument has no layout yet (propagation would make it replicated).
shard.mesh @mesh = <["tp" = 4]>
func.func @annotate_of_unannotated_argument(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.annotate' op operand #0 has no 'shard.sharding'; run sharding-propagation first}}
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0)]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// Hand-annotated op results, but the function argument was left without a layout.
shard.mesh @mesh = <["tp" = 4]>
func.func @operand_without_layout(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error@+1 {{'tensor.relu' op operand #0 has no 'shard.sharding'; run sharding-propagation first}}
  %0 = tensor.relu %x {shard.sharding = [#shard<@mesh, [S(0)]>]} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// An annotated function result returning a value that has no layout.
shard.mesh @mesh = <["tp" = 4]>
func.func @returned_value_without_layout(%x: tensor<8x16xf32>) -> (tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) {
  // expected-error@+1 {{'func.return' op operand #0 has no 'shard.sharding'; run sharding-propagation first}}
  func.return %x : tensor<8x16xf32>
}

// -----

// Data-parallel and tensor-parallel meshes declared separately and both used in one
// function; they must be the axes of a single mesh.
shard.mesh @dp = <["dp" = 2]>
shard.mesh @tp = <["tp" = 2]>
// expected-error@+1 {{'func.func' op uses several meshes (@dp, @tp); one mesh per function is supported}}
func.func @two_meshes(%x: tensor<8x16xf32> {shard.sharding = #shard<@dp, [S(0)]>},
                      %w: tensor<16x4xf32> {shard.sharding = #shard<@tp, [S(1)]>}) -> tensor<8x4xf32> {
  %0 = tensor.matmul %x, %w {shard.sharding = [#shard<@dp, [S(0)]>]} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}

// insert-redistribution takes no options.
// UNKNOWN-OPTION: spmdc-opt: error: pass 'insert-redistribution' has no option 'shared' (options: none)
