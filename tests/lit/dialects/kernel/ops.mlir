// RUN: %roundtrip %s | FileCheck %s
// RUN: %spmdc-opt %s --print-op-generic | %spmdc-opt | FileCheck %s

// The region is isolated from above: its block arguments stand for the operands.
// CHECK-LABEL: func.func @fused_elementwise(
// CHECK:         %[[R:.*]] = kernel.fused %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32> {
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<8x16xf32>, %[[Y:.*]]: tensor<16xf32>):
// CHECK-NEXT:      %[[S:.*]] = tensor.add %[[X]], %[[Y]] : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:      %[[T:.*]] = tensor.relu %[[S]] : tensor<8x16xf32>
// CHECK-NEXT:      kernel.yield %[[T]] : tensor<8x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[R]] : tensor<8x16xf32>
func.func @fused_elementwise(%a: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<8x16xf32> {
  %r = kernel.fused %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32> {
  ^bb0(%x: tensor<8x16xf32>, %y: tensor<16xf32>):
    %0 = tensor.add %x, %y : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    %1 = tensor.relu %0 : tensor<8x16xf32>
    kernel.yield %1 : tensor<8x16xf32>
  }
  func.return %r : tensor<8x16xf32>
}

// Several results (used as %m#0, %m#1) and the optional 'kind' attribute.
// CHECK-LABEL: func.func @fused_multi_result(
// CHECK:         %[[M:.*]]:2 = kernel.fused %a {kind = "reduction"} : (tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8xf32>) {
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<8x16xf32>):
// CHECK-NEXT:      %[[E:.*]] = tensor.exp %[[X]] : tensor<8x16xf32>
// CHECK-NEXT:      %[[S:.*]] = tensor.sum %[[E]] {dims = [1]} : (tensor<8x16xf32>) -> tensor<8xf32>
// CHECK-NEXT:      kernel.yield %[[E]], %[[S]] : tensor<8x16xf32>, tensor<8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[M]]#0, %[[M]]#1 : tensor<8x16xf32>, tensor<8xf32>
func.func @fused_multi_result(%a: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8xf32>) {
  %m:2 = kernel.fused %a {kind = "reduction"} : (tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8xf32>) {
  ^bb0(%x: tensor<8x16xf32>):
    %0 = tensor.exp %x : tensor<8x16xf32>
    %1 = tensor.sum %0 {dims = [1]} : (tensor<8x16xf32>) -> tensor<8xf32>
    kernel.yield %0, %1 : tensor<8x16xf32>, tensor<8xf32>
  }
  func.return %m#0, %m#1 : tensor<8x16xf32>, tensor<8xf32>
}

// Without operands there is no entry block label.
// CHECK-LABEL: func.func @fused_without_operands(
// CHECK:         %[[C:.*]] = kernel.fused : tensor<4xf32> {
// CHECK-NEXT:      %[[Z:.*]] = tensor.constant {value = dense<0.0> : tensor<4xf32>} : tensor<4xf32>
// CHECK-NEXT:      kernel.yield %[[Z]] : tensor<4xf32>
// CHECK-NEXT:    }
func.func @fused_without_operands() -> tensor<4xf32> {
  %c = kernel.fused : () -> tensor<4xf32> {
    %0 = tensor.constant {value = dense<0.0> : tensor<4xf32>} : tensor<4xf32>
    kernel.yield %0 : tensor<4xf32>
  }
  func.return %c : tensor<4xf32>
}

// Names inside an isolated region restart; the same operand may be passed twice.
// CHECK-LABEL: func.func @fused_chain(
// CHECK:         %[[F1:.*]] = kernel.fused %a : tensor<4xf32> {
// CHECK:         %[[F2:.*]] = kernel.fused %[[F1]], %[[F1]] : tensor<4xf32> {
// CHECK-NEXT:    ^bb0(%[[P:.*]]: tensor<4xf32>, %[[Q:.*]]: tensor<4xf32>):
// CHECK-NEXT:      %[[M:.*]] = tensor.mul %[[P]], %[[Q]] : tensor<4xf32>
// CHECK-NEXT:      kernel.yield %[[M]] : tensor<4xf32>
func.func @fused_chain(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %1 = tensor.neg %x : tensor<4xf32>
    kernel.yield %1 : tensor<4xf32>
  }
  %1 = kernel.fused %0, %0 : tensor<4xf32> {
  ^bb0(%p: tensor<4xf32>, %q: tensor<4xf32>):
    %0 = tensor.mul %p, %q : tensor<4xf32>
    kernel.yield %0 : tensor<4xf32>
  }
  func.return %1 : tensor<4xf32>
}

// CHECK-LABEL: func.func @generic_forms(
// CHECK:         %[[G:.*]] = kernel.fused %a {kind = "elementwise"} : tensor<8x16xf32> {
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<8x16xf32>):
// CHECK-NEXT:      %[[N:.*]] = tensor.neg %[[X]] : tensor<8x16xf32>
// CHECK-NEXT:      kernel.yield %[[N]] : tensor<8x16xf32>
// CHECK-NEXT:    }
func.func @generic_forms(%a: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %g = "kernel.fused"(%a) ({
  ^bb0(%x: tensor<8x16xf32>):
    %0 = "tensor.neg"(%x) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    "kernel.yield"(%0) : (tensor<8x16xf32>) -> ()
  }) {kind = "elementwise"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %g : tensor<8x16xf32>
}
