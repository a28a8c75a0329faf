// RUN: %spmdc-opt %s --mlir-print-debuginfo | FileCheck %s
// RUN: %spmdc-opt %s --mlir-print-debuginfo | %spmdc-opt --mlir-print-debuginfo | FileCheck %s
// RUN: %spmdc-opt %s --mlir-print-debuginfo --print-op-generic | FileCheck %s --check-prefix=GENERIC
// RUN: %spmdc-opt %s | FileCheck %s --check-prefix=NOLOC

// Explicit locations are kept; ops without one print where they were parsed.

// CHECK-LABEL: func.func @locations(%x: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    %[[A:.*]] = tensor.exp %x : tensor<4xf32> loc("fc1/aten.exp")
// CHECK-NEXT:    %[[B:.*]] = tensor.neg %[[A]] : tensor<4xf32> loc("model.py":3:7)
// CHECK-NEXT:    %[[C:.*]] = tensor.relu %[[B]] : tensor<4xf32> loc(unknown)
// CHECK-NEXT:    func.return %[[C]] : tensor<4xf32> loc("{{.*}}debuginfo.mlir":[[# @LINE + 17]]:3)
// CHECK-NEXT:  } loc("{{.*}}debuginfo.mlir":[[# @LINE + 12]]:1)
// CHECK-NEXT: } loc(

// GENERIC:      %[[A:.*]] = "tensor.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("fc1/aten.exp")
// GENERIC-NEXT: %[[B:.*]] = "tensor.neg"(%[[A]]) : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":3:7)
// GENERIC:      }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "locations"} : () -> () loc(

// Without the flag no location is printed.
// NOLOC-LABEL: func.func @locations(
// NOLOC-NEXT:    %[[A:.*]] = tensor.exp %x : tensor<4xf32>{{$}}
// NOLOC-NOT:   loc(

func.func @locations(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.exp %x : tensor<4xf32> loc("fc1/aten.exp")
  %1 = tensor.neg %0 : tensor<4xf32> loc("model.py":3:7)
  %2 = "tensor.relu"(%1) : (tensor<4xf32>) -> tensor<4xf32> loc(unknown)
  func.return %2 : tensor<4xf32>
}
