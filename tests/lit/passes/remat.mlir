// RUN: %spmdc-opt %s -p remat | FileCheck %s

module {
shard.mesh @mesh = <["dp" = 2]>


// GELU's output is read by the forward's next matmul and again by the backward's weight gradient
// (through a transpose made in the forward); its input %a is read by GELU's derivative after that.
// At the peak (%big, the 256x256 product) %g is alive unread: it is recomputed from %a right before
// its next read, with its transpose, and dies at the forward's matmul.
// CHECK-LABEL: func.func @gelu(
// CHECK:      %[[G:.*]] = tensor.gelu %a
// CHECK-NEXT: %[[T:.*]] = tensor.permute %[[G]]
// CHECK-NEXT: %y = tensor.matmul %[[G]], %w2
// CHECK-NEXT: %big = tensor.matmul
// CHECK-NEXT: %s = tensor.sum %big
// CHECK-NEXT: %[[G2:.*]] = tensor.gelu %a
// CHECK-NEXT: %[[T2:.*]] = tensor.permute %[[G2]]
// CHECK-NEXT: %dw = tensor.matmul %[[T2]], %dy
// CHECK-NEXT: %d = tensor.mul %a, %dy2
func.func @gelu(%a: tensor<16x64xf32>, %w2: tensor<64x16xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>,
                %dy: tensor<16x16xf32>, %dy2: tensor<16x64xf32>)
    -> (tensor<16x16xf32>, tensor<f32>, tensor<64x16xf32>, tensor<16x64xf32>) {
  %g = tensor.gelu %a : tensor<16x64xf32>
  %gt = tensor.permute %g {perm = [1, 0]} : (tensor<16x64xf32>) -> tensor<64x16xf32>
  %y = tensor.matmul %g, %w2 : (tensor<16x64xf32>, tensor<64x16xf32>) -> tensor<16x16xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %dw = tensor.matmul %gt, %dy : (tensor<64x16xf32>, tensor<16x16xf32>) -> tensor<64x16xf32>
  %d = tensor.mul %a, %dy2 : tensor<16x64xf32>
  func.return %y, %s, %dw, %d : tensor<16x16xf32>, tensor<f32>, tensor<64x16xf32>, tensor<16x64xf32>
}

// A scalar constant operand is cloned with the op (%c dies at the first mul otherwise).
// CHECK-LABEL: func.func @with_constant(
// CHECK:      %big = tensor.matmul
// CHECK-NEXT: %s = tensor.sum %big
// CHECK-NEXT: %[[C:.*]] = tensor.constant {value = dense<0.5> : tensor<f32>}
// CHECK-NEXT: %[[M:.*]] = tensor.mul %a, %[[C]]
// CHECK-NEXT: %r = tensor.add %[[M]], %a
func.func @with_constant(%a: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>)
    -> (tensor<64x64xf32>, tensor<f32>, tensor<64x64xf32>) {
  %c = tensor.constant {value = dense<0.5> : tensor<f32>} : tensor<f32>
  %m = tensor.mul %a, %c : (tensor<64x64xf32>, tensor<f32>) -> tensor<64x64xf32>
  %e = tensor.exp %m : tensor<64x64xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %r = tensor.add %m, %a : tensor<64x64xf32>
  func.return %e, %s, %r : tensor<64x64xf32>, tensor<f32>, tensor<64x64xf32>
}

// Left alone: an op whose operand is not alive at the later read (%b dies at %g: keeping it
// alive would cost what recomputing saves), a matmul (not elementwise), a value returned, and an op
// reading a collective's result (an all-reduce may have reduced its buffer in place).
// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-1: tensor.tanh
// CHECK-NOT: tensor.tanh
// CHECK-LABEL: func.func @kept_comm(
// CHECK-COUNT-1: tensor.neg
// CHECK-NOT: tensor.neg
func.func @kept(%x: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>)
    -> (tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %b = tensor.exp %x : tensor<64x64xf32>
  %g = tensor.tanh %b : tensor<64x64xf32>
  %h = tensor.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %n = tensor.neg %x : tensor<64x64xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %u = tensor.add %g, %h : tensor<64x64xf32>
  func.return %s, %u, %h, %n : tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
}
func.func @kept_comm(%x: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>)
    -> (tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %r = comm.all_reduce %x {axes = ["dp"], mesh = @mesh, op = "sum"} : tensor<64x64xf32>
  %n = tensor.neg %r : tensor<64x64xf32>
  %e = tensor.exp %n : tensor<64x64xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %u = tensor.add %n, %r : tensor<64x64xf32>
  func.return %s, %u, %e : tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>
}
}
