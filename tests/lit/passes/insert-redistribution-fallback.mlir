// RUN: %spmdc-opt %s -p 'insert-redistribution' 2>&1 | FileCheck %s

// Where no strategy of an op yields the result layouts it was given, the op runs in the best
// strategy there is and a shard.redistribute after it brings each result to its layout, with one
// warning per op naming the op, its location and the bytes moved.
// CHECK: ShardingFallbackWarning: 'tensor.attention_grad' op at loc("{{.*}}insert-redistribution-fallback.mlir":[[# @LINE + 25]]:3): no sharding strategy produces the required result layout; computed in the best available strategy and redistributed after it (result #0 [S(1)] -> [S(2)]): 384 extra bytes moved per rank
// CHECK: ShardingFallbackWarning: 'tensor.relu' op at loc("{{.*}}insert-redistribution-fallback.mlir":[[# @LINE + 39]]:3): {{.*}}(result #0 kept [S(0), S(0)] (no collective makes [S(0), P(sum)])): 0 extra bytes moved per rank
// CHECK-NOT: ShardingFallbackWarning

shard.mesh @mesh = <["tp" = 4]>
shard.mesh @mesh2 = <["dp" = 2, "tp" = 2]>

// dq sharded by queries but dk, dv by heads: one strategy gives all three, by heads, and dq is
// moved to its layout by one redistribution that every user of dq shares.
// CHECK-LABEL: func.func @attention_grad_mixed_results
// CHECK: %[[DO:.*]] = shard.redistribute %do {from = #shard<@mesh, [S(2)]>
// CHECK-SAME: to = #shard<@mesh, [S(1)]>}
// CHECK-NEXT: %[[G:.*]]:3 = tensor.attention_grad %[[DO]], %q, %k, %v, %o
// CHECK-SAME: shard.sharding = [#shard<@mesh, [S(1)]>, #shard<@mesh, [S(1)]>, #shard<@mesh, [S(1)]>]
// CHECK-NEXT: %[[DQ:.*]] = shard.redistribute %[[G]]#0 {from = #shard<@mesh, [S(1)]>
// CHECK-SAME: to = #shard<@mesh, [S(2)]>}
// CHECK-NEXT: tensor.exp %[[DQ]]
// CHECK-NEXT: tensor.neg %[[DQ]]
// CHECK-NEXT: func.return %{{.*}}, %{{.*}}, %[[G]]#1, %[[G]]#2
func.func @attention_grad_mixed_results(%do: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(2)]>},
    %q: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
    %k: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
    %v: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
    %o: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>})
    -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) {
  %dq, %dk, %dv = tensor.attention_grad %do, %q, %k, %v, %o {scale = 0.35, shard.sharding = [#shard<@mesh, [S(2)]>, #shard<@mesh, [S(1)]>, #shard<@mesh, [S(1)]>]} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>)
  %e = tensor.exp %dq {shard.sharding = [#shard<@mesh, [S(2)]>]} : tensor<2x4x8x8xf32>
  %n = tensor.neg %dq {shard.sharding = [#shard<@mesh, [S(2)]>]} : tensor<2x4x8x8xf32>
  func.return %e, %n, %dk, %dv : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
}

// relu is not linear: its result cannot be a partial sum, and no collective makes one, so the
// result keeps the layout its cheapest strategy yields (the operand reduce-scattered first) and
// its users adapt.
// CHECK-LABEL: func.func @relu_result_partial
// CHECK: %[[X:.*]] = shard.redistribute %x {from = #shard<@mesh2, [S(0), P(sum)]>
// CHECK-SAME: to = #shard<@mesh2, [S(0), S(0)]>}
// CHECK-NEXT: %[[Y:.*]] = tensor.relu %[[X]] {shard.sharding = [#shard<@mesh2, [S(0), S(0)]>]}
// CHECK-NEXT: func.return %[[Y]]
func.func @relu_result_partial(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh2, [S(0), P(sum)]>}) -> tensor<8x16xf32> {
  %0 = tensor.relu %x {shard.sharding = [#shard<@mesh2, [S(0), P(sum)]>]} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// Result layouts some strategy yields: no fallback, nothing after the op.
// CHECK-LABEL: func.func @do_not_fall_back_when_a_strategy_exists
// CHECK: tensor.attention_grad
// CHECK-NOT: shard.redistribute
// CHECK: func.return
func.func @do_not_fall_back_when_a_strategy_exists(%do: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
    %q: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
    %k: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
    %v: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
    %o: tensor<2x4x8x8xf32> {shard.sharding = #shard<@mesh, [S(1)]>})
    -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) {
  %dq, %dk, %dv = tensor.attention_grad %do, %q, %k, %v, %o {scale = 0.35, shard.sharding = [#shard<@mesh, [S(1)]>, #shard<@mesh, [S(1)]>, #shard<@mesh, [S(1)]>]} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>)
  func.return %dq, %dk, %dv : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
}
