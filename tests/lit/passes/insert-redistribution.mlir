// RUN: %spmdc-opt %s -p 'sharding-propagation,insert-redistribution' | FileCheck %s

shard.mesh @mesh = <["tp" = 2]>

// The row-parallel matmul's Partial result must be replicated for the function result.
// CHECK-LABEL: func.func @partial_to_annotated_result
// CHECK: %[[Y:.*]] = tensor.matmul %a, %w2
// CHECK-NEXT: %[[R:.*]] = shard.redistribute %[[Y]] {from = #shard<@mesh, [P(sum)]>
// CHECK-SAME: to = #shard<@mesh, [R]>
// CHECK-NEXT: func.return %[[R]]
func.func @partial_to_annotated_result(%a: tensor<8x32xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
                                       %w2: tensor<32x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>})
    -> (tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R]>}) {
  %y = tensor.matmul %a, %w2 : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}

// A value redistributed once serves every user that needs the same layout.
// CHECK-LABEL: func.func @one_redistribute_per_value_and_layout
// CHECK-COUNT-1: shard.redistribute %x
// CHECK-NOT: shard.redistribute
func.func @one_redistribute_per_value_and_layout(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>})
    -> (tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R]>}, tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R]>}) {
  %0 = shard.annotate %x {sharding = #shard<@mesh, [R]>} : tensor<8x16xf32>
  %1 = tensor.exp %0 : tensor<8x16xf32>
  %2 = tensor.neg %0 : tensor<8x16xf32>
  func.return %1, %2 : tensor<8x16xf32>, tensor<8x16xf32>
}

// An annotation asking for another layout gets its operand redistributed.
// CHECK-LABEL: func.func @gather_for_annotation
// CHECK: %[[G:.*]] = shard.redistribute %x {from = #shard<@mesh, [S(1)]>
// CHECK-SAME: to = #shard<@mesh, [R]>
// CHECK: shard.annotate %[[G]]
func.func @gather_for_annotation(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(1)]>}) -> tensor<8x16xf32> {
  %0 = shard.annotate %x {sharding = #shard<@mesh, [R]>} : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @do_not_redistribute_matching_layouts
// CHECK-NOT: shard.redistribute
// CHECK: func.return
func.func @do_not_redistribute_matching_layouts(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>})
    -> (tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) {
  %0 = tensor.relu %x : tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}
