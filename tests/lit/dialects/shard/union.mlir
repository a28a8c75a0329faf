// RUN: %roundtrip %s | FileCheck %s
// RUN: %spmdc-opt %s --print-op-generic | %spmdc-opt | FileCheck %s

// Device groups (HSPMD): meshes over explicit ranks, and union layouts across them.
// CHECK:      shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
// CHECK-NEXT: shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
// CHECK-NEXT: shard.mesh @whole = <["dp" = 6]>
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
shard.mesh @whole = <["dp" = 6]>

// A batch split 2:1 across the groups (rows 0-3 on @g0, 4-5 on @g1), a weight duplicated
// with a different tensor-parallel layout per group, a cross-group partial sum.
// CHECK-LABEL: func.func @unions
// CHECK-SAME: %x: tensor<6x8xf32> {shard.sharding = #shard.union<split(0, [2, 1]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>}
// CHECK-SAME: %w: tensor<8x8xf32> {shard.sharding = #shard.union<dup, [#shard<@g0, [S(0)]>, #shard<@g1, [S(1)]>]>}
// CHECK-SAME: %p: tensor<8x8xf32> {shard.sharding = #shard.union<partial(sum), [#shard<@g0, [R]>, #shard<@g1, [P(sum)]>]>}
// A one-group union is its group's plain layout.
// CHECK-SAME: %o: tensor<8x8xf32> {shard.sharding = #shard<@g0, [R]>}
func.func @unions(%x: tensor<6x8xf32> {shard.sharding = #shard.union<split(0, [2, 1]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>},
                  %w: tensor<8x8xf32> {shard.sharding = #shard.union<dup, [#shard<@g0, [S(0)]>, #shard<@g1, [S(1)]>]>},
                  %p: tensor<8x8xf32> {shard.sharding = #shard.union<partial(sum), [#shard<@g0, [R]>, #shard<@g1, [P(sum)]>]>},
                  %o: tensor<8x8xf32> {shard.sharding = #shard.union<dup, [#shard<@g0, [R]>]>}) -> tensor<6x8xf32> {
  func.return %x : tensor<6x8xf32>
}
