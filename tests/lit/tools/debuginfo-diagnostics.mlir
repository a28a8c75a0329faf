// RUN: not %spmdc-opt %s 2>&1 | FileCheck %s

// A named location still reports the line and column where the op was written.
// CHECK: debuginfo-diagnostics.mlir:[[# @LINE + 4]]:3: error: 'tensor.exp' op result type tensor<8xf32> does not match the inferred type tensor<4xf32>
// CHECK-NEXT: {{^}}  %0 = "tensor.exp"(%x) : (tensor<4xf32>) -> tensor<8xf32> loc("fc1/aten.exp")
// CHECK-NEXT: {{^ {2}\^$}}
func.func @named_location_error(%x: tensor<4xf32>) -> tensor<8xf32> {
  %0 = "tensor.exp"(%x) : (tensor<4xf32>) -> tensor<8xf32> loc("fc1/aten.exp")
  func.return %0 : tensor<8xf32>
}
