// RUN: %spmdc-opt %s -p 'pipeline-schedule{schedule=interleaved microbatches=4}' | FileCheck %s
// RUN: %spmdc-opt %s -p 'pipeline-schedule{schedule=Interleaved1F1B microbatches=4}' | FileCheck %s
// RUN: not %spmdc-opt %s -p 'pipeline-schedule{schedule=1f1b microbatches=4}' 2>&1 | FileCheck %s --check-prefix=PLAIN
// RUN: not %spmdc-opt %s -p 'pipeline-schedule{schedule=interleaved microbatches=3}' 2>&1 | FileCheck %s --check-prefix=ROUNDS

// Interleaved 1F1B (virtual pipeline stages): 4 stages on 2 ranks, stage k on rank k % 2
// (rank 0 holds stages 0 and 2, rank 1 stages 1 and 3). Micro-batches go in rounds of 2:
// rank 0 warms up with (2-1-0)·2 + (2-1)·2 = 4 forwards (round 0 through its stage 0, then its
// stage 2), then alternates one forward and one backward (the last chunk's backward first),
// then drains. Each op names its stage; values go to the next stage on the other rank, the
// output of stage 1 back to rank 0 for stage 2.
shard.mesh @stage0 = <["dp" = 1]> devices = [0]
shard.mesh @stage1 = <["dp" = 1]> devices = [1]
shard.mesh @stage2 = <["dp" = 1]> devices = [0]
shard.mesh @stage3 = <["dp" = 1]> devices = [1]
pipe.boundary {id = 0, shape = [2, 8], from = #shard<@stage0, [R]>, to = #shard<@stage1, [R]>,
               grad_from = #shard<@stage1, [R]>, grad_to = #shard<@stage0, [R]>}
pipe.boundary {id = 1, shape = [2, 8], from = #shard<@stage1, [R]>, to = #shard<@stage2, [R]>,
               grad_from = #shard<@stage2, [R]>, grad_to = #shard<@stage1, [R]>}
pipe.boundary {id = 2, shape = [2, 8], from = #shard<@stage2, [R]>, to = #shard<@stage3, [R]>,
               grad_from = #shard<@stage3, [R]>, grad_to = #shard<@stage2, [R]>}

// CHECK-LABEL: func.func @rank0() attributes {spmdc.rank = 0, spmdc.schedule = "interleaved1f1b", spmdc.stage = 0, spmdc.stages = [0, 2]} {
// CHECK-NEXT:    pipe.forward {mb = 0, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 0, stage = 0, to = [1], value = 0}
// CHECK-NEXT:    pipe.forward {mb = 1, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 1, stage = 0, to = [1], value = 0}
// CHECK-NEXT:    pipe.recv {from = [1], mb = 0, stage = 2, value = 1}
// CHECK-NEXT:    pipe.forward {mb = 0, stage = 2}
// CHECK-NEXT:    pipe.send {mb = 0, stage = 2, to = [1], value = 2}
// CHECK-NEXT:    pipe.recv {from = [1], mb = 1, stage = 2, value = 1}
// CHECK-NEXT:    pipe.forward {mb = 1, stage = 2}
// CHECK-NEXT:    pipe.send {mb = 1, stage = 2, to = [1], value = 2}
// CHECK-NEXT:    pipe.forward {mb = 2, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 2, stage = 0, to = [1], value = 0}
// CHECK-NEXT:    pipe.recv {from = [1], grad, mb = 0, stage = 2, value = 2}
// CHECK-NEXT:    pipe.backward {mb = 0, stage = 2}
// CHECK-NEXT:    pipe.send {grad, mb = 0, stage = 2, to = [1], value = 1}
// CHECK-NEXT:    pipe.forward {mb = 3, stage = 0}
// CHECK-NEXT:    pipe.send {mb = 3, stage = 0, to = [1], value = 0}
// CHECK-NEXT:    pipe.recv {from = [1], grad, mb = 1, stage = 2, value = 2}
// CHECK-NEXT:    pipe.backward {mb = 1, stage = 2}
// CHECK-NEXT:    pipe.send {grad, mb = 1, stage = 2, to = [1], value = 1}
// CHECK-NEXT:    pipe.recv {from = [1], mb = 2, stage = 2, value = 1}
// CHECK-NEXT:    pipe.forward {mb = 2, stage = 2}
// CHECK-NEXT:    pipe.send {mb = 2, stage = 2, to = [1], value = 2}
// CHECK-NEXT:    pipe.recv {from = [1], grad, mb = 0, stage = 0, value = 0}
// CHECK-NEXT:    pipe.backward {mb = 0, stage = 0}
// CHECK-NEXT:    pipe.recv {from = [1], mb = 3, stage = 2, value = 1}
// CHECK-NEXT:    pipe.forward {mb = 3, stage = 2}
// CHECK-NEXT:    pipe.send {mb = 3, stage = 2, to = [1], value = 2}
// CHECK-NEXT:    pipe.recv {from = [1], grad, mb = 1, stage = 0, value = 0}
// CHECK-NEXT:    pipe.backward {mb = 1, stage = 0}
// CHECK-NEXT:    pipe.recv {from = [1], grad, mb = 2, stage = 2, value = 2}
// CHECK-NEXT:    pipe.backward {mb = 2, stage = 2}
// CHECK-NEXT:    pipe.send {grad, mb = 2, stage = 2, to = [1], value = 1}
// CHECK-NEXT:    pipe.recv {from = [1], grad, mb = 3, stage = 2, value = 2}
// CHECK-NEXT:    pipe.backward {mb = 3, stage = 2}
// CHECK-NEXT:    pipe.send {grad, mb = 3, stage = 2, to = [1], value = 1}
// CHECK-NEXT:    pipe.recv {from = [1], grad, mb = 2, stage = 0, value = 0}
// CHECK-NEXT:    pipe.backward {mb = 2, stage = 0}
// CHECK-NEXT:    pipe.recv {from = [1], grad, mb = 3, stage = 0, value = 0}
// CHECK-NEXT:    pipe.backward {mb = 3, stage = 0}
// CHECK-NEXT:    pipe.step
// CHECK-NEXT:    func.return
// The last stage (3, on rank 1) runs each micro-batch's forward and backward at once.
// CHECK-LABEL: func.func @rank1() attributes {spmdc.rank = 1, spmdc.schedule = "interleaved1f1b", spmdc.stage = 1, spmdc.stages = [1, 3]}
// CHECK-NEXT:    pipe.recv {from = [0], mb = 0, stage = 1, value = 0}
// CHECK-NEXT:    pipe.forward {mb = 0, stage = 1}
// CHECK:         pipe.recv {from = [0], mb = 0, stage = 3, value = 2}
// CHECK-NEXT:    pipe.forward_backward {mb = 0, stage = 3}
// CHECK-NEXT:    pipe.send {grad, mb = 0, stage = 3, to = [0], value = 2}

// PLAIN: 4 stage meshes on 2 device groups: several stages per rank need schedule=interleaved1f1b
// ROUNDS: 3 micro-batches is not a multiple of the 2 device groups
