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

// A bias added to one of two reduced branches joins the partial sum on the ranks at
// coordinate 0 of the reduced axes: one all_reduce instead of two. Which ranks those are is read
// at run time (comm.keep_at_origin), so every rank's program is the same.
// CHECK-LABEL: func.func @partial_bias_add_rank0
// CHECK: %[[K:.*]] = comm.keep_at_origin %b {axes = ["tp"], mesh = @mesh} : tensor<8x16xf32>
// CHECK: %[[AB:.*]] = tensor.add %a, %[[K]]
// CHECK: %[[S:.*]] = tensor.add %[[AB]], %c
// CHECK-NEXT: comm.all_reduce %[[S]]
// CHECK-NOT: comm.all_reduce
func.func @partial_bias_add_rank0(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> attributes {spmdc.rank = 0} {
  %0 = comm.all_reduce %a {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %1 = tensor.add %0, %b : tensor<8x16xf32>
  %2 = comm.all_reduce %c {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %3 = tensor.add %1, %2 : tensor<8x16xf32>
  func.return %3 : tensor<8x16xf32>
}

// Rank 1's program is rank 0's: the same ops, the bias kept at the origin at run time.
// CHECK-LABEL: func.func @partial_bias_add_rank1
// CHECK: %[[K:.*]] = comm.keep_at_origin %b {axes = ["tp"], mesh = @mesh}
// CHECK: %[[AB:.*]] = tensor.add %a, %[[K]]
// CHECK: %[[S:.*]] = tensor.add %[[AB]], %c
// CHECK-NEXT: comm.all_reduce %[[S]]
// CHECK-NOT: comm.all_reduce
func.func @partial_bias_add_rank1(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> attributes {spmdc.rank = 1} {
  %0 = comm.all_reduce %a {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %1 = tensor.add %0, %b : tensor<8x16xf32>
  %2 = comm.all_reduce %c {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %3 = tensor.add %1, %2 : tensor<8x16xf32>
  func.return %3 : tensor<8x16xf32>
}

// Without a second reduction to merge with, the bias add stays after the all_reduce.
// CHECK-LABEL: func.func @do_not_move_lone_bias_add
// CHECK: comm.all_reduce %a
// CHECK-NEXT: tensor.add
func.func @do_not_move_lone_bias_add(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> tensor<8x16xf32> attributes {spmdc.rank = 0} {
  %0 = comm.all_reduce %a {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
  %1 = tensor.add %0, %b : tensor<8x16xf32>
  func.return %1 : tensor<8x16xf32>
}

// A tied embedding's gradient: the head's and the lookup's partial gradients were each
// reduce-scattered and then added; one reduce-scatter of their sum does the same.
// CHECK-LABEL: func.func @tied_gradient_reduce_scatters
// CHECK:      %[[S:.*]] = tensor.add %a, %b : tensor<8x4xf32>
// CHECK-NEXT: %[[R:.*]] = comm.reduce_scatter %[[S]] {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: func.return %[[R]]
func.func @tied_gradient_reduce_scatters(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) -> tensor<4x4xf32> attributes {spmdc.rank = 0} {
  %0 = comm.reduce_scatter %a {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x4xf32>) -> tensor<4x4xf32>
  %1 = comm.reduce_scatter %b {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x4xf32>) -> tensor<4x4xf32>
  %2 = tensor.add %0, %1 : tensor<4x4xf32>
  func.return %2 : tensor<4x4xf32>
}
