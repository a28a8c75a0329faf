// RUN: %spmdc-opt %s -p canonicalize,cse --print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=AFTER-ALL
// RUN: %spmdc-opt %s -p 'canonicalize{max-iterations=3},cse' --print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=OPTIONS
// RUN: %spmdc-opt %s -p canonicalize,cse,dce --print-ir-after=cse --print-ir-before=canonicalize 2>&1 >/dev/null | FileCheck %s --check-prefix=SELECTED
// RUN: %spmdc-opt %s -p canonicalize --print-ir-after-all --print-op-generic 2>&1 >/dev/null | FileCheck %s --check-prefix=GENERIC
// RUN: %spmdc-opt %s -p canonicalize,cse --print-ir-after-all 2>/dev/null | FileCheck %s --check-prefix=STDOUT

// Dumps go to stderr, one per pass, with mlir-opt's header.

// AFTER-ALL:      // -----// IR Dump After canonicalize //----- //
// AFTER-ALL-NEXT: module {
// AFTER-ALL-NEXT:   func.func @dumped(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
// AFTER-ALL-NEXT:     %[[E:.*]] = tensor.exp %x : tensor<4x4xf32>
// AFTER-ALL-NEXT:     %[[F:.*]] = tensor.exp %x : tensor<4x4xf32>
// AFTER-ALL-NEXT:     %[[S:.*]] = tensor.add %[[E]], %[[F]] : tensor<4x4xf32>
// AFTER-ALL:      // -----// IR Dump After cse //----- //
// AFTER-ALL-NEXT: module {
// AFTER-ALL-NEXT:   func.func @dumped(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
// AFTER-ALL-NEXT:     %[[E:.*]] = tensor.exp %x : tensor<4x4xf32>
// AFTER-ALL-NEXT:     %[[S:.*]] = tensor.add %[[E]], %[[E]] : tensor<4x4xf32>
// AFTER-ALL-NOT:  IR Dump

// Options that differ from their defaults are shown in the header.
// OPTIONS: // -----// IR Dump After canonicalize{max-iterations=3} //----- //
// OPTIONS: // -----// IR Dump After cse //----- //

// SELECTED-NOT:  IR Dump After canonicalize
// SELECTED:      // -----// IR Dump Before canonicalize //----- //
// SELECTED-NEXT: module {
// SELECTED:        tensor.permute
// SELECTED-NOT:  IR Dump After canonicalize
// SELECTED:      // -----// IR Dump After cse //----- //
// SELECTED-NOT:  IR Dump

// GENERIC:      // -----// IR Dump After canonicalize //----- //
// GENERIC-NEXT: "builtin.module"() ({

// The final IR still goes to stdout, without dump headers.
// STDOUT-NOT:  IR Dump
// STDOUT:      func.func @dumped(
// STDOUT-NEXT:   %[[E:.*]] = tensor.exp %x : tensor<4x4xf32>
// STDOUT-NEXT:   %[[S:.*]] = tensor.add %[[E]], %[[E]] : tensor<4x4xf32>
// STDOUT-NEXT:   func.return %[[S]] : tensor<4x4xf32>

func.func @dumped(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = tensor.permute %x {perm = [1, 0]} : tensor<4x4xf32>
  %1 = tensor.permute %0 {perm = [1, 0]} : tensor<4x4xf32>
  %2 = tensor.exp %1 : tensor<4x4xf32>
  %3 = tensor.exp %x : tensor<4x4xf32>
  %4 = tensor.add %2, %3 : tensor<4x4xf32>
  func.return %4 : tensor<4x4xf32>
}
