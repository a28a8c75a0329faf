// RUN: %spmdc-opt %s -p 'suspend-for-backward{first=1 count=1}' | FileCheck %s
// RUN: %spmdc-opt %s -p 'suspend-for-backward{first=1 count=1}' | %spmdc-opt - | FileCheck %s

// cm(x)'s vjp program on one rank of dp=2 (fsdp): %g is the output's gradient (input #1).
// The forward half ends right before the first op that reads %g; the output %y is handed back
// (result #1); the backward's re-gather of %w, scheduled early into the forward, and the
// backward's constant move after the suspension, so nothing is in flight while paused.
// CHECK-LABEL: func.func @main
// CHECK:      %[[A:.*]] = comm.all_gather %w
// CHECK-NEXT: %[[Y:.*]] = tensor.matmul %x, %[[A]]
// CHECK-NEXT: %[[E:.*]] = tensor.exp %[[Y]]
// CHECK-NEXT: %[[G:.*]] = func.suspend %[[E]] {results = [1]} : tensor<4x8xf32>
// CHECK-NEXT: %[[H:.*]] = comm.all_gather_start %w
// CHECK-NEXT: %[[C:.*]] = tensor.constant
// CHECK-NEXT: tensor.mul %[[Y]], %[[G]]
// CHECK:      func.return
shard.mesh @mesh = <["dp" = 2]>
func.func @main(%w: tensor<4x8xf32> {spmdc.param = "fc.w"}, %x: tensor<4x8xf32>, %g: tensor<4x8xf32>)
    -> (tensor<f32> {spmdc.loss}, tensor<4x8xf32>, tensor<4x8xf32> {spmdc.grad_of = "fc.w"}) attributes {spmdc.rank = 0} {
  %a = comm.all_gather %w {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  %h = comm.all_gather_start %w {axis = "dp", dim = 0, mesh = @mesh} : (tensor<4x8xf32>) -> !comm.handle<tensor<8x8xf32>>
  %y = tensor.matmul %x, %a : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %c = tensor.constant {value = dense<1.0> : tensor<f32>} : tensor<f32>
  %m = tensor.mul %y, %g : tensor<4x8xf32>
  %l = tensor.sum %m {dims = [0, 1], keepdim = false} : (tensor<4x8xf32>) -> tensor<f32>
  %e = tensor.exp %y : tensor<4x8xf32>
  %gc = tensor.mul %g, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %b = comm.wait %h : (!comm.handle<tensor<8x8xf32>>) -> tensor<8x8xf32>
  %t = tensor.permute %gc {perm = [1, 0]} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %dw8 = tensor.matmul %t, %x : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %dw2 = tensor.add %dw8, %b : tensor<8x8xf32>
  %dw = comm.reduce_scatter %dw2 {axis = "dp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %l, %e, %dw : tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>
}
