// RUN: %spmdc-opt %s -p 'partition{rank=2}' --split-input-file --verify-diagnostics
// RUN: not %spmdc-opt %s -p 'partition{rank=-1}' --split-input-file 2>&1 | FileCheck %s --check-prefix=NEGATIVE-RANK
// RUN: not %spmdc-opt %s -p 'partition{rank=last}' 2>&1 | FileCheck %s --check-prefix=BAD-VALUE
// RUN: not %spmdc-opt %s -p 'partition{rank}' 2>&1 | FileCheck %s --check-prefix=NO-VALUE
// RUN: not %spmdc-opt %s -p 'partition{rank=[0,1]}' 2>&1 | FileCheck %s --check-prefix=LIST-VALUE
// RUN: not %spmdc-opt %s -p 'partition{ranks=2}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION

// Ranks count from 0: a 2-device mesh has ranks 0 and 1, so rank=2 is one past the end.
shard.mesh @mesh = <["dp" = 2]>
// expected-error@+1 {{'func.func' op rank 2 is outside mesh '@mesh' (2 devices)}}
func.func @rank_past_the_end(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<8x16xf32> {
  func.return %x : tensor<8x16xf32>
}

// A negative rank (e.g. -1 meant as "the last rank") is rejected the same way;
// the second RUN line runs this file with rank=-1 and checks the first error.
// NEGATIVE-RANK: error: 'func.func' op rank -1 is outside mesh '@mesh' (2 devices)

// -----

// partition run before lower-redistribution: a shard.redistribute is left.
shard.mesh @mesh = <["tp" = 4]>
func.func @redistribute_not_lowered(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<8x16xf32> {
  // expected-error@+1 {{'shard.redistribute' op must be lowered before partition (run lower-redistribution)}}
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0)]>, to = #shard<@mesh, [R]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// A hand-written bias constant marked P(sum): every rank would add it once, so the
// sum over ranks would count it 4 times. Only a zero constant is a valid partial sum.
shard.mesh @mesh = <["tp" = 4]>
func.func @partial_nonzero_constant(%y: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [P(sum)]>}) -> tensor<8x16xf32> {
  // expected-error@+1 {{'tensor.constant' op only a zero constant can be Partial}}
  %b = tensor.constant {value = dense<1.0> : tensor<8x16xf32>, shard.sharding = [#shard<@mesh, [P(sum)]>]} : tensor<8x16xf32>
  %0 = tensor.add %y, %b {shard.sharding = [#shard<@mesh, [P(sum)]>]} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// A constant with distinct elements marked S(0): partition does not slice dense data.
shard.mesh @mesh = <["tp" = 4]>
func.func @sharded_non_splat_constant(%x: tensor<8xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<8xf32> {
  // expected-error@+1 {{'tensor.constant' op only splat constants can be sharded}}
  %c = tensor.constant {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>, shard.sharding = [#shard<@mesh, [S(0)]>]} : tensor<8xf32>
  %0 = tensor.add %x, %c {shard.sharding = [#shard<@mesh, [S(0)]>]} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

// insert-redistribution skipped on hand-annotated IR: %y is replicated but the add
// would need it S(0) (a redistribute is missing); refused up front, on the add, instead
// of a broken local program (local shapes 2 vs 8).
shard.mesh @mesh = <["tp" = 4]>
func.func @layouts_not_reconciled(%x: tensor<8xf32> {shard.sharding = #shard<@mesh, [S(0)]>},
                                  %y: tensor<8xf32> {shard.sharding = #shard<@mesh, [R]>}) -> tensor<8xf32> {
  // expected-error@+1 {{'tensor.add' op cannot compute result layout [S(0)] locally from operand layouts [S(0)], [R]; a redistribution is missing}}
  %0 = tensor.add %x, %y {shard.sharding = [#shard<@mesh, [S(0)]>]} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

// Data-parallel and tensor-parallel meshes declared separately and both used in one
// function; they must be the axes of a single mesh.
shard.mesh @dp = <["dp" = 2]>
shard.mesh @tp = <["tp" = 2]>
// expected-error@+1 {{'func.func' op uses several meshes (@dp, @tp); one mesh per function is supported}}
func.func @two_meshes(%x: tensor<8x16xf32> {shard.sharding = #shard<@dp, [S(0)]>},
                      %w: tensor<16x4xf32> {shard.sharding = #shard<@tp, [S(1)]>}) -> tensor<8x4xf32> {
  %0 = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  func.return %0 : tensor<8x4xf32>
}

// Pass option mistakes (reported before the input is read).

// A rank name instead of a number.
// BAD-VALUE: spmdc-opt: error: option 'rank' of pass 'partition' expects int, got 'last'

// The option without a value.
// NO-VALUE: spmdc-opt: error: option 'rank' of pass 'partition' needs a value (rank=<int>)

// Several ranks at once (partition makes one rank's program per run).
// LIST-VALUE: spmdc-opt: error: option 'rank' of pass 'partition' expects one int, got a list [0, 1]

// A misspelt option name; the message lists the real ones.
// UNKNOWN-OPTION: spmdc-opt: error: pass 'partition' has no option 'ranks' (options: rank)
