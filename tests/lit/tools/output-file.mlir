// RUN: rm -f %t.mlir %t.bad.mlir
// RUN: %spmdc-opt %s -p cse -o %t.mlir > %t.stdout
// RUN: not test -s %t.stdout
// RUN: FileCheck %s --input-file %t.mlir
// RUN: %roundtrip %t.mlir | FileCheck %s
// RUN: not %spmdc-opt %S/Inputs/invalid-for-output.mlir -o %t.bad.mlir
// RUN: not test -e %t.bad.mlir

// -o writes the module to the file and nothing to stdout; a failing run writes no file.

// CHECK-LABEL: func.func @written_to_file(
// CHECK-NEXT:    %[[E:.*]] = tensor.exp %x : tensor<4xf32>
// CHECK-NEXT:    func.return %[[E]], %[[E]] : tensor<4xf32>, tensor<4xf32>
func.func @written_to_file(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.exp %x : tensor<4xf32>
  %1 = tensor.exp %x : tensor<4xf32>
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}
