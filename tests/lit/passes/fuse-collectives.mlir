// RUN: %spmdc-opt %s -p fuse-collectives | FileCheck %s

shard.mesh @mesh = <["tp" = 2]>

// Two Partial branches added: one all_reduce of the sum instead of two.
// CHECK-LABEL: func.func @defer_all_reduce
// CHECK: %[[S:.*]] = tensor.add %a, %b
// CHECK-NEXT: comm.all_reduce %[[S]]
// CHECK-NOT: comm.all_reduce
func.func @defer_all_reduce(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> tensor<8x16xf32> attributes {spmdc.rank = 0} {
  %0 = comm.all_reduce %a {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %1 = comm.all_reduce %b {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %2 = tensor.add %0, %1 : tensor<8x16xf32>
  func.return %2 : tensor<8x16xf32>
}

// all_reduce then all_slice on the same axis is a reduce_scatter.
// CHECK-LABEL: func.func @all_reduce_slice_to_reduce_scatter
// CHECK: comm.reduce_scatter %a {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NOT: comm.all_reduce
func.func @all_reduce_slice_to_reduce_scatter(%a: tensor<8x16xf32>) -> tensor<4x16xf32> attributes {spmdc.rank = 0} {
  %0 = comm.all_reduce %a {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %1 = comm.all_slice %0 {axis = "tp", dim = 0, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<4x16xf32>
  func.return %1 : tensor<4x16xf32>
}

// A reduced value used elsewhere too must stay reduced: no fusion.
// CHECK-LABEL: func.func @do_not_defer_shared_all_reduce
// CHECK-COUNT-2: comm.all_reduce
func.func @do_not_defer_shared_all_reduce(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) attributes {spmdc.rank = 0} {
  %0 = comm.all_reduce %a {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %1 = comm.all_reduce %b {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %2 = tensor.add %0, %1 : tensor<8x16xf32>
  func.return %2, %0 : tensor<8x16xf32>, tensor<8x16xf32>
}

// Different reductions (max) do not commute with add.
// CHECK-LABEL: func.func @do_not_defer_max
// CHECK-COUNT-2: comm.all_reduce
func.func @do_not_defer_max(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> tensor<8x16xf32> attributes {spmdc.rank = 0} {
  %0 = comm.all_reduce %a {axes = ["tp"], mesh = @mesh, op = "max"} : tensor<8x16xf32>
  %1 = comm.all_reduce %b {axes = ["tp"], mesh = @mesh, op = "max"} : tensor<8x16xf32>
  %2 = tensor.add %0, %1 : tensor<8x16xf32>
  func.return %2 : tensor<8x16xf32>
}
