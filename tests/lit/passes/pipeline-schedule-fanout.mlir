// RUN: %spmdc-opt %s -p 'pipeline-schedule{schedule=1f1b microbatches=2}' | FileCheck %s

// A value several later stages read (a skip connection): value 0 of stage 0 (tp=2, split over
// columns) goes to stage 1 (rank 2) and to stage 2 (rank 3), one pipe.boundary per consumer with
// the same id. Stage 0 sends each micro-batch's pieces to both consumers in one pipe.send, and
// its backward waits for the gradient from both (one pipe.recv, the two summed on arrival).
shard.mesh @s0 = <["tp" = 2]> devices = [0, 1]
shard.mesh @s1 = <["dp" = 1]> devices = [2]
shard.mesh @s2 = <["dp" = 1]> devices = [3]
pipe.boundary {id = 0, shape = [4, 8], from = #shard<@s0, [S(1)]>, to = #shard<@s1, [R]>,
               grad_from = #shard<@s1, [R]>, grad_to = #shard<@s0, [S(1)]>}
pipe.boundary {id = 0, shape = [4, 8], from = #shard<@s0, [S(1)]>, to = #shard<@s2, [R]>,
               grad_from = #shard<@s2, [R]>, grad_to = #shard<@s0, [S(1)]>}
pipe.boundary {id = 1, shape = [4, 8], from = #shard<@s1, [R]>, to = #shard<@s2, [R]>,
               grad_from = #shard<@s2, [R]>, grad_to = #shard<@s1, [R]>}

// CHECK-LABEL: func.func @rank0() attributes {spmdc.rank = 0, spmdc.schedule = "1f1b", spmdc.stage = 0}
// CHECK-NEXT:    pipe.forward {mb = 0, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 0, to = [2, 3], value = 0}
// CHECK-NEXT:    pipe.forward {mb = 1, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 1, to = [2, 3], value = 0}
// CHECK-NEXT:    pipe.recv {from = [2, 3], grad, mb = 0, value = 0}
// CHECK-NEXT:    pipe.backward {mb = 0, stage = 0}
// CHECK-NEXT:    pipe.recv {from = [2, 3], grad, mb = 1, value = 0}
// CHECK-NEXT:    pipe.backward {mb = 1, stage = 0}
// CHECK-NEXT:    pipe.step

// The middle stage receives value 0 from stage 0 only and sends its gradient back there.
// CHECK-LABEL: func.func @rank2() attributes {spmdc.rank = 2, spmdc.schedule = "1f1b", spmdc.stage = 1}
// CHECK-NEXT:    pipe.recv {from = [0, 1], mb = 0, value = 0}
// CHECK-NEXT:    pipe.forward {mb = 0, stage = 1}
// CHECK-NEXT:    pipe.send {mb = 0, to = [3], value = 1}
// CHECK:         pipe.recv {from = [3], grad, mb = 0, value = 1}
// CHECK-NEXT:    pipe.backward {mb = 0, stage = 1}
// CHECK-NEXT:    pipe.send {grad, mb = 0, to = [0, 1], value = 0}

// The last stage reads both values; each gradient goes back to its own producer.
// CHECK-LABEL: func.func @rank3() attributes {spmdc.rank = 3, spmdc.schedule = "1f1b", spmdc.stage = 2}
// CHECK-NEXT:    pipe.recv {from = [0, 1], mb = 0, value = 0}
// CHECK-NEXT:    pipe.recv {from = [2], mb = 0, value = 1}
// CHECK-NEXT:    pipe.forward_backward {mb = 0, stage = 2}
// CHECK-NEXT:    pipe.send {grad, mb = 0, to = [0, 1], value = 0}
// CHECK-NEXT:    pipe.send {grad, mb = 0, to = [2], value = 1}
