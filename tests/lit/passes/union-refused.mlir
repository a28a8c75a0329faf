// RUN: not %spmdc-opt %s -p sharding-propagation 2>&1 | FileCheck %s

// The sharding passes do not handle device groups yet: a union layout is refused, named,
// instead of being read as "no layout" (which would replicate the value silently).
// CHECK: union-refused.mlir:[[# @LINE + 3]]:1: error: 'func.func' op argument #0 has a union layout #shard.union<split(0, [2, 1]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>: device groups are not yet supported
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
func.func @f(%x: tensor<6x8xf32> {shard.sharding = #shard.union<split(0, [2, 1]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>}) -> tensor<6x8xf32> {
  %0 = tensor.relu %x : tensor<6x8xf32>
  func.return %0 : tensor<6x8xf32>
}
