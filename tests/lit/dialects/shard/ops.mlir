// RUN: %roundtrip %s | FileCheck %s
// RUN: %spmdc-opt %s --print-op-generic | %spmdc-opt | FileCheck %s

// CHECK:      shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
// CHECK-NEXT: shard.mesh @"my mesh" = <["x" = 4]>
// CHECK-NEXT: shard.mesh @line = <["a" = 3]>
// CHECK-NEXT: shard.mesh @single = <["d" = 1]>
shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
shard.mesh @"my mesh" = <["x" = 4]>
"shard.mesh"() {axes = ["a"], shape = [3], sym_name = "line"} : () -> ()
shard.mesh @single = <["d" = 1]>

// One placement per mesh axis: replicate, shard, partial.
// CHECK-LABEL: func.func @annotate_placements(
// CHECK:         %[[A:.*]] = shard.annotate %x {sharding = #shard<@mesh, [S(0), R]>} : tensor<13x16xf32>
// CHECK-NEXT:    %[[B:.*]] = shard.annotate %[[A]] {sharding = #shard<@mesh, [R, S(1)]>} : tensor<13x16xf32>
// CHECK-NEXT:    %[[C:.*]] = shard.annotate %[[B]] {sharding = #shard<@mesh, [P(sum), P(avg)]>} : tensor<13x16xf32>
// CHECK-NEXT:    %[[D:.*]] = shard.annotate %[[C]] {sharding = #shard<@mesh, [P(max), P(min)]>} : tensor<13x16xf32>
// CHECK-NEXT:    %[[E:.*]] = shard.annotate %[[D]] {sharding = #shard<@mesh, [R, R]>} : tensor<13x16xf32>
// CHECK-NEXT:    func.return %[[E]] : tensor<13x16xf32>
func.func @annotate_placements(%x: tensor<13x16xf32>) -> tensor<13x16xf32> {
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0), R]>} : tensor<13x16xf32>
  %1 = shard.annotate %0 {sharding = #shard<@mesh, [R, S(1)]>} : tensor<13x16xf32>
  %2 = shard.annotate %1 {sharding = #shard<@mesh, [P(sum), P(avg)]>} : tensor<13x16xf32>
  %3 = shard.annotate %2 {sharding = #shard<@mesh, [P(max), P(min)]>} : tensor<13x16xf32>
  %4 = shard.annotate %3 {sharding = #shard<@mesh, [R, R]>} : tensor<13x16xf32>
  func.return %4 : tensor<13x16xf32>
}

// Two S on the same tensor dim: shard by dp, then by tp.
// CHECK-LABEL: func.func @same_dim_sharded_twice(
// CHECK:         shard.annotate %x {sharding = #shard<@mesh, [S(0), S(0)]>} : tensor<16x4xf32>
func.func @same_dim_sharded_twice(%x: tensor<16x4xf32>) -> tensor<16x4xf32> {
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0), S(0)]>} : tensor<16x4xf32>
  func.return %0 : tensor<16x4xf32>
}

// Mesh names that are not bare identifiers are quoted in symbols and shardings.
// CHECK-LABEL: func.func @quoted_mesh_name(
// CHECK:         shard.annotate %x {sharding = #shard<@"my mesh", [S(0)]>} : tensor<8xf32>
func.func @quoted_mesh_name(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = shard.annotate %x {sharding = #shard<@"my mesh", [S(0)]>} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// A rank-0 tensor can be replicated or partial.
// CHECK-LABEL: func.func @rank0_value(
// CHECK:         shard.annotate %s {sharding = #shard<@mesh, [P(sum), R]>} : tensor<f32>
func.func @rank0_value(%s: tensor<f32>) -> tensor<f32> {
  %0 = shard.annotate %s {sharding = #shard<@mesh, [P(sum), R]>} : tensor<f32>
  func.return %0 : tensor<f32>
}

// CHECK-LABEL: func.func @redistribute(
// CHECK:         %[[G:.*]] = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [R, R]>} : tensor<13x16xf32>
// CHECK-NEXT:    %[[P:.*]] = shard.redistribute %[[G]] {from = #shard<@mesh, [P(sum), R]>, to = #shard<@mesh, [S(0), S(1)]>} : tensor<13x16xf32>
// CHECK-NEXT:    %[[S:.*]] = shard.redistribute %[[P]] {from = #shard<@line, [R]>, to = #shard<@line, [S(1)]>} : tensor<13x16xf32>
// CHECK-NEXT:    func.return %[[S]] : tensor<13x16xf32>
func.func @redistribute(%x: tensor<13x16xf32>) -> tensor<13x16xf32> {
  %0 = shard.redistribute %x {from = #shard<@mesh, [S(0), R]>, to = #shard<@mesh, [R, R]>} : tensor<13x16xf32>
  %1 = shard.redistribute %0 {to = #shard<@mesh, [S(0), S(1)]>, from = #shard<@mesh, [P(sum), R]>} : tensor<13x16xf32>
  %2 = shard.redistribute %1 {from = #shard<@line, [R]>, to = #shard<@line, [S(1)]>} : tensor<13x16xf32>
  func.return %2 : tensor<13x16xf32>
}

// After propagation every result carries shard.sharding (one entry per result),
// and arguments carry it as an argument attribute. (All operand and result types
// are equal, so the call prints a single type.)
// CHECK-LABEL: func.func @propagated_shardings(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> tensor<8x16xf32> {
// CHECK-NEXT:    %[[E:.*]] = tensor.exp %x {shard.sharding = [#shard<@mesh, [S(0), R]>]} : tensor<8x16xf32>
// CHECK-NEXT:    %[[C:.*]]:2 = func.call %[[E]] {callee = @two_results, shard.sharding = [#shard<@mesh, [R, R]>, #shard<@mesh, [S(0), P(sum)]>]} : tensor<8x16xf32>
// CHECK-NEXT:    func.return %[[C]]#1 : tensor<8x16xf32>
func.func @propagated_shardings(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> tensor<8x16xf32> {
  %0 = tensor.exp %x {shard.sharding = [#shard<@mesh, [S(0), R]>]} : tensor<8x16xf32>
  %1:2 = func.call %0 {callee = @two_results, shard.sharding = [#shard<@mesh, [R, R]>, #shard<@mesh, [S(0), P(sum)]>]} : (tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>)
  func.return %1#1 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @two_results(
// CHECK-SAME:    -> (tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R, R]>}, tensor<8x16xf32>)
func.func @two_results(%x: tensor<8x16xf32>) -> (tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R, R]>}, tensor<8x16xf32>) {
  func.return %x, %x : tensor<8x16xf32>, tensor<8x16xf32>
}

// CHECK-LABEL: func.func @generic_forms(
// CHECK:         %[[A:.*]] = shard.annotate %x {sharding = #shard<@single, [S(0)]>} : tensor<8xf32>
// CHECK-NEXT:    %[[R:.*]] = shard.redistribute %[[A]] {from = #shard<@single, [S(0)]>, to = #shard<@single, [R]>} : tensor<8xf32>
func.func @generic_forms(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "shard.annotate"(%x) {sharding = #shard<@single, [S(0)]>} : (tensor<8xf32>) -> tensor<8xf32>
  %1 = "shard.redistribute"(%0) {from = #shard<@single, [S(0)]>, to = #shard<@single, [R]>} : (tensor<8xf32>) -> tensor<8xf32>
  func.return %1 : tensor<8xf32>
}
