// RUN: not %spmdc-opt %s --split-input-file 2>&1 | FileCheck %s

// Every error is `file:line:col: error: message`, then the source line, then a
// caret under the column. Line numbers count from the top of the whole file.

// CHECK: errors.mlir:[[# @LINE + 3]]:46: error: unknown element type 'f3' in 'tensor<8x16xf3>' (expected one of f64, f32, f16, bf16, i64, i32, i16, i8, i1)
// CHECK-NEXT: {{^}}func.func @element_type_typo(%x: tensor<8x16xf3>) {
// CHECK-NEXT: {{^ {45}\^$}}
func.func @element_type_typo(%x: tensor<8x16xf3>) {
  func.return
}

// -----

// CHECK: errors.mlir:[[# @LINE + 3]]:35: error: invalid dimension '?' in 'tensor<?x4xf32>' (dims are static integers)
// CHECK-NEXT: {{^}}func.func @dynamic_dim(%x: tensor<?x4xf32>) {
// CHECK-NEXT: {{^ {34}\^$}}
func.func @dynamic_dim(%x: tensor<?x4xf32>) {
  func.return
}

// -----

func.func @undefined_value() -> tensor<4xf32> {
  // CHECK: errors.mlir:[[# @LINE + 3]]:15: error: use of undeclared SSA value '%v'
  // CHECK-NEXT: {{^}}  func.return %v : tensor<4xf32>
  // CHECK-NEXT: {{^ {14}\^$}}
  func.return %v : tensor<4xf32>
}

// -----

func.func @unknown_op(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 3]]:8: error: unregistered operation 'tensor.frobnicate'
  // CHECK-NEXT: {{^}}  %0 = tensor.frobnicate %x : tensor<4xf32>
  // CHECK-NEXT: {{^ {7}\^$}}
  %0 = tensor.frobnicate %x : tensor<4xf32>
  func.return
}

// -----

func.func @unknown_generic_op(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 3]]:8: error: unregistered operation 'test.op'
  // CHECK-NEXT: {{^}}  %0 = "test.op"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: {{^ {7}\^$}}
  %0 = "test.op"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @op_without_dialect(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 1]]:8: error: unregistered operation 'frob' (expected 'dialect.op')
  %0 = frob %x : tensor<4xf32>
  func.return
}

// -----

func.func @unterminated_string() {
  // CHECK: errors.mlir:[[# @LINE + 3]]:27: error: unterminated string
  // CHECK-NEXT: {{^}}  "func.return"() {note = "abc} : () -> ()
  // CHECK-NEXT: {{^ {26}\^$}}
  "func.return"() {note = "abc} : () -> ()
}

// -----

func.func @unexpected_character(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 3]]:22: error: unexpected character '!'
  // CHECK-NEXT: {{^}}  %0 = tensor.neg %x ! tensor<4xf32>
  // CHECK-NEXT: {{^ {21}\^$}}
  %0 = tensor.neg %x ! tensor<4xf32>
  func.return
}

// -----

func.func @redefinition(%x: tensor<4xf32>) {
  %0 = tensor.neg %x : tensor<4xf32>
  // CHECK: errors.mlir:[[# @LINE + 1]]:3: error: redefinition of SSA value '%0'
  %0 = tensor.neg %x : tensor<4xf32>
  func.return
}

// -----

func.func @type_of_use_differs(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 1]]:19: error: use of value '%x' expects different type than prior uses: 'tensor<8xf32>' vs 'tensor<4xf32>'
  %0 = tensor.neg %x : tensor<8xf32>
  func.return
}

// -----

func.func @result_names_vs_results(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 1]]:12: error: 'tensor.neg' defines 1 result(s) but 2 names were given
  %0, %1 = tensor.neg %x : tensor<4xf32>
  func.return
}

// -----

func.func @result_number_out_of_range(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r:2 = kernel.fused %x : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    kernel.yield %a, %a : tensor<4xf32>, tensor<4xf32>
  }
  // CHECK: errors.mlir:[[# @LINE + 1]]:15: error: result number 2 out of range for '%r' (2 results)
  func.return %r#2 : tensor<4xf32>
}

// -----

func.func @duplicate_attribute_key(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 1]]:35: error: duplicate key 'dims' in dictionary attribute
  %0 = tensor.sum %x {dims = [0], dims = [0]} : (tensor<4xf32>) -> tensor<f32>
  func.return
}

// -----

func.func @missing_types(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 1]]:8: error: custom form of 'tensor.neg' needs ': type' after its operands
  %0 = tensor.neg %x
  func.return
}

// -----

func.func @generic_operand_count(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 1]]:8: error: 'tensor.neg' has 1 operands but its type lists 2
  %0 = "tensor.neg"(%x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @float_in_integer_dense() {
  // CHECK: errors.mlir:[[# @LINE + 1]]:39: error: float literal 1.5 in a dense attribute of integer type tensor<2xi32>
  %0 = tensor.constant {value = dense<1.5> : tensor<2xi32>} : tensor<2xi32>
  func.return
}

// -----

func.func @unexpected_token(%x: tensor<4xf32>) {
  // CHECK: errors.mlir:[[# @LINE + 3]]:24: error: unexpected ':', expected '(' or type
  // CHECK-NEXT: {{^}}  %0 = tensor.neg %x : : tensor<4xf32>
  // CHECK-NEXT: {{^ {23}\^$}}
  %0 = tensor.neg %x : : tensor<4xf32>
  func.return
}

// -----

// The last chunk is cut off: the error points just past its last character.
// CHECK: errors.mlir:[[# @LINE + 5]]:14: error: unexpected end of input
// CHECK-NEXT: {{^}}  func.return
// CHECK-NEXT: {{^ {13}\^$}}
// CHECK-NOT: error
func.func @unexpected_end_of_input(%x: tensor<4xf32>) {
  func.return
