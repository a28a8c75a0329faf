// RUN: not %spmdc-opt %s -p cross-group 2>&1 | FileCheck %s

// Gathering a batch split across device groups has no process group to run on (the groups lay
// their pieces out differently): refused, located, naming the op.
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
shard.mesh @v0 = <["grp" = 2, "tp" = 4]>
shard.mesh @v1 = <["grp" = 2, "tp" = 2]>

func.func @fast(%x: tensor<6x8xf32> {shard.sharding = #shard<@v0, [RS(0, [4, 2]), R]>}) -> tensor<6x8xf32>
    attributes {spmdc.group = "g0"} {
  // CHECK: cross-group-invalid.mlir:[[# @LINE + 1]]:{{[0-9]+}}: error: 'comm.all_gather' op comm.all_gather on mesh axis 'grp' would move data between device groups
  %y = comm.all_gather %x {axis = "grp", dim = 0, mesh = @v0, sizes = [4, 2], shard.sharding = [#shard<@v0, [R, R]>]} : tensor<6x8xf32>
  func.return %y : tensor<6x8xf32>
}

func.func @slow(%x: tensor<6x8xf32> {shard.sharding = #shard<@v1, [RS(0, [4, 2]), R]>}) -> tensor<6x8xf32>
    attributes {spmdc.group = "g1"} {
  %y = comm.all_gather %x {axis = "grp", dim = 0, mesh = @v1, sizes = [4, 2], shard.sharding = [#shard<@v1, [R, R]>]} : tensor<6x8xf32>
  func.return %y : tensor<6x8xf32>
}
