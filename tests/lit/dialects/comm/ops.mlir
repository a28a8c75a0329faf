// RUN: %roundtrip %s | FileCheck %s
// RUN: %spmdc-opt %s --print-op-generic | %spmdc-opt | FileCheck %s

// Local (per-rank) shapes. Uneven dims follow torch.chunk: 13 over 4 ranks is 4, 4, 4, 1.
shard.mesh @mesh = <["dp" = 2, "tp" = 4]>

// CHECK-LABEL: func.func @all_gather_even(
// CHECK:         %[[G:.*]] = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %[[H:.*]] = comm.all_gather %[[G]] {axis = "dp", dim = 1, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<8x32xf32>
func.func @all_gather_even(%x: tensor<2x16xf32>) -> tensor<8x32xf32> {
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  %1 = comm.all_gather %0 {axis = "dp", dim = 1, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<8x32xf32>
  func.return %1 : tensor<8x32xf32>
}

// Every rank's piece of 13 (4 on ranks 0-2, 1 on rank 3) gathers back to 13.
// CHECK-LABEL: func.func @all_gather_uneven(
// CHECK:         comm.all_gather %big {axis = "tp", dim = 0, mesh = @mesh} : (tensor<4x16xf32>) -> tensor<13x16xf32>
// CHECK-NEXT:    comm.all_gather %small {axis = "tp", dim = 0, mesh = @mesh} : (tensor<1x16xf32>) -> tensor<13x16xf32>
func.func @all_gather_uneven(%big: tensor<4x16xf32>, %small: tensor<1x16xf32>) -> tensor<13x16xf32> {
  %0 = comm.all_gather %big {axis = "tp", dim = 0, mesh = @mesh} : (tensor<4x16xf32>) -> tensor<13x16xf32>
  %1 = comm.all_gather %small {axis = "tp", dim = 0, mesh = @mesh} : (tensor<1x16xf32>) -> tensor<13x16xf32>
  func.return %0 : tensor<13x16xf32>
}

// CHECK-LABEL: func.func @all_slice_uneven(
// CHECK:         comm.all_slice %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    comm.all_slice %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<1x16xf32>
// CHECK-NEXT:    comm.all_slice %x {axis = "dp", dim = 1, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<13x8xf32>
func.func @all_slice_uneven(%x: tensor<13x16xf32>) -> tensor<4x16xf32> {
  %0 = comm.all_slice %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<4x16xf32>
  %1 = comm.all_slice %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<1x16xf32>
  %2 = comm.all_slice %x {axis = "dp", dim = 1, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<13x8xf32>
  func.return %0 : tensor<4x16xf32>
}

// all_reduce keeps the type, so its custom form has one type.
// CHECK-LABEL: func.func @all_reduce(
// CHECK:         %[[S:.*]] = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<13x16xf32>
// CHECK-NEXT:    %[[M:.*]] = comm.all_reduce %[[S]] {axes = ["dp", "tp"], mesh = @mesh, op = "max"} : tensor<13x16xf32>
// CHECK-NEXT:    %[[A:.*]] = comm.all_reduce %[[M]] {axes = ["tp", "dp"], mesh = @mesh, op = "avg"} : tensor<13x16xf32>
// CHECK-NEXT:    %[[N:.*]] = comm.all_reduce %s {axes = ["dp"], mesh = @mesh, op = "min"} : tensor<f32>
func.func @all_reduce(%x: tensor<13x16xf32>, %s: tensor<f32>) -> tensor<13x16xf32> {
  %0 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<13x16xf32>
  %1 = comm.all_reduce %0 {axes = ["dp", "tp"], mesh = @mesh, op = "max"} : tensor<13x16xf32>
  %2 = comm.all_reduce %1 {axes = ["tp", "dp"], mesh = @mesh, op = "avg"} : tensor<13x16xf32>
  %3 = comm.all_reduce %s {axes = ["dp"], mesh = @mesh, op = "min"} : tensor<f32>
  func.return %2 : tensor<13x16xf32>
}

// CHECK-LABEL: func.func @reduce_scatter_uneven(
// CHECK:         comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<13x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "avg"} : (tensor<13x16xf32>) -> tensor<1x16xf32>
func.func @reduce_scatter_uneven(%x: tensor<13x16xf32>) -> tensor<4x16xf32> {
  %0 = comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<13x16xf32>) -> tensor<4x16xf32>
  %1 = comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "avg"} : (tensor<13x16xf32>) -> tensor<1x16xf32>
  func.return %0 : tensor<4x16xf32>
}

// Split along split_dim, gather along concat_dim; uneven pieces on either side.
// CHECK-LABEL: func.func @all_to_all(
// CHECK:         comm.all_to_all %x {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1} : (tensor<2x16xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    comm.all_to_all %u {axis = "tp", concat_dim = 1, mesh = @mesh, split_dim = 0} : (tensor<13x8xf32>) -> tensor<4x32xf32>
// CHECK-NEXT:    comm.all_to_all %u {axis = "tp", concat_dim = 1, mesh = @mesh, split_dim = 0} : (tensor<13x8xf32>) -> tensor<1x32xf32>
// CHECK-NEXT:    comm.all_to_all %x {axis = "tp", concat_dim = 1, mesh = @mesh, split_dim = 1} : tensor<2x16xf32>
func.func @all_to_all(%x: tensor<2x16xf32>, %u: tensor<13x8xf32>) -> tensor<8x4xf32> {
  %0 = comm.all_to_all %x {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1} : (tensor<2x16xf32>) -> tensor<8x4xf32>
  %1 = comm.all_to_all %u {axis = "tp", concat_dim = 1, mesh = @mesh, split_dim = 0} : (tensor<13x8xf32>) -> tensor<4x32xf32>
  %2 = comm.all_to_all %u {axis = "tp", concat_dim = 1, mesh = @mesh, split_dim = 0} : (tensor<13x8xf32>) -> tensor<1x32xf32>
  %3 = comm.all_to_all %x {axis = "tp", concat_dim = 1, mesh = @mesh, split_dim = 1} : tensor<2x16xf32>
  func.return %0 : tensor<8x4xf32>
}

// A mesh in an enclosing module is visible from a nested one.
// CHECK-LABEL: module @inner {
// CHECK:         comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
module @inner {
  func.func @mesh_from_enclosing_module(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
    func.return %0 : tensor<4xf32>
  }
}

// CHECK-LABEL: func.func @generic_forms(
// CHECK:         %[[G:.*]] = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<4x16xf32>) -> tensor<13x16xf32>
// CHECK-NEXT:    %[[S:.*]] = comm.all_slice %[[G]] {axis = "tp", dim = 0, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<1x16xf32>
// CHECK-NEXT:    %[[R:.*]] = comm.all_reduce %[[G]] {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<13x16xf32>
// CHECK-NEXT:    %[[RS:.*]] = comm.reduce_scatter %[[R]] {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<13x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[A2A:.*]] = comm.all_to_all %[[RS]] {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1} : (tensor<4x16xf32>) -> tensor<16x4xf32>
// CHECK-NEXT:    func.return %[[A2A]] : tensor<16x4xf32>
func.func @generic_forms(%x: tensor<4x16xf32>) -> tensor<16x4xf32> {
  %0 = "comm.all_gather"(%x) {axis = "tp", dim = 0, mesh = @mesh} : (tensor<4x16xf32>) -> tensor<13x16xf32>
  %1 = "comm.all_slice"(%0) {axis = "tp", dim = 0, mesh = @mesh} : (tensor<13x16xf32>) -> tensor<1x16xf32>
  %2 = "comm.all_reduce"(%0) {axes = ["tp"], mesh = @mesh, op = "sum"} : (tensor<13x16xf32>) -> tensor<13x16xf32>
  %3 = "comm.reduce_scatter"(%2) {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<13x16xf32>) -> tensor<4x16xf32>
  %4 = "comm.all_to_all"(%3) {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1} : (tensor<4x16xf32>) -> tensor<16x4xf32>
  func.return %4 : tensor<16x4xf32>
}

// Bucketed collectives: one collective for several tensors, each with its own dim;
// uneven pieces (13 over 4: 4, 4, 4, 1) are allowed per pair.
// CHECK-LABEL: func.func @buckets(
// CHECK:         %[[B:.*]]:2 = comm.all_gather_bucket %x, %u {axis = "tp", dims = [0, 1], mesh = @mesh} : (tensor<2x16xf32>, tensor<13x1xf32>) -> (tensor<8x16xf32>, tensor<13x4xf32>)
// CHECK-NEXT:    %[[S:.*]]:2 = comm.reduce_scatter_bucket %[[B]]#0, %[[B]]#1 {axis = "tp", dims = [0, 0], mesh = @mesh, op = "sum"} : (tensor<8x16xf32>, tensor<13x4xf32>) -> (tensor<2x16xf32>, tensor<4x4xf32>)
func.func @buckets(%x: tensor<2x16xf32>, %u: tensor<13x1xf32>) -> (tensor<2x16xf32>, tensor<4x4xf32>) {
  %b:2 = comm.all_gather_bucket %x, %u {axis = "tp", dims = [0, 1], mesh = @mesh} : (tensor<2x16xf32>, tensor<13x1xf32>) -> (tensor<8x16xf32>, tensor<13x4xf32>)
  %s:2 = "comm.reduce_scatter_bucket"(%b#0, %b#1) {axis = "tp", dims = [0, 0], mesh = @mesh, op = "sum"} : (tensor<8x16xf32>, tensor<13x4xf32>) -> (tensor<2x16xf32>, tensor<4x4xf32>)
  func.return %s#0, %s#1 : tensor<2x16xf32>, tensor<4x4xf32>
}

// Cross-group reduction of a heterogeneous plan (device groups @g0, @g1): per operand its union
// layout and global shape, the rank sets it all-reduces over, its place among the program's
// cross-group collectives.
shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
// CHECK-LABEL: func.func @split(
// CHECK: comm.split_all_reduce %w, %b {groups = {{\[\[}}0, 1, 2, 3, 4, 5], [0, 4], [1, 4], [2, 5], [3, 5]], op = "sum", seq = 2, shapes = {{\[\[}}8, 6], [6]], unions = [#shard.union<partial(sum), [#shard<@g0, [S(0)]>, #shard<@g1, [S(0)]>]>, #shard.union<partial(sum), [#shard<@g0, [R]>, #shard<@g1, [R]>]>]} : (tensor<2x6xf32>, tensor<6xf32>) -> (tensor<2x6xf32>, tensor<6xf32>)
func.func @split(%w: tensor<2x6xf32>, %b: tensor<6xf32>) -> (tensor<2x6xf32>, tensor<6xf32>) {
  %r:2 = comm.split_all_reduce %w, %b {groups = [[0, 1, 2, 3, 4, 5], [0, 4], [1, 4], [2, 5], [3, 5]], op = "sum", seq = 2, shapes = [[8, 6], [6]], unions = [#shard.union<partial(sum), [#shard<@g0, [S(0)]>, #shard<@g1, [S(0)]>]>, #shard.union<partial(sum), [#shard<@g0, [R]>, #shard<@g1, [R]>]>]} : (tensor<2x6xf32>, tensor<6xf32>) -> (tensor<2x6xf32>, tensor<6xf32>)
  func.return %r#0, %r#1 : tensor<2x6xf32>, tensor<6xf32>
}

// CHECK-LABEL: func.func @bsr(
// CHECK: comm.bsr %x {from = #shard.union<split(0, [4, 2]), [#shard<@g0, [R]>, #shard<@g1, [R]>]>, messages = {{\[\[}}0, 4], [1, 5], [4, 0], [4, 2], [5, 1], [5, 3]], seq = 0, shape = [6, 8], to = #shard.union<dup, [#shard<@g0, [R]>, #shard<@g1, [R]>]>} : (tensor<4x8xf32>) -> tensor<6x8xf32>
func.func @bsr(%x: tensor<4x8xf32>) -> tensor<6x8xf32> {
  %y = comm.bsr %x {from = #shard.union<split(0, [4, 2]), [#shard<@g0, [R]>, #shard<@g1, [R]>]>, messages = [[0, 4], [1, 5], [4, 0], [4, 2], [5, 1], [5, 3]], seq = 0, shape = [6, 8], to = #shard.union<dup, [#shard<@g0, [R]>, #shard<@g1, [R]>]>} : (tensor<4x8xf32>) -> tensor<6x8xf32>
  func.return %y : tensor<6x8xf32>
}

// A replicated bias made a partial sum over tp: kept at coordinate 0, zeros elsewhere (read at run time).
// CHECK-LABEL: func.func @keep_at_origin(
// CHECK:         comm.keep_at_origin %b {axes = ["tp"], mesh = @mesh} : tensor<8x16xf32>
func.func @keep_at_origin(%b: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = comm.keep_at_origin %b {axes = ["tp"], mesh = @mesh} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}
