// RUN: %roundtrip %s | FileCheck %s
// RUN: %spmdc-opt %s --print-op-generic | %spmdc-opt | FileCheck %s

// Top-level ops without a module are wrapped in one.
// CHECK: module {
// CHECK-NEXT: shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
shard.mesh @mesh = <["dp" = 2, "tp" = 4]>

// CHECK-LABEL: func.func @no_args_no_results() {
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @no_args_no_results() {
  func.return
}

// CHECK-LABEL: func.func @identity(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
// CHECK-NEXT:    func.return %x : tensor<8x16xf32>
func.func @identity(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  func.return %x : tensor<8x16xf32>
}

// Argument attributes: the layout an argument arrives in and its parameter name.
// CHECK-LABEL: func.func @arg_attrs(
// CHECK-SAME:    %x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>},
// CHECK-SAME:    %w: tensor<16x32xf32> {spmdc.param = "fc.weight"})
// CHECK-SAME:    -> tensor<8x32xf32> {
func.func @arg_attrs(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>},
                     %w: tensor<16x32xf32> {spmdc.param = "fc.weight"}) -> tensor<8x32xf32> {
  %y = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  func.return %y : tensor<8x32xf32>
}

// Several results, result attributes (a gradient and the loss), function attributes.
// CHECK-LABEL: func.func @multiple_results_with_attrs(%w: tensor<4xf32> {spmdc.param = "w"}, %l: tensor<f32>)
// CHECK-SAME:    -> (tensor<4xf32> {spmdc.grad_of = "w"}, tensor<f32> {spmdc.loss})
// CHECK-SAME:    attributes {spmdc.entry, spmdc.note = "train step"} {
// CHECK-NEXT:    func.return %w, %l : tensor<4xf32>, tensor<f32>
func.func @multiple_results_with_attrs(%w: tensor<4xf32> {spmdc.param = "w"}, %l: tensor<f32>)
    -> (tensor<4xf32> {spmdc.grad_of = "w"}, tensor<f32> {spmdc.loss}) attributes {spmdc.note = "train step", spmdc.entry} {
  func.return %w, %l : tensor<4xf32>, tensor<f32>
}

// A parenthesised single result without attributes prints bare.
// CHECK-LABEL: func.func @single_result_in_parens(%x: tensor<f32>) -> tensor<f32> {
func.func @single_result_in_parens(%x: tensor<f32>) -> (tensor<f32>) {
  func.return %x : tensor<f32>
}

// Numeric argument names are not name hints: they print as %argN.
// CHECK-LABEL: func.func @numeric_arg_names(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    %[[SUM:.*]] = tensor.add %arg0, %arg1 : tensor<4xf32>
// CHECK-NEXT:    func.return %[[SUM]] : tensor<4xf32>
func.func @numeric_arg_names(%0: tensor<4xf32>, %1: tensor<4xf32>) -> tensor<4xf32> {
  %2 = tensor.add %0, %1 : tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// Name hints survive; unnamed results are numbered from 0 in each function.
// CHECK-LABEL: func.func @name_hints(%input: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    %hidden = tensor.exp %input : tensor<4xf32>
// CHECK-NEXT:    %0 = tensor.neg %hidden : tensor<4xf32>
// CHECK-NEXT:    %out.final = tensor.relu %0 : tensor<4xf32>
// CHECK-NEXT:    func.return %out.final : tensor<4xf32>
func.func @name_hints(%input: tensor<4xf32>) -> tensor<4xf32> {
  %hidden = tensor.exp %input : tensor<4xf32>
  %17 = tensor.neg %hidden : tensor<4xf32>
  %out.final = tensor.relu %17 : tensor<4xf32>
  func.return %out.final : tensor<4xf32>
}

// A symbol that is not a bare identifier is quoted.
// CHECK-LABEL: func.func @"fc1/forward"(%x: tensor<2xf32>) -> tensor<2xf32> {
func.func @"fc1/forward"(%x: tensor<2xf32>) -> tensor<2xf32> {
  func.return %x : tensor<2xf32>
}

// func.call with a multi-result group used through %r#i.
// CHECK-LABEL: func.func @call_multi_result(%x: tensor<4xf32> {spmdc.param = "w"}, %s: tensor<f32>) -> (tensor<4xf32>, tensor<f32>) {
// CHECK-NEXT:    %[[R:.*]]:2 = func.call %x, %s {callee = @multiple_results_with_attrs} : (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>)
// CHECK-NEXT:    %[[SUM:.*]] = tensor.add %[[R]]#0, %x : tensor<4xf32>
// CHECK-NEXT:    func.return %[[SUM]], %[[R]]#1 : tensor<4xf32>, tensor<f32>
func.func @call_multi_result(%x: tensor<4xf32> {spmdc.param = "w"}, %s: tensor<f32>) -> (tensor<4xf32>, tensor<f32>) {
  %r:2 = func.call %x, %s {callee = @multiple_results_with_attrs} : (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>)
  %0 = tensor.add %r#0, %x : tensor<4xf32>
  func.return %0, %r#1 : tensor<4xf32>, tensor<f32>
}

// A call without results prints the operand types only.
// CHECK-LABEL: func.func @call_no_results() {
// CHECK-NEXT:    func.call {callee = @no_args_no_results}
// CHECK-NEXT:    func.return
func.func @call_no_results() {
  func.call {callee = @no_args_no_results}
  func.return
}

// The generic forms of func.func, func.call and func.return print in custom form.
// CHECK-LABEL: func.func @generic_func(%a: tensor<4xf32>, %b: tensor<f32>) -> (tensor<4xf32> {spmdc.grad_of = "w"}, tensor<f32>) {
// CHECK-NEXT:    %[[C:.*]]:2 = func.call %a, %b {callee = @multiple_results_with_attrs} : (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>)
// CHECK-NEXT:    func.return %[[C]]#0, %[[C]]#1 : tensor<4xf32>, tensor<f32>
"func.func"() ({
^bb0(%a: tensor<4xf32>, %b: tensor<f32>):
  %c:2 = "func.call"(%a, %b) {callee = @multiple_results_with_attrs} : (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>)
  "func.return"(%c#0, %c#1) : (tensor<4xf32>, tensor<f32>) -> ()
}) {function_type = (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>), res_attrs = [{spmdc.grad_of = "w"}, {}], sym_name = "generic_func"} : () -> ()
