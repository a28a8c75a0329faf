// RUN: %spmdc-opt %s -p remat | FileCheck %s

module {
shard.mesh @mesh = <["dp" = 2]>


// GELU's output is read by the forward's next matmul and again by the backward's weight gradient
// (through a transpose made in the forward); its input %a is read by GELU's derivative after that.
// At the peak (%big, the 256x256 product) %g is alive unread: it is recomputed from %a right before
// its next read, with its transpose, and dies at the forward's matmul; the forward's transpose, read
// by nothing any more, is erased.
// CHECK-LABEL: func.func @gelu(
// CHECK:      %[[G:.*]] = tensor.gelu %a
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

// Left alone: an op whose operand is not alive at the later read (%b dies at %g, and is a matmul's:
// keeping it alive would cost what recomputing saves), a matmul (not elementwise), a value returned, and an op
// reading a collective's result (an all-reduce may have reduced its buffer in place).
// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-1: tensor.tanh
// CHECK-NOT: tensor.tanh
// CHECK-LABEL: func.func @kept_comm(
// CHECK-COUNT-1: tensor.neg
// CHECK-NOT: tensor.neg
func.func @kept(%x: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>)
    -> (tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %b = tensor.matmul %x, %x : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
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

// Mixed precision: a parameter's bfloat16 cast is gathered in the forward and again in the backward.
// Alive unread at the peak, it is recomputed from the parameter (an argument: the caller holds it)
// right before the backward's gather.
// CHECK-LABEL: func.func @param_cast(
// CHECK:      %[[C:.*]] = tensor.cast %w
// CHECK-NEXT: %g = comm.all_gather %[[C]]
// CHECK:      %s = tensor.sum %big
// CHECK-NEXT: %[[C2:.*]] = tensor.cast %w
// CHECK-NEXT: %g2 = comm.all_gather %[[C2]]
func.func @param_cast(%w: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>)
    -> (tensor<128x64xbf16>, tensor<f32>, tensor<128x64xbf16>) {
  %c = tensor.cast %w : (tensor<64x64xf32>) -> tensor<64x64xbf16>
  %g = comm.all_gather %c {axis = "dp", dim = 0, mesh = @mesh} : (tensor<64x64xbf16>) -> tensor<128x64xbf16>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %g2 = comm.all_gather %c {axis = "dp", dim = 0, mesh = @mesh} : (tensor<64x64xbf16>) -> tensor<128x64xbf16>
  func.return %g, %s, %g2 : tensor<128x64xbf16>, tensor<f32>, tensor<128x64xbf16>
}

// RMSNorm's float32 cast of a bfloat16 activation %x, read again by the backward: %x dies at the
// cast; keeping it alive (8 KiB) would cost half of what the cast holds (16 KiB), and recomputing %x
// too, an elementwise op of the argument %a, costs nothing kept: the chain is recomputed from %a before
// the backward's read. A cast to a smaller type of a matmul's result is kept: its operand costs more
// than it does.
// CHECK-LABEL: func.func @widening_cast(
// CHECK:      %h = tensor.cast %x
// CHECK:      %s = tensor.sum %big
// CHECK-NEXT: %[[X:.*]] = tensor.neg %a
// CHECK-NEXT: %[[H:.*]] = tensor.cast %[[X]]
// CHECK-NEXT: %d = tensor.mul %dy, %[[H]]
// CHECK-LABEL: func.func @narrowing_cast(
// CHECK-COUNT-1: tensor.cast
// CHECK-NOT: tensor.cast
func.func @widening_cast(%a: tensor<64x64xbf16>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>,
                         %dy: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<f32>, tensor<64x64xf32>) {
  %x = tensor.neg %a : tensor<64x64xbf16>
  %h = tensor.cast %x : (tensor<64x64xbf16>) -> tensor<64x64xf32>
  %e = tensor.exp %h : tensor<64x64xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %d = tensor.mul %dy, %h : tensor<64x64xf32>
  func.return %e, %s, %d : tensor<64x64xf32>, tensor<f32>, tensor<64x64xf32>
}
func.func @narrowing_cast(%a: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>,
                          %dy: tensor<64x64xbf16>) -> (tensor<64x64xbf16>, tensor<f32>, tensor<64x64xbf16>) {
  %x = tensor.matmul %a, %a : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %h = tensor.cast %x : (tensor<64x64xf32>) -> tensor<64x64xbf16>
  %e = tensor.exp %h : tensor<64x64xbf16>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %d = tensor.mul %dy, %h : tensor<64x64xbf16>
  func.return %e, %s, %d : tensor<64x64xbf16>, tensor<f32>, tensor<64x64xbf16>
}

// SiLU's output %m = %x * sigmoid(%x), read again by the backward (the gradient of the product with
// the up projection), while %x is read there anyway (SiLU's derivative): both ops of the chain are
// recomputed from %x, their intermediate %s (the sigmoid) alive only there.
// CHECK-LABEL: func.func @silu_chain(
// CHECK:      %s = tensor.sum %big
// CHECK-NEXT: %[[S:.*]] = tensor.sigmoid %x
// CHECK-NEXT: %[[M:.*]] = tensor.mul %x, %[[S]]
// CHECK-NEXT: %gu = tensor.mul %dy, %[[M]]
// CHECK-NEXT: %gx = tensor.mul %dy, %x
func.func @silu_chain(%x: tensor<64x64xf32>, %u: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>,
                      %dy: tensor<64x64xf32>)
    -> (tensor<64x64xf32>, tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %sg = tensor.sigmoid %x : tensor<64x64xf32>
  %m = tensor.mul %x, %sg : tensor<64x64xf32>
  %h = tensor.mul %m, %u : tensor<64x64xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %gu = tensor.mul %dy, %m : tensor<64x64xf32>
  %gx = tensor.mul %dy, %x : tensor<64x64xf32>
  func.return %h, %s, %gu, %gx : tensor<64x64xf32>, tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>
}

// A normalization's output %o = %xh * %w, %w a parameter gathered in the forward (and dead after
// it), read again by the backward's weight gradient. The backward gathers the same parameter again
// (%w2, for the normalization's own gradient): %o is recomputed there from %xh (alive anyway) and
// %w2, and dies in the forward. Gathers of another parameter are not the same value: %p's output
// (%q = %xh * %v, %v gathered from %b, the backward's gather from %c) is kept.
// CHECK-LABEL: func.func @regathered(
// CHECK:      %w = comm.all_gather %a
// CHECK:      %r = tensor.mul %xh, %v
// CHECK:      %s = tensor.sum %big
// CHECK-NEXT: %w2 = comm.all_gather %a
// CHECK-NEXT: %[[O:.*]] = tensor.mul %xh, %w2
// CHECK-NEXT: %dw = tensor.matmul %dy, %[[O]]
// CHECK-NOT:  tensor.mul %xh, %v
// CHECK:      %dv = tensor.matmul %dy, %r
func.func @regathered(%a: tensor<32x64xf32>, %b: tensor<32x64xf32>, %c: tensor<32x64xf32>, %xh: tensor<64x64xf32>,
                      %p: tensor<256x8xf32>, %q: tensor<8x256xf32>, %dy: tensor<64x64xf32>)
    -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>,
        tensor<64x64xf32>) {
  %w = comm.all_gather %a {axis = "dp", dim = 0, mesh = @mesh} : (tensor<32x64xf32>) -> tensor<64x64xf32>
  %o = tensor.mul %xh, %w : tensor<64x64xf32>
  %y = tensor.exp %o : tensor<64x64xf32>
  %v = comm.all_gather %b {axis = "dp", dim = 0, mesh = @mesh} : (tensor<32x64xf32>) -> tensor<64x64xf32>
  %r = tensor.mul %xh, %v : tensor<64x64xf32>
  %z = tensor.exp %r : tensor<64x64xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %w2 = comm.all_gather %a {axis = "dp", dim = 0, mesh = @mesh} : (tensor<32x64xf32>) -> tensor<64x64xf32>
  %dw = tensor.matmul %dy, %o : tensor<64x64xf32>
  %dx = tensor.mul %dy, %w2 : tensor<64x64xf32>
  %v2 = comm.all_gather %c {axis = "dp", dim = 0, mesh = @mesh} : (tensor<32x64xf32>) -> tensor<64x64xf32>
  %dv = tensor.matmul %dy, %r : tensor<64x64xf32>
  %du = tensor.mul %dy, %v2 : tensor<64x64xf32>
  func.return %y, %z, %s, %dw, %dx, %dv, %du : tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>, tensor<64x64xf32>,
      tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
}

// A value read only after the peak moves there whole: the forward's op, read by nothing any more, is
// erased (a fused Triton kernel of dead ops would have no result).
// CHECK-LABEL: func.func @moved(
// CHECK-NOT:  tensor.exp
// CHECK:      %s = tensor.sum %big
// CHECK-NEXT: %[[E:.*]] = tensor.exp %x
// CHECK-NEXT: %r = tensor.add %[[E]], %x
// CHECK-NOT:  tensor.exp
func.func @moved(%x: tensor<64x64xf32>, %p: tensor<256x8xf32>, %q: tensor<8x256xf32>)
    -> (tensor<f32>, tensor<64x64xf32>) {
  %e = tensor.exp %x : tensor<64x64xf32>
  %big = tensor.matmul %p, %q : (tensor<256x8xf32>, tensor<8x256xf32>) -> tensor<256x256xf32>
  %s = tensor.sum %big {dims = [0, 1], keepdim = false} : (tensor<256x256xf32>) -> tensor<f32>
  %r = tensor.add %e, %x : tensor<64x64xf32>
  func.return %s, %r : tensor<f32>, tensor<64x64xf32>
}
}
