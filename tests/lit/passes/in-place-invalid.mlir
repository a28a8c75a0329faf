// RUN: not %spmdc-opt %s -p in-place --split-input-file 2>&1 | FileCheck %s

// A wrong `inplace` attribute is an error naming the op.
// CHECK: error: 'tensor.add' op attribute 'inplace' = 2: the op has 2 operand(s)
func.func @bad_index(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.exp %x : tensor<4xf32>
  %s = tensor.add %e, %e {inplace = 2 : i64} : tensor<4xf32>
  func.return %s : tensor<4xf32>
}

// -----

// CHECK: error: 'tensor.add' op attribute 'inplace' = 1: operand #1 is tensor<4xf32>, the result tensor<4x4xf32>
func.func @bad_type(%x: tensor<4x4xf32>, %v: tensor<4xf32>) -> tensor<4x4xf32> {
  %s = tensor.add %x, %v {inplace = 1 : i64} : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  func.return %s : tensor<4x4xf32>
}
