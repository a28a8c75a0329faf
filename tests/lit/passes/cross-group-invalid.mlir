// RUN: not %spmdc-opt %s --split-input-file -p cross-group 2>&1 | FileCheck %s

// The groups' programs must move the same values across the groups: a reduction only one group
// makes is refused (its plan does not match the other's), never guessed.
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
shard.mesh @v0 = <["grp" = 2, "tp" = 4]>
shard.mesh @v1 = <["grp" = 2, "tp" = 2]>
// CHECK: cross-group-invalid.mlir:[[# @LINE + 1]]:1: error: 'func.func' op the device groups' programs move different numbers of values across groups (g0: 1, g1: 0)
func.func @fast(%x: tensor<8xf32> {shard.sharding = #shard<@v0, [P(sum), R]>}) -> tensor<8xf32> attributes {spmdc.group = "g0"} {
  %y = comm.all_reduce %x {axes = ["grp"], mesh = @v0, op = "sum", shard.sharding = [#shard<@v0, [R, R]>]} : tensor<8xf32>
  func.return %y : tensor<8xf32>
}
func.func @slow(%x: tensor<8xf32> {shard.sharding = #shard<@v1, [R, R]>}) -> tensor<8xf32> attributes {spmdc.group = "g1"} {
  func.return %x : tensor<8xf32>
}

// -----

// A value still partial inside a group cannot be reduced across groups (no rank holds the group's
// term): the own axes must be reduced first.
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
shard.mesh @v0 = <["grp" = 2, "tp" = 4]>
shard.mesh @v1 = <["grp" = 2, "tp" = 2]>
func.func @fast(%x: tensor<8xf32> {shard.sharding = #shard<@v0, [P(sum), P(sum)]>}) -> tensor<8xf32> attributes {spmdc.group = "g0"} {
  // CHECK: cross-group-invalid.mlir:[[# @LINE + 1]]:3: error: 'comm.all_reduce' op the cross-group reduction takes a value still partial inside group 'g0'
  %y = comm.all_reduce %x {axes = ["grp"], mesh = @v0, op = "sum", shard.sharding = [#shard<@v0, [R, P(sum)]>]} : tensor<8xf32>
  func.return %y : tensor<8xf32>
}
func.func @slow(%x: tensor<8xf32> {shard.sharding = #shard<@v1, [P(sum), R]>}) -> tensor<8xf32> attributes {spmdc.group = "g1"} {
  %y = comm.all_reduce %x {axes = ["grp"], mesh = @v1, op = "sum", shard.sharding = [#shard<@v1, [R, R]>]} : tensor<8xf32>
  func.return %y : tensor<8xf32>
}
