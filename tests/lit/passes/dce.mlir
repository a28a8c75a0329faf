// RUN: %spmdc-opt %s -p dce | FileCheck %s

// Meshes and functions are not values: dce keeps them.
// CHECK: shard.mesh @mesh = <["tp" = 2]>
shard.mesh @mesh = <["tp" = 2]>

// CHECK-LABEL: func.func @dce_unused_pure_op(
// CHECK-NEXT:    func.return %x : tensor<4xf32>
func.func @dce_unused_pure_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.exp %x : tensor<4xf32>
  func.return %x : tensor<4xf32>
}

// A chain dies in one sweep, bottom-up.
// CHECK-LABEL: func.func @dce_dead_chain(
// CHECK-NEXT:    func.return
func.func @dce_dead_chain(%x: tensor<4x4xf32>) {
  %0 = tensor.constant {value = dense<1.0> : tensor<4x4xf32>} : tensor<4x4xf32>
  %1 = tensor.matmul %x, %0 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = tensor.relu %1 : tensor<4x4xf32>
  %3 = tensor.sum %2 {dims = [0, 1]} : (tensor<4x4xf32>) -> tensor<f32>
  %4 = shard.annotate %x {sharding = #shard<@mesh, [S(0)]>} : tensor<4x4xf32>
  func.return
}

// CHECK-LABEL: func.func @do_not_dce_used_values(
// CHECK-NEXT:    %[[E:.*]] = tensor.exp %x : tensor<4xf32>
// CHECK-NEXT:    %[[N:.*]] = tensor.neg %[[E]] : tensor<4xf32>
// CHECK-NEXT:    func.return %[[N]] : tensor<4xf32>
func.func @do_not_dce_used_values(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.exp %x : tensor<4xf32>
  %1 = tensor.neg %0 : tensor<4xf32>
  func.return %1 : tensor<4xf32>
}

// The terminator of a function without results has no uses, and stays.
// CHECK-LABEL: func.func @do_not_dce_func_return(
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @do_not_dce_func_return() {
  func.return
}

// Collectives and calls may have effects: kept even when unused.
// CHECK-LABEL: func.func @do_not_dce_side_effecting_ops(
// CHECK-NEXT:    comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
// CHECK-NEXT:    comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<4xf32>) -> tensor<8xf32>
// CHECK-NEXT:    func.call %x {callee = @dce_unused_pure_op} : tensor<4xf32>
// CHECK-NEXT:    func.return
func.func @do_not_dce_side_effecting_ops(%x: tensor<4xf32>) {
  %0 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
  %1 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<4xf32>) -> tensor<8xf32>
  %2 = func.call %x {callee = @dce_unused_pure_op} : tensor<4xf32>
  func.return
}

// all_slice moves no data: it is pure, so an unused one goes.
// CHECK-LABEL: func.func @dce_unused_all_slice(
// CHECK-NEXT:    func.return
func.func @dce_unused_all_slice(%x: tensor<8xf32>) {
  %0 = comm.all_slice %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<8xf32>) -> tensor<4xf32>
  func.return
}

// CHECK-LABEL: func.func @dce_inside_fused_region(
// CHECK-NEXT:    %[[F:.*]] = kernel.fused %x : tensor<4xf32> {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<4xf32>):
// CHECK-NEXT:      %[[N:.*]] = tensor.neg %[[A]] : tensor<4xf32>
// CHECK-NEXT:      kernel.yield %[[N]] : tensor<4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : tensor<4xf32>
func.func @dce_inside_fused_region(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %x : tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %dead = tensor.exp %a : tensor<4xf32>
    %n = tensor.neg %a : tensor<4xf32>
    kernel.yield %n : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @dce_unused_fused_op(
// CHECK-NEXT:    func.return %x : tensor<4xf32>
func.func @dce_unused_fused_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %x : tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %n = tensor.neg %a : tensor<4xf32>
    kernel.yield %n : tensor<4xf32>
  }
  func.return %x : tensor<4xf32>
}

// One used result keeps a multi-result op alive.
// CHECK-LABEL: func.func @do_not_dce_partly_used_multi_result_op(
// CHECK-NEXT:    %[[M:.*]]:2 = kernel.fused %x :
// CHECK:         func.return %[[M]]#1 : tensor<4xf32>
func.func @do_not_dce_partly_used_multi_result_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  %m:2 = kernel.fused %x : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %n = tensor.neg %a : tensor<4xf32>
    kernel.yield %a, %n : tensor<4xf32>, tensor<4xf32>
  }
  func.return %m#1 : tensor<4xf32>
}
