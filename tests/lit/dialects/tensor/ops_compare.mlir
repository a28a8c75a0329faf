// RUN: %roundtrip %s | FileCheck %s

// Comparisons broadcast like the arithmetic ops and give i1.
// CHECK-LABEL: func.func @compare_predicates(
// CHECK:         %[[EQ:.*]] = tensor.compare %a, %b {predicate = "eq"} : (tensor<8x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
// CHECK-NEXT:    %[[LT:.*]] = tensor.compare %x, %s {predicate = "lt"} : (tensor<4xf32>, tensor<f32>) -> tensor<4xi1>
// CHECK-NEXT:    %[[GE:.*]] = tensor.compare %x, %x {predicate = "ge"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
func.func @compare_predicates(%a: tensor<8x8xi64>, %b: tensor<8x1xi64>, %x: tensor<4xf32>, %s: tensor<f32>) -> (tensor<8x8xi1>, tensor<4xi1>, tensor<4xi1>) {
  %0 = tensor.compare %a, %b {predicate = "eq"} : (tensor<8x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
  %1 = tensor.compare %x, %s {predicate = "lt"} : (tensor<4xf32>, tensor<f32>) -> tensor<4xi1>
  %2 = tensor.compare %x, %x {predicate = "ge"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  func.return %0, %1, %2 : tensor<8x8xi1>, tensor<4xi1>, tensor<4xi1>
}

// CHECK-LABEL: func.func @logic_ops(
// CHECK:         %[[AND:.*]] = tensor.and %m, %n : tensor<8xi1>
// CHECK-NEXT:    %[[OR:.*]] = tensor.or %[[AND]], %n : tensor<8xi1>
// CHECK-NEXT:    %[[XOR:.*]] = tensor.xor %[[OR]], %m : tensor<8xi1>
// CHECK-NEXT:    %[[NOT:.*]] = tensor.not %[[XOR]] : tensor<8xi1>
// CHECK-NEXT:    %[[BITS:.*]] = tensor.not %i : tensor<8xi32>
func.func @logic_ops(%m: tensor<8xi1>, %n: tensor<8xi1>, %i: tensor<8xi32>) -> (tensor<8xi1>, tensor<8xi32>) {
  %0 = tensor.and %m, %n : tensor<8xi1>
  %1 = tensor.or %0, %n : tensor<8xi1>
  %2 = tensor.xor %1, %m : tensor<8xi1>
  %3 = tensor.not %2 : tensor<8xi1>
  %4 = tensor.not %i : tensor<8xi32>
  func.return %3, %4 : tensor<8xi1>, tensor<8xi32>
}

// A causal mask: the condition and both values broadcast to 8x8.
// CHECK-LABEL: func.func @select_causal_mask(
// CHECK:         %[[R:.*]] = tensor.select %mask, %scores, %ninf : (tensor<8x8xi1>, tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32>
// CHECK-NEXT:    func.return %[[R]]
func.func @select_causal_mask(%mask: tensor<8x8xi1>, %scores: tensor<2x8x8xf32>, %ninf: tensor<f32>) -> tensor<2x8x8xf32> {
  %0 = tensor.select %mask, %scores, %ninf : (tensor<8x8xi1>, tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32>
  func.return %0 : tensor<2x8x8xf32>
}
