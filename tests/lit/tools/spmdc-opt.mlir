// RUN: %spmdc-opt %s --split-input-file | FileCheck %s
// RUN: %spmdc-opt %s --split-input-file --print-op-generic | FileCheck %s --check-prefix=GENERIC
// RUN: %spmdc-opt %s | FileCheck %s --check-prefix=NOSPLIT
// RUN: cat %s | %spmdc-opt - --split-input-file | FileCheck %s

// Each chunk is its own module; outputs are separated by '// -----'.

// CHECK-LABEL: module {
// CHECK-NEXT:    func.func @first_chunk(%x: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:      %[[E:.*]] = tensor.exp %x : tensor<4xf32>
// CHECK-NEXT:      func.return %[[E]] : tensor<4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK-NEXT:  // -----

// GENERIC-LABEL: "builtin.module"() ({
// GENERIC-NEXT:    "func.func"() ({
// GENERIC-NEXT:    ^bb0(%x: tensor<4xf32>):
// GENERIC-NEXT:      %[[E:.*]] = "tensor.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
// GENERIC-NEXT:      "func.return"(%[[E]]) : (tensor<4xf32>) -> ()
// GENERIC-NEXT:    }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "first_chunk"} : () -> ()
// GENERIC-NEXT:  }) : () -> ()
// GENERIC-NEXT:  // -----

// Without --split-input-file the markers are plain comments: one module.
// NOSPLIT:      module {
// NOSPLIT-NEXT:   func.func @first_chunk(
// NOSPLIT:        shard.mesh @mesh = <["tp" = 2]>
// NOSPLIT:        func.func @second_chunk(
// NOSPLIT:        func.func @third_chunk(
// NOSPLIT-NOT:  // -----
// NOSPLIT-NOT:  module

func.func @first_chunk(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.exp %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// A symbol of another chunk is not visible here: each chunk declares its own mesh.
// CHECK-LABEL: module {
// CHECK-NEXT:    shard.mesh @mesh = <["tp" = 2]>
// CHECK-NEXT:    func.func @second_chunk(%x: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:      %[[A:.*]] = shard.annotate %x {sharding = #shard<@mesh, [S(0)]>} : tensor<4xf32>
// CHECK:       // -----

// GENERIC-LABEL: "builtin.module"() ({
// GENERIC-NEXT:    "shard.mesh"() {axes = ["tp"], shape = [2], sym_name = "mesh"} : () -> ()
// GENERIC:         %[[A:.*]] = "shard.annotate"(%x) {sharding = #shard<@mesh, [S(0)]>} : (tensor<4xf32>) -> tensor<4xf32>
// GENERIC:       // -----
shard.mesh @mesh = <["tp" = 2]>
func.func @second_chunk(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0)]>} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// A named module in a chunk is printed as is.
// CHECK-LABEL: module @third {
// CHECK-NEXT:    func.func @third_chunk() {
// CHECK-NEXT:      func.return
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK-NOT:   // -----

// GENERIC-LABEL: "builtin.module"() ({
// GENERIC:         "func.return"() : () -> ()
// GENERIC:       }) {sym_name = "third"} : () -> ()
// GENERIC-NOT:   // -----
module @third {
  func.func @third_chunk() {
    func.return
  }
}
