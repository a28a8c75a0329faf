// RUN: %spmdc-opt %s -p 'fuse-kernels{matmul-epilogue}' | FileCheck %s

// With matmul-epilogue: the matmul, its bias, GELU and the residual add are one region.
// CHECK-LABEL: func.func @matmul_epilogue
// CHECK: kernel.fused %a, %wt, %bias, %res {kind = "matmul"}
// CHECK: tensor.matmul
// CHECK: tensor.add
// CHECK: tensor.gelu
// CHECK: tensor.add
// CHECK: kernel.yield
func.func @matmul_epilogue(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>, %bias: tensor<32xf32>, %res: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %wt = tensor.permute %w {perm = [1, 0]} : (tensor<32x16xf32>) -> tensor<16x32xf32>
  %0 = tensor.matmul %a, %wt : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %1 = tensor.add %0, %bias : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %2 = tensor.gelu %1 {approximate = "tanh"} : tensor<8x32xf32>
  %3 = tensor.add %2, %res : tensor<8x32xf32>
  func.return %3 : tensor<8x32xf32>
}

// The matmul's operands are never computed inside its region (no prologue).
// CHECK-LABEL: func.func @do_not_fuse_matmul_prologue
// CHECK: kernel.fused %a {kind = "elementwise"}
// CHECK: tensor.exp
// CHECK: kernel.fused {{.*}} {kind = "matmul"}
// CHECK-NOT: tensor.exp
func.func @do_not_fuse_matmul_prologue(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %0 = tensor.exp %a : tensor<8x16xf32>
  %1 = tensor.matmul %0, %b : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  func.return %1 : tensor<8x4xf32>
}
