// RUN: %spmdc-opt %s -p fuse-kernels | FileCheck %s

shard.mesh @mesh = <["tp" = 2]>

// A bias add and an activation: one elementwise region, the splat constant cloned in.
// CHECK-LABEL: func.func @elementwise_chain
// CHECK: %[[R:.*]] = kernel.fused %x, %b {kind = "elementwise"}
// CHECK: tensor.add
// CHECK: tensor.constant
// CHECK: tensor.maximum
// CHECK: tensor.tanh
// CHECK: kernel.yield
// CHECK: func.return %[[R]]
func.func @elementwise_chain(%x: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<8x16xf32> {
  %0 = tensor.add %x, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %c = tensor.constant {value = dense<0.0> : tensor<f32>} : tensor<f32>
  %1 = tensor.maximum %0, %c : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
  %2 = tensor.tanh %1 : tensor<8x16xf32>
  func.return %2 : tensor<8x16xf32>
}

// Softmax with its scale and mask: one reduction region ending in the softmax.
// CHECK-LABEL: func.func @softmax_with_prologue
// CHECK: kernel.fused %s, %m {kind = "reduction"}
// CHECK: tensor.mul
// CHECK: tensor.select
// CHECK: tensor.softmax
// CHECK-NEXT: kernel.yield
// CHECK-NOT: kernel.fused
func.func @softmax_with_prologue(%s: tensor<2x8x8xf32>, %m: tensor<8x8xi1>) -> tensor<2x8x8xf32> {
  %c = tensor.constant {value = dense<0.125> : tensor<f32>} : tensor<f32>
  %0 = tensor.mul %s, %c : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32>
  %ninf = tensor.constant {value = dense<-inf> : tensor<f32>} : tensor<f32>
  %1 = tensor.select %m, %0, %ninf : (tensor<8x8xi1>, tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32>
  %2 = tensor.softmax %1 {dim = 2} : tensor<2x8x8xf32>
  func.return %2 : tensor<2x8x8xf32>
}

// RMSNorm: square + mean is one reduction region; the normalisation (with the smaller
// rsqrt computed inside it) a second, elementwise one.
// CHECK-LABEL: func.func @rms_norm
// CHECK: %[[MS:.*]] = kernel.fused %x {kind = "reduction"}
// CHECK: tensor.mul
// CHECK: tensor.mean
// CHECK: kernel.fused %[[MS]], %x, %w {kind = "elementwise"}
// CHECK: tensor.rsqrt
// CHECK-COUNT-2: tensor.mul
func.func @rms_norm(%x: tensor<4x32xf32>, %w: tensor<32xf32>) -> tensor<4x32xf32> {
  %0 = tensor.mul %x, %x : tensor<4x32xf32>
  %1 = tensor.mean %0 {dims = [1], keepdim = true} : (tensor<4x32xf32>) -> tensor<4x1xf32>
  %eps = tensor.constant {value = dense<1.0e-06> : tensor<f32>} : tensor<f32>
  %2 = tensor.add %1, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %3 = tensor.rsqrt %2 : tensor<4x1xf32>
  %4 = tensor.mul %x, %3 : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
  %5 = tensor.mul %4, %w : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  func.return %5 : tensor<4x32xf32>
}

// A value also used outside becomes a second result of the region (computed once).
// CHECK-LABEL: func.func @shared_producer_becomes_output
// CHECK: %[[F:.*]]:2 = kernel.fused %x
// CHECK: func.return %[[F]]#1, %[[F]]#0
func.func @shared_producer_becomes_output(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = tensor.exp %x : tensor<8xf32>
  %1 = tensor.neg %0 : tensor<8xf32>
  func.return %1, %0 : tensor<8xf32>, tensor<8xf32>
}

// Nothing after a reduction: the ops that use the row sums form their own region.
// CHECK-LABEL: func.func @do_not_fuse_after_reduction
// CHECK: kernel.fused %x {kind = "reduction"}
// CHECK: tensor.sum
// CHECK: kernel.fused {{.*}} {kind = "elementwise"}
func.func @do_not_fuse_after_reduction(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %0 = tensor.sum %x {dims = [1], keepdim = true} : (tensor<4x32xf32>) -> tensor<4x1xf32>
  %1 = tensor.div %x, %0 : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
  func.return %1 : tensor<4x32xf32>
}

// Never across a collective: the add before and the exp after stay in separate regions.
// CHECK-LABEL: func.func @do_not_fuse_across_comm
// CHECK: kernel.fused %x, %y
// CHECK: comm.all_reduce
// CHECK: kernel.fused
// CHECK: tensor.exp
func.func @do_not_fuse_across_comm(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> attributes {spmdc.rank = 0} {
  %0 = tensor.add %x, %y : tensor<8xf32>
  %1 = comm.all_reduce %0 {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8xf32>
  %2 = tensor.exp %1 : tensor<8xf32>
  func.return %2 : tensor<8xf32>
}

// A small value used outside cannot be a region output of a larger iteration space:
// the broadcast consumer starts its own region rather than recompute the rsqrt.
// CHECK-LABEL: func.func @do_not_duplicate_shared_smaller_value
// CHECK: %[[R:.*]] = kernel.fused %v {kind = "elementwise"}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: tensor.rsqrt
// CHECK-NEXT: kernel.yield
// CHECK: kernel.fused %x, %[[R]]
// CHECK: func.return {{.*}}, %[[R]]
func.func @do_not_duplicate_shared_smaller_value(%x: tensor<4x32xf32>, %v: tensor<4x1xf32>) -> (tensor<4x32xf32>, tensor<4x1xf32>) {
  %0 = tensor.rsqrt %v : tensor<4x1xf32>
  %1 = tensor.mul %x, %0 : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
  func.return %1, %0 : tensor<4x32xf32>, tensor<4x1xf32>
}

// Matmuls, reductions over other dims and views stay aten calls (matmul-epilogue is off).
// CHECK-LABEL: func.func @do_not_fuse_matmul_or_column_sums
// CHECK: tensor.matmul %a, %b
// CHECK-NEXT: tensor.sum {{.*}}dims = [0]
// CHECK-NEXT: tensor.permute
// CHECK-NOT: kernel.fused
func.func @do_not_fuse_matmul_or_column_sums(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> (tensor<16xf32>, tensor<16x4xf32>) {
  %0 = tensor.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = tensor.sum %0 {dims = [0], keepdim = false} : (tensor<4x16xf32>) -> tensor<16xf32>
  %2 = tensor.permute %0 {perm = [1, 0]} : (tensor<4x16xf32>) -> tensor<16x4xf32>
  func.return %1, %2 : tensor<16xf32>, tensor<16x4xf32>
}
