// RUN: %spmdc-opt %s -p 'lower-redistribution' --split-input-file --verify-diagnostics
// RUN: not %spmdc-opt %s -p 'lower-redistribution{max-steps=2}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION

// A redistribute cannot create a partial sum: no collective turns a replicated
// value into P(sum) (only the op that computes a value can leave it partial).
shard.mesh @mesh = <["tp" = 4]>
func.func @replicated_to_partial(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R]>}) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.redistribute' op no redistribution from [R] to [P(sum)] (no collective creates a pending reduction or changes its kind}}
  %0 = shard.redistribute %x {from = #shard<@mesh, [R]>, to = #shard<@mesh, [P(sum)]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// Nor can it change a pending reduction's kind: a partial sum is not a partial max.
shard.mesh @mesh = <["tp" = 4]>
func.func @partial_sum_to_partial_max(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [P(sum)]>}) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.redistribute' op no redistribution from [P(sum)] to [P(max)] (no collective creates}}
  %0 = shard.redistribute %x {from = #shard<@mesh, [P(sum)]>, to = #shard<@mesh, [P(max)]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// On a 2-D mesh the whole layout is named, though only the 'tp' axis is impossible.
shard.mesh @mesh = <["dp" = 2, "tp" = 2]>
func.func @partial_on_one_axis(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.redistribute' op no redistribution from [S(0), R] to [S(0), P(sum)]}}
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [S(0), P(sum)]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// lower-redistribution takes no options.
// UNKNOWN-OPTION: spmdc-opt: error: pass 'lower-redistribution' has no option 'max-steps' (options: none)
