// RUN: not %spmdc-opt %s --split-input-file -p 'pipeline-schedule{microbatches=2}' 2>&1 | FileCheck %s

// Stages run on disjoint device groups.
shard.mesh @s0 = <["tp" = 2]> devices = [0, 1]
// CHECK: pipeline-schedule-invalid.mlir:[[# @LINE + 1]]:1: error: 'shard.mesh' op stage mesh @s1 shares rank 1 with @s0
shard.mesh @s1 = <["tp" = 2]> devices = [1, 2]
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s1, [R]>}

// -----

// A boundary flows to a later stage (stages are numbered by their meshes' order).
shard.mesh @s0 = <["dp" = 1]> devices = [0]
shard.mesh @s1 = <["dp" = 1]> devices = [1]
// CHECK: pipeline-schedule-invalid.mlir:[[# @LINE + 1]]:1: error: 'pipe.boundary' op value 0 goes from stage 1 to stage 0
pipe.boundary {id = 0, shape = [4], from = #shard<@s1, [R]>, to = #shard<@s0, [R]>}

// -----

// CHECK: pipeline-schedule-invalid.mlir:[[# @LINE + 1]]:1: error: 'pipe.boundary' op 'to' names unknown mesh '@s9'
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s9, [R]>}
shard.mesh @s0 = <["dp" = 1]> devices = [0]

// -----

// The gradient of a value goes back the way the value came.
shard.mesh @s0 = <["dp" = 1]> devices = [0]
shard.mesh @s1 = <["dp" = 1]> devices = [1]
// CHECK: pipeline-schedule-invalid.mlir:[[# @LINE + 1]]:1: error: 'pipe.boundary' op a gradient flows back from the consumer's mesh to the producer's
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s1, [R]>,
               grad_from = #shard<@s0, [R]>, grad_to = #shard<@s1, [R]>}

// -----

// BSR delivers whole values: a partial destination is refused, naming the value.
shard.mesh @s0 = <["dp" = 1]> devices = [0]
shard.mesh @s1 = <["tp" = 2]> devices = [1, 2]
// CHECK: pipeline-schedule-invalid.mlir:[[# @LINE + 1]]:1: error: 'pipe.boundary' op cannot move value 0: BSR delivers whole values: a Partial destination is not supported
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s1, [P(sum)]>}

// -----

// A value with several consumers is one value: the same producer layout for each of them.
shard.mesh @s0 = <["tp" = 2]> devices = [0, 1]
shard.mesh @s1 = <["dp" = 1]> devices = [2]
shard.mesh @s2 = <["dp" = 1]> devices = [3]
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s1, [R]>}
// CHECK: pipeline-schedule-invalid.mlir:[[# @LINE + 1]]:1: error: 'pipe.boundary' op value 0 is declared with another 'from' for stage 2
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [S(0)]>, to = #shard<@s2, [R]>}

// -----

// One declaration per consumer.
shard.mesh @s0 = <["dp" = 1]> devices = [0]
shard.mesh @s1 = <["dp" = 1]> devices = [1]
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s1, [R]>}
// CHECK: pipeline-schedule-invalid.mlir:[[# @LINE + 1]]:1: error: 'pipe.boundary' op value 0 is declared twice for stage 1
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s1, [R]>}
