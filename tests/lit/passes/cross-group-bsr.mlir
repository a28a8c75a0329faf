// RUN: %spmdc-opt %s -p cross-group | FileCheck %s

// Moves across device groups other than reductions become batched send/recv from the
// finest-slice table (6 ranks, uneven: rows split 4 + 2 between @g0 = tp=4 on ranks 0-3 and
// @g1 = tp=2 on ranks 4-5).
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
shard.mesh @v0 = <["grp" = 2, "tp" = 4]>
shard.mesh @v1 = <["grp" = 2, "tp" = 2]>

// A batch split 2:1 gathered whole, replicated in both groups: rows 0-3 go from @g0 to each rank
// of @g1 (from two senders: 0 -> 4, 1 -> 5), rows 4-5 from @g1 to each rank of @g0: 6 messages.
// CHECK-LABEL: func.func @fast
// CHECK: %y = comm.bsr %x {from = #shard.union<split(0, [4, 2]), [#shard<@g0, [R]>, #shard<@g1, [R]>]>,
// CHECK-SAME: messages = {{\[\[}}0, 4], [1, 5], [4, 0], [4, 2], [5, 1], [5, 3]], seq = 0, shape = [6, 8]
// CHECK-SAME: to = #shard.union<dup, [#shard<@g0, [R]>, #shard<@g1, [R]>]>} : tensor<6x8xf32>
// A cross-group partial, columns S(1) in each group, cut into a 2:1 row split: each rank gets
// its rows' columns from the other group's holders (partial terms summed on arrival).
// CHECK: %z = comm.bsr %p {from = #shard.union<partial(sum), [#shard<@g0, [S(1)]>, #shard<@g1, [S(1)]>]>,
// CHECK-SAME: messages = {{\[\[}}0, 4], [1, 4], [2, 5], [3, 5], [4, 0], [4, 1], [5, 2], [5, 3]], seq = 1
// CHECK-SAME: to = #shard.union<split(0, [4, 2]), [#shard<@g0, [S(1)]>, #shard<@g1, [S(1)]>]>}
func.func @fast(%x: tensor<6x8xf32> {shard.sharding = #shard<@v0, [RS(0, [4, 2]), R]>},
                %p: tensor<6x8xf32> {shard.sharding = #shard<@v0, [P(sum), S(1)]>}) -> (tensor<6x8xf32>, tensor<6x8xf32>)
    attributes {spmdc.group = "g0"} {
  %y = comm.all_gather %x {axis = "grp", dim = 0, mesh = @v0, sizes = [4, 2], shard.sharding = [#shard<@v0, [R, R]>]} : tensor<6x8xf32>
  %z = comm.reduce_scatter %p {axis = "grp", dim = 0, mesh = @v0, op = "sum", sizes = [4, 2], shard.sharding = [#shard<@v0, [RS(0, [4, 2]), S(1)]>]} : tensor<6x8xf32>
  func.return %y, %z : tensor<6x8xf32>, tensor<6x8xf32>
}

// CHECK-LABEL: func.func @slow
// CHECK: comm.bsr %x {{.*}}seq = 0
// CHECK: comm.bsr %p {{.*}}seq = 1
func.func @slow(%x: tensor<6x8xf32> {shard.sharding = #shard<@v1, [RS(0, [4, 2]), R]>},
                %p: tensor<6x8xf32> {shard.sharding = #shard<@v1, [P(sum), S(1)]>}) -> (tensor<6x8xf32>, tensor<6x8xf32>)
    attributes {spmdc.group = "g1"} {
  %y = comm.all_gather %x {axis = "grp", dim = 0, mesh = @v1, sizes = [4, 2], shard.sharding = [#shard<@v1, [R, R]>]} : tensor<6x8xf32>
  %z = comm.reduce_scatter %p {axis = "grp", dim = 0, mesh = @v1, op = "sum", sizes = [4, 2], shard.sharding = [#shard<@v1, [RS(0, [4, 2]), S(1)]>]} : tensor<6x8xf32>
  func.return %y, %z : tensor<6x8xf32>, tensor<6x8xf32>
}
