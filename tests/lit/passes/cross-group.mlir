// RUN: %spmdc-opt %s -p cross-group | FileCheck %s

// Heterogeneous data parallelism on 6 ranks: group @g0 is tp=4 on ranks 0-3, group @g1 is tp=2 on
// ranks 4-5, each group's program on its virtual mesh ["grp" = 2, "tp" = n]. Their gradient
// reductions across the groups become split all-reduces: a weight sharded S(0) by both groups (rows
// 0-1 of rank 0 are rows 0-1 of rank 4, ...) is summed per finest slice over exactly its holders,
// {0, 4} {1, 4} {2, 5} {3, 5}; a replicated bias over all six ranks, one term per group. The two
// reductions nothing reads in between share one op: 5 all-reduces in all, each rank in 2 or 3.
// The scalar loss is read before the gradients are reduced: its own op, first (seq 0).

// CHECK-DAG: shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
// CHECK-DAG: shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
shard.mesh @v0 = <["grp" = 2, "tp" = 4]>
shard.mesh @v1 = <["grp" = 2, "tp" = 2]>

// CHECK-LABEL: func.func @fast
// CHECK: comm.split_all_reduce %loss {groups = {{\[\[}}0, 1, 2, 3, 4, 5]], op = "sum", seq = 0, shapes = {{\[\[}}]]
// CHECK-SAME: unions = [#shard.union<partial(sum), [#shard<@g0, [R]>, #shard<@g1, [R]>]>]
// CHECK: tensor.mul
// CHECK: comm.split_all_reduce %gw, %gb {groups = {{\[\[}}0, 1, 2, 3, 4, 5], [0, 4], [1, 4], [2, 5], [3, 5]], op = "sum", seq = 1, shapes = {{\[\[}}8, 6], [6]]
// CHECK-SAME: unions = [#shard.union<partial(sum), [#shard<@g0, [S(0)]>, #shard<@g1, [S(0)]>]>, #shard.union<partial(sum), [#shard<@g0, [R]>, #shard<@g1, [R]>]>]
// CHECK-NOT: comm.all_reduce
func.func @fast(%loss: tensor<f32> {shard.sharding = #shard<@v0, [P(sum), R]>},
                %gw: tensor<8x6xf32> {shard.sharding = #shard<@v0, [P(sum), S(0)]>},
                %gb: tensor<6xf32> {shard.sharding = #shard<@v0, [P(sum), R]>})
    -> (tensor<f32>, tensor<8x6xf32>, tensor<6xf32>) attributes {spmdc.group = "g0"} {
  %l = comm.all_reduce %loss {axes = ["grp"], mesh = @v0, op = "sum", shard.sharding = [#shard<@v0, [R, R]>]} : tensor<f32>
  %l2 = tensor.mul %l, %l {shard.sharding = [#shard<@v0, [R, R]>]} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %w = comm.all_reduce %gw {axes = ["grp"], mesh = @v0, op = "sum", shard.sharding = [#shard<@v0, [R, S(0)]>]} : tensor<8x6xf32>
  %b = comm.all_reduce %gb {axes = ["grp"], mesh = @v0, op = "sum", shard.sharding = [#shard<@v0, [R, R]>]} : tensor<6xf32>
  func.return %l2, %w, %b : tensor<f32>, tensor<8x6xf32>, tensor<6xf32>
}

// CHECK-LABEL: func.func @slow
// CHECK: comm.split_all_reduce %loss {groups = {{\[\[}}0, 1, 2, 3, 4, 5]], op = "sum", seq = 0
// A reduction over grp and tp: tp first (an ordinary all-reduce in the group), then across groups.
// CHECK: %[[T:.*]] = comm.all_reduce %gb {axes = ["tp"], mesh = @v1, op = "sum", shard.sharding = [#shard<@v1, [P(sum), R]>]}
// CHECK: comm.split_all_reduce %gw, %[[T]] {groups = {{\[\[}}0, 1, 2, 3, 4, 5], [0, 4], [1, 4], [2, 5], [3, 5]], op = "sum", seq = 1
// CHECK-NOT: comm.all_reduce
func.func @slow(%loss: tensor<f32> {shard.sharding = #shard<@v1, [P(sum), R]>},
                %gw: tensor<8x6xf32> {shard.sharding = #shard<@v1, [P(sum), S(0)]>},
                %gb: tensor<6xf32> {shard.sharding = #shard<@v1, [P(sum), P(sum)]>})
    -> (tensor<f32>, tensor<8x6xf32>, tensor<6xf32>) attributes {spmdc.group = "g1"} {
  %l = comm.all_reduce %loss {axes = ["grp"], mesh = @v1, op = "sum", shard.sharding = [#shard<@v1, [R, R]>]} : tensor<f32>
  %l2 = tensor.mul %l, %l {shard.sharding = [#shard<@v1, [R, R]>]} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %w = comm.all_reduce %gw {axes = ["grp"], mesh = @v1, op = "sum", shard.sharding = [#shard<@v1, [R, S(0)]>]} : tensor<8x6xf32>
  %b = comm.all_reduce %gb {axes = ["grp", "tp"], mesh = @v1, op = "sum", shard.sharding = [#shard<@v1, [R, R]>]} : tensor<6xf32>
  func.return %l2, %w, %b : tensor<f32>, tensor<8x6xf32>, tensor<6xf32>
}
