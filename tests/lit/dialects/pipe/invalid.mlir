// RUN: not %spmdc-opt %s --split-input-file 2>&1 | FileCheck %s

shard.mesh @s0 = <["dp" = 1]> devices = [0]
// CHECK: invalid.mlir:[[# @LINE + 1]]:1: error: 'pipe.boundary' op a boundary joins two stages: 'from' and 'to' are both on @s0
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s0, [R]>}

// -----

shard.mesh @s0 = <["dp" = 1]> devices = [0]
shard.mesh @s1 = <["dp" = 1]> devices = [1]
// CHECK: invalid.mlir:[[# @LINE + 1]]:1: error: 'pipe.boundary' op 'grad_from' and 'grad_to' come together
pipe.boundary {id = 0, shape = [4], from = #shard<@s0, [R]>, to = #shard<@s1, [R]>, grad_from = #shard<@s1, [R]>}

// -----

func.func @rank0() {
  // CHECK: invalid.mlir:[[# @LINE + 1]]:3: error: 'pipe.send' op 'to' must be a list of job ranks
  pipe.send {mb = 0, to = ["x"], value = 0}
  func.return
}

// -----

func.func @rank0() {
  // CHECK: invalid.mlir:[[# @LINE + 1]]:3: error: 'pipe.forward' op requires attribute 'mb'
  pipe.forward {stage = 0}
  func.return
}
