// RUN: %roundtrip %s | FileCheck %s
// RUN: %spmdc-opt %s --print-op-generic | %spmdc-opt | FileCheck %s

// The whole file is one named module with attributes; it is printed as given,
// not wrapped in a second module.

// CHECK-LABEL: module @top attributes {spmdc.version = 1} {
// CHECK-NEXT:    shard.mesh @mesh = <["tp" = 4]>
module @top attributes {spmdc.version = 1} {
  shard.mesh @mesh = <["tp" = 4]>

  // A nested module sees the symbols of the enclosing one.
  // CHECK-LABEL: module @nested {
  // CHECK-NEXT:    func.func @nested_uses_outer_mesh(%[[A:.*]]: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT:      %[[S:.*]] = shard.annotate %[[A]] {sharding = #shard<@mesh, [S(0)]>} : tensor<4xf32>
  // CHECK-NEXT:      func.return %[[S]] : tensor<4xf32>
  // CHECK-NEXT:    }
  // CHECK-NEXT:  }
  module @nested {
    func.func @nested_uses_outer_mesh(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = shard.annotate %a {sharding = #shard<@mesh, [S(0)]>} : tensor<4xf32>
      func.return %0 : tensor<4xf32>
    }
  }

  // The generic form of a module prints in the custom form.
  // CHECK-LABEL: module @generic_module {
  // CHECK-NEXT:    func.func @inside_generic_module(%[[A:.*]]: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT:      func.return %[[A]] : tensor<4xf32>
  "builtin.module"() ({
    "func.func"() ({
    ^bb0(%a: tensor<4xf32>):
      "func.return"(%a) : (tensor<4xf32>) -> ()
    }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "inside_generic_module"} : () -> ()
  }) {sym_name = "generic_module"} : () -> ()

  // A generic module with extra attributes and no name.
  // CHECK-LABEL: module attributes {spmdc.stage = "global"} {
  // CHECK-NEXT:  }
  "builtin.module"() ({
  }) {spmdc.stage = "global"} : () -> ()

  // An empty anonymous module.
  // CHECK-LABEL: module {
  // CHECK-NEXT:  }
  module {
  }

  // A module name that is not a bare identifier is quoted.
  // CHECK-LABEL: module @"quoted name" {
  module @"quoted name" {
  }
}
// CHECK-NEXT: }
// CHECK-NOT: module
