// RUN: %spmdc-opt %s -p 'fuse-bias-add' | FileCheck %s
// RUN: not %spmdc-opt %s -p 'fuse-bias-add{dtype=bf16}' 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: spmdc-opt: error: pass 'fuse-bias-add' has no option 'dtype' (options: none)

// A bf16 linear layer's product and bias add (the capture's decomposed addmm) become one
// tensor.linear: torch.addmm, the bias added before the one rounding to bf16.
// CHECK-LABEL: func.func @linear_bf16
// CHECK-NEXT:  %y = tensor.linear %x, %w, %b : (tensor<16x32xbf16>, tensor<32x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
// CHECK-NEXT:  func.return %y
func.func @linear_bf16(%x: tensor<16x32xbf16>, %w: tensor<32x64xbf16>, %b: tensor<64xbf16>) -> tensor<16x64xbf16> {
  %mm = tensor.matmul %x, %w : (tensor<16x32xbf16>, tensor<32x64xbf16>) -> tensor<16x64xbf16> loc("fc/aten.mm")
  %y = tensor.add %mm, %b : (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16> loc("fc/aten.add.Tensor")
  func.return %y : tensor<16x64xbf16>
}

// The bias first, fp16: the same.
// CHECK-LABEL: func.func @bias_first_f16
// CHECK-NEXT:  tensor.linear %x, %w, %b
func.func @bias_first_f16(%x: tensor<16x32xf16>, %w: tensor<32x64xf16>, %b: tensor<64xf16>) -> tensor<16x64xf16> {
  %mm = tensor.matmul %x, %w : (tensor<16x32xf16>, tensor<32x64xf16>) -> tensor<16x64xf16>
  %y = tensor.add %b, %mm : (tensor<64xf16>, tensor<16x64xf16>) -> tensor<16x64xf16>
  func.return %y : tensor<16x64xf16>
}

// Left alone: float32 (one rounding more of float32 changes nothing eager would see); a product
// used again (the add is not its only use); a matrix added, not a bias vector; a batched product.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:   tensor.linear
// CHECK:       func.return
func.func @left_alone(%x: tensor<16x32xf32>, %w: tensor<32x64xf32>, %b: tensor<64xf32>,
                      %xh: tensor<16x32xbf16>, %wh: tensor<32x64xbf16>, %bh: tensor<64xbf16>,
                      %m: tensor<16x64xbf16>, %q: tensor<2x16x32xbf16>, %k: tensor<2x32x64xbf16>)
    -> (tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<2x16x64xbf16>) {
  %mm = tensor.matmul %x, %w : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  %y = tensor.add %mm, %b : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %mh = tensor.matmul %xh, %wh : (tensor<16x32xbf16>, tensor<32x64xbf16>) -> tensor<16x64xbf16>
  %yh = tensor.add %mh, %bh : (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
  %m2 = tensor.matmul %xh, %wh : (tensor<16x32xbf16>, tensor<32x64xbf16>) -> tensor<16x64xbf16>
  %ym = tensor.add %m2, %m : tensor<16x64xbf16>
  %bm = tensor.matmul %q, %k : (tensor<2x16x32xbf16>, tensor<2x32x64xbf16>) -> tensor<2x16x64xbf16>
  %yb = tensor.add %bm, %bh : (tensor<2x16x64xbf16>, tensor<64xbf16>) -> tensor<2x16x64xbf16>
  func.return %y, %yh, %mh, %ym, %yb : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<2x16x64xbf16>
}
