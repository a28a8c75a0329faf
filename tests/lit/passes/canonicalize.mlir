// RUN: %spmdc-opt %s -p canonicalize | FileCheck %s

shard.mesh @mesh = <["dp" = 2, "tp" = 2]>

// CHECK-LABEL: func.func @compose_reshapes(
// CHECK-NEXT:    %[[R:.*]] = tensor.reshape %x : (tensor<4x4xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    func.return %[[R]] : tensor<2x8xf32>
func.func @compose_reshapes(%x: tensor<4x4xf32>) -> tensor<2x8xf32> {
  %0 = tensor.reshape %x : (tensor<4x4xf32>) -> tensor<16xf32>
  %1 = tensor.reshape %0 : (tensor<16xf32>) -> tensor<2x8xf32>
  func.return %1 : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @reshape_round_trip_folds_away(
// CHECK-NEXT:    func.return %x : tensor<4x4xf32>
func.func @reshape_round_trip_folds_away(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = tensor.reshape %x : (tensor<4x4xf32>) -> tensor<16xf32>
  %1 = tensor.reshape %0 : (tensor<16xf32>) -> tensor<2x8xf32>
  %2 = tensor.reshape %1 : (tensor<2x8xf32>) -> tensor<4x4xf32>
  func.return %2 : tensor<4x4xf32>
}

// The inner reshape has another user, so it stays; the outer one still composes.
// CHECK-LABEL: func.func @compose_reshapes_with_shared_inner(
// CHECK-NEXT:    %[[A:.*]] = tensor.reshape %x : (tensor<4x4xf32>) -> tensor<16xf32>
// CHECK-NEXT:    %[[B:.*]] = tensor.reshape %x : (tensor<4x4xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    func.return %[[A]], %[[B]] :
func.func @compose_reshapes_with_shared_inner(%x: tensor<4x4xf32>) -> (tensor<16xf32>, tensor<2x8xf32>) {
  %0 = tensor.reshape %x : (tensor<4x4xf32>) -> tensor<16xf32>
  %1 = tensor.reshape %0 : (tensor<16xf32>) -> tensor<2x8xf32>
  func.return %0, %1 : tensor<16xf32>, tensor<2x8xf32>
}

// Result dim i of permute(perm2) of permute(perm1) is dim perm1[perm2[i]].
// CHECK-LABEL: func.func @compose_permutes(
// CHECK-NEXT:    %[[P:.*]] = tensor.permute %x {perm = [2, 0, 1]} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-NEXT:    func.return %[[P]] : tensor<4x2x3xf32>
func.func @compose_permutes(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = tensor.permute %x {perm = [1, 2, 0]} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = tensor.permute %0 {perm = [1, 2, 0]} : (tensor<3x4x2xf32>) -> tensor<4x2x3xf32>
  func.return %1 : tensor<4x2x3xf32>
}

// CHECK-LABEL: func.func @inverse_permutes_cancel(
// CHECK-NEXT:    func.return %x : tensor<2x3x4xf32>
func.func @inverse_permutes_cancel(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = tensor.permute %x {perm = [1, 2, 0]} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = tensor.permute %0 {perm = [2, 0, 1]} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  func.return %1 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @fold_identity_ops(
// CHECK-NEXT:    %[[E:.*]] = tensor.exp %x : tensor<4x4xf32>
// CHECK-NEXT:    func.return %[[E]] : tensor<4x4xf32>
func.func @fold_identity_ops(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = tensor.cast %x : tensor<4x4xf32>
  %1 = tensor.broadcast %0 : tensor<4x4xf32>
  %2 = tensor.reshape %1 : tensor<4x4xf32>
  %3 = tensor.permute %2 {perm = [0, 1]} : tensor<4x4xf32>
  %4 = tensor.sum %3 {dims = []} : tensor<4x4xf32>
  %5 = tensor.max %4 {dims = [], keepdim = true} : tensor<4x4xf32>
  %6 = tensor.mean %5 {dims = []} : tensor<4x4xf32>
  %7 = tensor.exp %6 : tensor<4x4xf32>
  func.return %7 : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @do_not_fold_ops_that_change_the_value(
// CHECK-NEXT:    %[[C:.*]] = tensor.cast %x : (tensor<4x4xf32>) -> tensor<4x4xbf16>
// CHECK-NEXT:    %[[B:.*]] = tensor.broadcast %v : (tensor<4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:    %[[P:.*]] = tensor.permute %x {perm = [1, 0]} : tensor<4x4xf32>
// CHECK-NEXT:    %[[S:.*]] = tensor.sum %x {dims = [1], keepdim = true} : (tensor<4x4xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    func.return %[[C]], %[[B]], %[[P]], %[[S]] :
func.func @do_not_fold_ops_that_change_the_value(%x: tensor<4x4xf32>, %v: tensor<4xf32>) -> (tensor<4x4xbf16>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x1xf32>) {
  %0 = tensor.cast %x : (tensor<4x4xf32>) -> tensor<4x4xbf16>
  %1 = tensor.broadcast %v : (tensor<4xf32>) -> tensor<4x4xf32>
  %2 = tensor.permute %x {perm = [1, 0]} : tensor<4x4xf32>
  %3 = tensor.sum %x {dims = [1], keepdim = true} : (tensor<4x4xf32>) -> tensor<4x1xf32>
  func.return %0, %1, %2, %3 : tensor<4x4xbf16>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x1xf32>
}

// CHECK-LABEL: func.func @fold_redistribute_to_same_layout(
// CHECK-NEXT:    func.return %x : tensor<4x4xf32>
func.func @fold_redistribute_to_same_layout(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [S(0), R]>} : tensor<4x4xf32>
  func.return %0 : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @compose_redistributes(
// CHECK-NEXT:    %[[R:.*]] = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [R, S(1)]>} : tensor<4x4xf32>
// CHECK-NEXT:    func.return %[[R]] : tensor<4x4xf32>
func.func @compose_redistributes(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [R, R]>} : tensor<4x4xf32>
  %1 = shard.redistribute %0 {from = #shard<@mesh, [R, R]>, to = #shard<@mesh, [R, S(1)]>} : tensor<4x4xf32>
  func.return %1 : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @redistribute_round_trip_folds_away(
// CHECK-NEXT:    func.return %x : tensor<4x4xf32>
func.func @redistribute_round_trip_folds_away(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [P(sum), R]>, to = #shard<@mesh, [R, R]>} : tensor<4x4xf32>
  %1 = shard.redistribute %0 {from = #shard<@mesh, [R, R]>, to = #shard<@mesh, [P(sum), R]>} : tensor<4x4xf32>
  func.return %1 : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @do_not_fold_redistribute_between_different_layouts(
// CHECK-NEXT:    %[[R:.*]] = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [R, R]>} : tensor<4x4xf32>
// CHECK-NEXT:    %[[P:.*]] = shard.redistribute %x {from = #shard<@mesh, [P(sum), R]>, to = #shard<@mesh, [P(avg), R]>} : tensor<4x4xf32>
// CHECK-NEXT:    func.return %[[R]], %[[P]] :
func.func @do_not_fold_redistribute_between_different_layouts(%x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [R, R]>} : tensor<4x4xf32>
  %1 = shard.redistribute %x {from = #shard<@mesh, [P(sum), R]>, to = #shard<@mesh, [P(avg), R]>} : tensor<4x4xf32>
  func.return %0, %1 : tensor<4x4xf32>, tensor<4x4xf32>
}

// Two redistributes whose layouts do not meet are not a chain.
// CHECK-LABEL: func.func @do_not_compose_redistributes_that_do_not_meet(
// CHECK-NEXT:    %[[A:.*]] = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [R, R]>} : tensor<4x4xf32>
// CHECK-NEXT:    %[[B:.*]] = shard.redistribute %[[A]] {from = #shard<@mesh, [R, S(1)]>, to = #shard<@mesh, [S(0), R]>} : tensor<4x4xf32>
// CHECK-NEXT:    func.return %[[B]] : tensor<4x4xf32>
func.func @do_not_compose_redistributes_that_do_not_meet(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [R, R]>} : tensor<4x4xf32>
  %1 = shard.redistribute %0 {from = #shard<@mesh, [R, S(1)]>, to = #shard<@mesh, [S(0), R]>} : tensor<4x4xf32>
  func.return %1 : tensor<4x4xf32>
}

// An annotation pins a layout: it is not a no-op to fold.
// CHECK-LABEL: func.func @do_not_fold_annotate(
// CHECK-NEXT:    %[[A:.*]] = shard.annotate %x {sharding = #shard<@mesh, [S(0), R]>} : tensor<4x4xf32>
// CHECK-NEXT:    func.return %[[A]] : tensor<4x4xf32>
func.func @do_not_fold_annotate(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0), R]>} : tensor<4x4xf32>
  func.return %0 : tensor<4x4xf32>
}

// canonicalize also erases dead pure ops, but keeps collectives.
// CHECK-LABEL: func.func @erase_dead_pure_ops(
// CHECK-NEXT:    %[[G:.*]] = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4x4xf32>
// CHECK-NEXT:    func.return %x : tensor<4x4xf32>
func.func @erase_dead_pure_ops(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = tensor.exp %x : tensor<4x4xf32>
  %1 = tensor.neg %0 : tensor<4x4xf32>
  %2 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4x4xf32>
  func.return %x : tensor<4x4xf32>
}

// Patterns apply inside kernel.fused regions too.
// CHECK-LABEL: func.func @canonicalize_inside_fused_region(
// CHECK-NEXT:    %[[F:.*]] = kernel.fused %x : tensor<4x4xf32> {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<4x4xf32>):
// CHECK-NEXT:      kernel.yield %[[A]] : tensor<4x4xf32>
// CHECK-NEXT:    }
func.func @canonicalize_inside_fused_region(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = kernel.fused %x : tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %1 = tensor.permute %a {perm = [1, 0]} : tensor<4x4xf32>
    %2 = tensor.permute %1 {perm = [1, 0]} : tensor<4x4xf32>
    %3 = tensor.exp %a : tensor<4x4xf32>
    kernel.yield %2 : tensor<4x4xf32>
  }
  func.return %0 : tensor<4x4xf32>
}
