// RUN: not %spmdc-opt %S/Inputs/wrong-expectations.mlir --split-input-file --verify-diagnostics 2>&1 | FileCheck %s

// --verify-diagnostics fails on a diagnostic nobody expected and on an expectation
// nothing produced; each problem names the file and line.

// A different message: reported both ways.
// CHECK:      wrong-expectations.mlir:3:3: error: unexpected error: 'tensor.add' op result type tensor<8xf32> does not match the inferred type tensor<4xf32>
// CHECK-NEXT: wrong-expectations.mlir:2:1: error: expected error "does not match the inferred type tensor<16xf32>" was not produced (at line 3)

// The right message on the wrong line.
// CHECK-NEXT: wrong-expectations.mlir:11:3: error: unexpected error: 'tensor.add' op result type tensor<8xf32>
// CHECK-NEXT: wrong-expectations.mlir:10:1: error: expected error "does not match the inferred type" was not produced (at line 12)

// No expectation at all.
// CHECK-NEXT: wrong-expectations.mlir:18:3: error: unexpected error: 'tensor.add' op result type tensor<8xf32>

// An expectation in a valid chunk.
// CHECK-NEXT: wrong-expectations.mlir:25:1: error: expected error "anything" was not produced (at line 26)
// CHECK-NOT:  error:
