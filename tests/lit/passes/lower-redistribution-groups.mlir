// RUN: %spmdc-opt %s -p 'lower-redistribution' | FileCheck %s

// A device-group job's virtual mesh (spmdc.sharding.device_groups): a step on "grp" moves across the
// groups, which takes values whole within each group (spmdc.passes.cross_group), so dp is reduced first.
shard.mesh @groups = <["grp" = 2, "dp" = 4]>

// CHECK-LABEL: func.func @grp_partial_to_split
// CHECK-NEXT: comm.all_reduce %x {axes = ["dp"], mesh = @groups, op = "sum", shard.sharding = [#shard<@groups, [P(sum), R]>]}
// CHECK-NEXT: comm.reduce_scatter %{{.*}} {axis = "grp", dim = 0, mesh = @groups, op = "sum", shard.sharding = [#shard<@groups, [S(0), R]>]}
// CHECK-NEXT: comm.all_slice %{{.*}} {axis = "dp", dim = 0, mesh = @groups, shard.sharding = [#shard<@groups, [S(0), S(0)]>]}
// CHECK-NEXT: func.return
func.func @grp_partial_to_split(%x: tensor<64x32xf32> {shard.sharding = #shard<@groups, [P(sum), P(sum)]>}) -> tensor<64x32xf32> {
  %0 = shard.redistribute %x {from = #shard<@groups, [P(sum), P(sum)]>, to = #shard<@groups, [S(0), S(0)]>} : tensor<64x32xf32>
  func.return %0 : tensor<64x32xf32>
}
