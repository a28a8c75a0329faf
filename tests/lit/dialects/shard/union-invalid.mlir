// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g2 = <["tp" = 2]> devices = [3, 4]
// expected-error@+1 {{'func.func' op 'shard.sharding' of argument #0: groups '@g0' and '@g2' share device 3; the groups of a union must be disjoint}}
func.func @overlap(%x: tensor<6x8xf32> {shard.sharding = #shard.union<dup, [#shard<@g0, [R]>, #shard<@g2, [R]>]>}) -> tensor<6x8xf32> {
  func.return %x : tensor<6x8xf32>
}

// -----

shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
// expected-error@+1 {{'func.func' op 'shard.sharding' of argument #0: dim 0 of size 7 does not split in the ratios 2:1 (their sum 3 must divide it)}}
func.func @ratios(%x: tensor<7x8xf32> {shard.sharding = #shard.union<split(0, [2, 1]), [#shard<@g0, [R]>, #shard<@g1, [R]>]>}) -> tensor<7x8xf32> {
  func.return %x : tensor<7x8xf32>
}

// -----

shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
// expected-error@+1 {{'func.func' op 'shard.sharding' of argument #0: split(0, [2, 1, 1]) gives 3 ratios for 2 groups}}
func.func @ratio_count(%x: tensor<6x8xf32> {shard.sharding = #shard.union<split(0, [2, 1, 1]), [#shard<@g0, [R]>, #shard<@g1, [R]>]>}) -> tensor<6x8xf32> {
  func.return %x : tensor<6x8xf32>
}

// -----

shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
// Each group's layout is checked on its own piece (@g0's piece of the split is 4x8).
// expected-error@+1 {{'func.func' op 'shard.sharding' of argument #0: group '@g0': placement S(2) on mesh axis 'tp' is out of range for rank-2 tensor tensor<4x8xf32>}}
func.func @member(%x: tensor<6x8xf32> {shard.sharding = #shard.union<split(0, [2, 1]), [#shard<@g0, [S(2)]>, #shard<@g1, [R]>]>}) -> tensor<6x8xf32> {
  func.return %x : tensor<6x8xf32>
}

// -----

// expected-error@+1 {{'shard.mesh' op lists 3 devices for a mesh of 4}}
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2]

// -----

// expected-error@+1 {{'shard.mesh' op lists device 1 twice}}
shard.mesh @g0 = <["tp" = 2]> devices = [1, 1]

// -----

shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
// expected-error@+1 {{split ratios must be positive, got [0, 1]}}
func.func @zero(%x: tensor<6x8xf32> {shard.sharding = #shard.union<split(0, [0, 1]), [#shard<@g0, [R]>, #shard<@g1, [R]>]>}) -> tensor<6x8xf32> {
  func.return %x : tensor<6x8xf32>
}
