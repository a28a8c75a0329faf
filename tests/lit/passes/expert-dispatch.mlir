// RUN: %spmdc-opt %s -p expert-dispatch | FileCheck %s
// RUN: %spmdc-opt %s -p 'expert-dispatch,sharding-propagation,insert-redistribution,lower-redistribution,partition{rank=1},dce' | FileCheck %s --check-prefix=RANK1

shard.mesh @mesh = <["ep" = 2]>

// A router's permutation (HuggingFace's grouped_mm experts: sort, rows by token, grouped matmul
// on the histogram's bounds, inverse permutation) with experts sharded by expert on "ep".
// CHECK-LABEL: func.func @moe(
// CHECK:         %[[C:.*]] = tensor.expert_counts %[[IDS:.*]] {experts = 4, sources = 2} : (tensor<16xi64>) -> tensor<2x4xi64>
// CHECK-NEXT:    %[[D:.*]]:3 = tensor.expert_route %[[IDS]], %[[C]] {per_source = 8, slot_rows = 16, slots = 2}
// CHECK:         %[[R:.*]] = tensor.expert_dispatch %{{.*}}, %[[D]]#0, %[[C]] {count_load = true, per_source = 8, slot_rows = 16, top_k = 2} : (tensor<8x4xf32>, tensor<16xi64>, tensor<2x4xi64>) -> tensor<32x4xf32>
// CHECK:         %[[Y:.*]] = tensor.grouped_matmul %[[R]], %{{.*}}, %[[D]]#1, %[[D]]#2 {slot_rows = 16} : (tensor<32x4xf32>, tensor<4x4x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<32x6xf32>
// CHECK:         %[[A:.*]] = tensor.relu %[[Y]] : tensor<32x6xf32>
// CHECK:         tensor.expert_combine %[[A]], %[[D]]#0, %[[C]] {per_source = 8, top_k = 1} : (tensor<32x6xf32>, tensor<16xi64>, tensor<2x4xi64>) -> tensor<16x6xf32>
// CHECK-NOT:     tensor.sort
// On rank 1: its 4 tokens' rows go out, its slot (16 rows) comes in, and back: one all_to_all
// each way, after the all-gather of the counts (the size exchange).
// RANK1-LABEL: func.func @moe(
// RANK1:         tensor.expert_counts %{{.*}} {experts = 4, sources = 1} : (tensor<8xi64>) -> tensor<1x4xi64>
// RANK1:         comm.all_gather %{{.*}} {axis = "ep", dim = 0, mesh = @mesh} : (tensor<1x4xi64>) -> tensor<2x4xi64>
// RANK1:         tensor.expert_route %{{.*}}, %{{.*}} {first_source = 1, per_source = 8, slot_rows = 16, slots = 2}
// RANK1:         comm.expert_dispatch %{{.*}} {axis = "ep", count_load = true, mesh = @mesh, slot_rows = 16, top_k = [2]} : (tensor<4x4xf32>, tensor<8xi64>, tensor<2x4xi64>) -> tensor<16x4xf32>
// RANK1:         tensor.grouped_matmul %{{.*}} {slot_rows = 16} : (tensor<16x4xf32>, tensor<2x4x6xf32>, tensor<2xi32>, tensor<2xi32>) -> tensor<16x6xf32>
// RANK1:         comm.expert_combine %{{.*}} {axis = "ep", mesh = @mesh, top_k = [1]} : (tensor<16x6xf32>, tensor<8xi64>, tensor<2x4xi64>) -> tensor<8x6xf32>
// RANK1-NOT:     tensor.sort
func.func @moe(%x: tensor<8x4xf32> {shard.sharding = #shard<@mesh, [S(0)]>}, %ids: tensor<16xi64> {shard.sharding = #shard<@mesh, [S(0)]>}, %w: tensor<4x4x6xf32>) -> (tensor<16x6xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) {
  %wa = shard.annotate %w {sharding = #shard<@mesh, [S(0)]>} : tensor<4x4x6xf32>
  %s:2 = tensor.sort %ids {descending = false, dim = 0} : tensor<16xi64>
  %k = tensor.constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %t = tensor.div %s#1, %k {rounding_mode = "floor"} : (tensor<16xi64>, tensor<i64>) -> tensor<16xi64>
  %rows = tensor.index %x, %t : (tensor<8x4xf32>, tensor<16xi64>) -> tensor<16x4xf32>
  %f = tensor.cast %s#0 : (tensor<16xi64>) -> tensor<16xf32>
  %h = tensor.histc %f {bins = 4, max = 3.0, min = 0.0} : (tensor<16xf32>) -> tensor<4xf32>
  %hi = tensor.cast %h : (tensor<4xf32>) -> tensor<4xi32>
  %ends = tensor.cumsum %hi {dim = 0} : tensor<4xi32>
  %starts = tensor.pad %ends {high = [-1], low = [1], value = 0} : tensor<4xi32>
  %y = tensor.grouped_matmul %rows, %wa, %starts, %ends : (tensor<16x4xf32>, tensor<4x4x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<16x6xf32>
  %a = tensor.relu %y : tensor<16x6xf32>
  %z = tensor.constant {value = dense<0> : tensor<16xi64>} : tensor<16xi64>
  %ar = tensor.constant {value = dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : tensor<16xi64>} : tensor<16xi64>
  %inv = tensor.index_put %z, %s#1, %ar : tensor<16xi64>
  %out = tensor.index %a, %inv : (tensor<16x6xf32>, tensor<16xi64>) -> tensor<16x6xf32>
  func.return %out : tensor<16x6xf32>
}

// The same router with its inverse permutation's positions as a tensor.iota (an arange over a
// real-size batch's assignments is one, not a dense constant): the same rewrite.
// CHECK-LABEL: func.func @moe_iota(
// CHECK:         tensor.expert_dispatch
// CHECK:         tensor.expert_combine
// CHECK-NOT:     tensor.sort
// RANK1-LABEL: func.func @moe_iota(
// RANK1:         comm.expert_dispatch
// RANK1:         comm.expert_combine
// RANK1-NOT:     tensor.sort
func.func @moe_iota(%x: tensor<8x4xf32> {shard.sharding = #shard<@mesh, [S(0)]>}, %ids: tensor<16xi64> {shard.sharding = #shard<@mesh, [S(0)]>}, %w: tensor<4x4x6xf32>) -> (tensor<16x6xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) {
  %wa = shard.annotate %w {sharding = #shard<@mesh, [S(0)]>} : tensor<4x4x6xf32>
  %s:2 = tensor.sort %ids {descending = false, dim = 0} : tensor<16xi64>
  %k = tensor.constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %t = tensor.div %s#1, %k {rounding_mode = "floor"} : (tensor<16xi64>, tensor<i64>) -> tensor<16xi64>
  %rows = tensor.index %x, %t : (tensor<8x4xf32>, tensor<16xi64>) -> tensor<16x4xf32>
  %f = tensor.cast %s#0 : (tensor<16xi64>) -> tensor<16xf32>
  %h = tensor.histc %f {bins = 4, max = 3.0, min = 0.0} : (tensor<16xf32>) -> tensor<4xf32>
  %hi = tensor.cast %h : (tensor<4xf32>) -> tensor<4xi32>
  %ends = tensor.cumsum %hi {dim = 0} : tensor<4xi32>
  %starts = tensor.pad %ends {high = [-1], low = [1], value = 0} : tensor<4xi32>
  %y = tensor.grouped_matmul %rows, %wa, %starts, %ends : (tensor<16x4xf32>, tensor<4x4x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<16x6xf32>
  %a = tensor.relu %y : tensor<16x6xf32>
  %z = tensor.constant {value = dense<0> : tensor<16xi64>} : tensor<16xi64>
  %ar = tensor.iota {start = 0, step = 1} : tensor<16xi64>
  %inv = tensor.index_put %z, %s#1, %ar : tensor<16xi64>
  %out = tensor.index %a, %inv : (tensor<16x6xf32>, tensor<16xi64>) -> tensor<16x6xf32>
  func.return %out : tensor<16x6xf32>
}

// Without a mesh axis sharding the experts (here: replicated) the permutation stays as it is.
// CHECK-LABEL: func.func @do_not_rewrite_replicated_experts(
// CHECK:         tensor.sort
// CHECK-NOT:     tensor.expert_dispatch
// RANK1-LABEL: func.func @do_not_rewrite_replicated_experts(
func.func @do_not_rewrite_replicated_experts(%x: tensor<8x4xf32>, %ids: tensor<16xi64>, %w: tensor<4x4x6xf32>) -> tensor<16x4xf32> {
  %s:2 = tensor.sort %ids {descending = false, dim = 0} : tensor<16xi64>
  %k = tensor.constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %t = tensor.div %s#1, %k {rounding_mode = "floor"} : (tensor<16xi64>, tensor<i64>) -> tensor<16xi64>
  %rows = tensor.index %x, %t : (tensor<8x4xf32>, tensor<16xi64>) -> tensor<16x4xf32>
  func.return %rows : tensor<16x4xf32>
}
