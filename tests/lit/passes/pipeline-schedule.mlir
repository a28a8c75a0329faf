// RUN: %spmdc-opt %s -p 'pipeline-schedule{schedule=1f1b microbatches=4}' | FileCheck %s --check-prefix=ONEF
// RUN: %spmdc-opt %s -p 'pipeline-schedule{schedule=gpipe microbatches=4}' | FileCheck %s --check-prefix=GPIPE

// Two stages, each a tp=2 group: stage 0 (ranks 0, 1) leaves its output partial over tp (a
// row-parallel projection), stage 1 (ranks 2, 3) reads it replicated. The finest-slice table
// sends each stage-1 rank both partial terms (from ranks 0 and 1, summed on arrival); the
// gradient comes back replicated, one message to each stage-0 rank from one stage-1 rank.
shard.mesh @stage0 = <["tp" = 2]> devices = [0, 1]
shard.mesh @stage1 = <["tp" = 2]> devices = [2, 3]
pipe.boundary {id = 0, shape = [2, 8, 32],
               from = #shard<@stage0, [P(sum)]>, to = #shard<@stage1, [R]>,
               grad_from = #shard<@stage1, [R]>, grad_to = #shard<@stage0, [R]>}

// 1F1B: stage 0 of 2 runs one forward ahead, then alternates, then drains; at most 2
// micro-batches between forward and backward.
// ONEF-LABEL: func.func @rank0() attributes {spmdc.rank = 0, spmdc.schedule = "1f1b", spmdc.stage = 0}
// ONEF-NEXT:    pipe.forward {mb = 0, stage = 0}
// ONEF-NEXT:    pipe.send {mb = 0, to = [2, 3], value = 0}
// ONEF-NEXT:    pipe.forward {mb = 1, stage = 0}
// ONEF-NEXT:    pipe.send {mb = 1, to = [2, 3], value = 0}
// ONEF-NEXT:    pipe.recv {from = [2], grad, mb = 0, value = 0}
// ONEF-NEXT:    pipe.backward {mb = 0, stage = 0}
// ONEF-NEXT:    pipe.forward {mb = 2, stage = 0}
// ONEF-NEXT:    pipe.send {mb = 2, to = [2, 3], value = 0}
// ONEF-NEXT:    pipe.recv {from = [2], grad, mb = 1, value = 0}
// ONEF-NEXT:    pipe.backward {mb = 1, stage = 0}
// ONEF-NEXT:    pipe.forward {mb = 3, stage = 0}
// ONEF-NEXT:    pipe.send {mb = 3, to = [2, 3], value = 0}
// ONEF-NEXT:    pipe.recv {from = [2], grad, mb = 2, value = 0}
// ONEF-NEXT:    pipe.backward {mb = 2, stage = 0}
// ONEF-NEXT:    pipe.recv {from = [2], grad, mb = 3, value = 0}
// ONEF-NEXT:    pipe.backward {mb = 3, stage = 0}
// ONEF-NEXT:    pipe.step
// ONEF-NEXT:    func.return
// ONEF-LABEL: func.func @rank1()
// ONEF:         pipe.recv {from = [3], grad, mb = 0, value = 0}
// The last stage: each micro-batch's forward and backward at once, both partial terms in.
// ONEF-LABEL: func.func @rank2() attributes {spmdc.rank = 2, spmdc.schedule = "1f1b", spmdc.stage = 1}
// ONEF-NEXT:    pipe.recv {from = [0, 1], mb = 0, value = 0}
// ONEF-NEXT:    pipe.forward_backward {mb = 0, stage = 1}
// ONEF-NEXT:    pipe.send {grad, mb = 0, to = [0], value = 0}
// ONEF-NEXT:    pipe.recv {from = [0, 1], mb = 1, value = 0}
// ONEF-LABEL: func.func @rank3()
// ONEF:         pipe.send {grad, mb = 3, to = [1], value = 0}
// ONEF-NEXT:    pipe.step

// GPipe: every forward first (all four micro-batches held), then every backward.
// GPIPE-LABEL: func.func @rank0() attributes {spmdc.rank = 0, spmdc.schedule = "gpipe", spmdc.stage = 0}
// GPIPE-NEXT:    pipe.forward {mb = 0, stage = 0}
// GPIPE-NEXT:    pipe.send {mb = 0, to = [2, 3], value = 0}
// GPIPE-NEXT:    pipe.forward {mb = 1, stage = 0}
// GPIPE-NEXT:    pipe.send {mb = 1, to = [2, 3], value = 0}
// GPIPE-NEXT:    pipe.forward {mb = 2, stage = 0}
// GPIPE-NEXT:    pipe.send {mb = 2, to = [2, 3], value = 0}
// GPIPE-NEXT:    pipe.forward {mb = 3, stage = 0}
// GPIPE-NEXT:    pipe.send {mb = 3, to = [2, 3], value = 0}
// GPIPE-NEXT:    pipe.recv {from = [2], grad, mb = 0, value = 0}
// GPIPE-NEXT:    pipe.backward {mb = 0, stage = 0}
// GPIPE-NEXT:    pipe.recv {from = [2], grad, mb = 1, value = 0}
// GPIPE-NEXT:    pipe.backward {mb = 1, stage = 0}
// GPIPE:         pipe.backward {mb = 3, stage = 0}
// GPIPE-NEXT:    pipe.step
