// RUN: %spmdc-opt %s -p 'pipeline-schedule{schedule=1f1b microbatches=3}' | FileCheck %s

// Three heterogeneous stages: tp=2 (ranks 0-1, output split over columns), one rank (2), dp=2
// (ranks 3-4, reading its input split over the batch). Each move takes only the slices the
// receiver lacks: rank 2 gathers the columns from 0 and 1; ranks 3 and 4 each get their rows
// from rank 2; the gradients travel the same tables backwards.
shard.mesh @s0 = <["tp" = 2]> devices = [0, 1]
shard.mesh @s1 = <["dp" = 1]> devices = [2]
shard.mesh @s2 = <["dp" = 2]> devices = [3, 4]
pipe.boundary {id = 0, shape = [4, 8], from = #shard<@s0, [S(1)]>, to = #shard<@s1, [R]>,
               grad_from = #shard<@s1, [R]>, grad_to = #shard<@s0, [S(1)]>}
pipe.boundary {id = 1, shape = [4, 8], from = #shard<@s1, [R]>, to = #shard<@s2, [S(0)]>,
               grad_from = #shard<@s2, [S(0)]>, grad_to = #shard<@s1, [R]>}

// CHECK-LABEL: func.func @rank0() attributes {spmdc.rank = 0, spmdc.schedule = "1f1b", spmdc.stage = 0}
// CHECK-NEXT:    pipe.forward {mb = 0, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 0, to = [2], value = 0}
// CHECK-NEXT:    pipe.forward {mb = 1, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 1, to = [2], value = 0}
// CHECK-NEXT:    pipe.forward {mb = 2, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 2, to = [2], value = 0}
// CHECK-NEXT:    pipe.recv {from = [2], grad, mb = 0, value = 0}
// CHECK-NEXT:    pipe.backward {mb = 0, stage = 0}

// The middle stage receives before each forward and sends after it, and the reverse for each
// backward: one forward ahead of its first backward.
// CHECK-LABEL: func.func @rank2() attributes {spmdc.rank = 2, spmdc.schedule = "1f1b", spmdc.stage = 1}
// CHECK-NEXT:    pipe.recv {from = [0, 1], mb = 0, value = 0}
// CHECK-NEXT:    pipe.forward {mb = 0, stage = 1}
// CHECK-NEXT:    pipe.send {mb = 0, to = [3, 4], value = 1}
// CHECK-NEXT:    pipe.recv {from = [0, 1], mb = 1, value = 0}
// CHECK-NEXT:    pipe.forward {mb = 1, stage = 1}
// CHECK-NEXT:    pipe.send {mb = 1, to = [3, 4], value = 1}
// CHECK-NEXT:    pipe.recv {from = [3, 4], grad, mb = 0, value = 1}
// CHECK-NEXT:    pipe.backward {mb = 0, stage = 1}
// CHECK-NEXT:    pipe.send {grad, mb = 0, to = [0, 1], value = 0}
// CHECK-NEXT:    pipe.recv {from = [0, 1], mb = 2, value = 0}
// CHECK-NEXT:    pipe.forward {mb = 2, stage = 1}

// CHECK-LABEL: func.func @rank4() attributes {spmdc.rank = 4, spmdc.schedule = "1f1b", spmdc.stage = 2}
// CHECK-NEXT:    pipe.recv {from = [2], mb = 0, value = 1}
// CHECK-NEXT:    pipe.forward_backward {mb = 0, stage = 2}
// CHECK-NEXT:    pipe.send {grad, mb = 0, to = [2], value = 1}
