// RUN: %spmdc-opt %s | %spmdc-opt | FileCheck %s

// The pipe dialect round-trips: boundaries at top level, a rank's schedule as a function.
shard.mesh @s0 = <["tp" = 2]> devices = [0, 1]
shard.mesh @s1 = <["dp" = 1]> devices = [2]
// CHECK: pipe.boundary {from = #shard<@s0, [S(1)]>, grad_from = #shard<@s1, [R]>, grad_to = #shard<@s0, [S(1)]>, id = 0, shape = [4, 8], to = #shard<@s1, [R]>}
pipe.boundary {id = 0, shape = [4, 8], from = #shard<@s0, [S(1)]>, to = #shard<@s1, [R]>,
               grad_from = #shard<@s1, [R]>, grad_to = #shard<@s0, [S(1)]>}
// CHECK-LABEL: func.func @rank0()
// CHECK-NEXT: pipe.forward {mb = 0, stage = 0}
// CHECK-NEXT: pipe.send {mb = 0, to = [2], value = 0}
// CHECK-NEXT: pipe.recv {from = [2], grad, mb = 0, value = 0}
// CHECK-NEXT: pipe.backward {mb = 0, stage = 0}
// CHECK-NEXT: pipe.step
func.func @rank0() attributes {spmdc.rank = 0, spmdc.stage = 0} {
  pipe.forward {mb = 0, stage = 0}
  pipe.send {mb = 0, to = [2], value = 0}
  pipe.recv {from = [2], grad, mb = 0, value = 0}
  pipe.backward {mb = 0, stage = 0}
  pipe.step
  func.return
}
