// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @return_count_mismatch(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-error@+1 {{'func.return' op has 1 operands of types (tensor<4xf32>) but the enclosing function returns (tensor<4xf32>, tensor<4xf32>)}}
  func.return %x : tensor<4xf32>
}

// -----

func.func @return_type_mismatch(%x: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'func.return' op has 1 operands of types (tensor<4xf32>) but the enclosing function returns (tensor<8xf32>)}}
  func.return %x : tensor<4xf32>
}

// -----

func.func @return_nothing(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.return' op has 0 operands of types () but the enclosing function returns (tensor<4xf32>)}}
  func.return
}

// -----

func.func @return_not_last(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.return' op must be the last operation in the parent block}}
  func.return %x : tensor<4xf32>
  func.return %x : tensor<4xf32>
}

// -----

// expected-error@+1 {{'func.return' op expects parent op 'func.func'}}
func.return

// -----

func.func @return_with_result(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.return' op expected 0 results, but found 1}}
  %0 = "func.return"(%x) : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// expected-error@+1 {{'func.func' op body must end with 'func.return'}}
func.func @missing_return(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %x : tensor<4xf32>
}

// -----

// expected-error@+1 {{'func.func' op body must end with 'func.return'}}
func.func @empty_body() {
}

// -----

// expected-error@+1 {{'func.func' op expects a single-block body}}
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  "func.return"(%x) : (tensor<4xf32>) -> ()
^bb1:
  "func.return"(%x) : (tensor<4xf32>) -> ()
}) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "two_blocks"} : () -> ()

// -----

// expected-error@+1 {{'func.func' op entry block argument types (tensor<8xf32>) do not match the function type (tensor<4xf32>) -> tensor<4xf32>}}
"func.func"() ({
^bb0(%x: tensor<8xf32>):
  %0 = "tensor.constant"() {value = dense<0.0> : tensor<4xf32>} : () -> tensor<4xf32>
  "func.return"(%0) : (tensor<4xf32>) -> ()
}) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "arg_type_mismatch"} : () -> ()

// -----

// expected-error@+1 {{'func.func' op 'arg_attrs' must be an array of 1 dictionaries}}
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  "func.return"() : () -> ()
}) {arg_attrs = [{}, {}], function_type = (tensor<4xf32>) -> (), sym_name = "too_many_arg_attrs"} : () -> ()

// -----

// expected-error@+1 {{'func.func' op 'res_attrs' must be an array of 1 dictionaries}}
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  "func.return"(%x) : (tensor<4xf32>) -> ()
}) {function_type = (tensor<4xf32>) -> tensor<4xf32>, res_attrs = [1], sym_name = "res_attrs_not_dicts"} : () -> ()

// -----

// expected-error@+1 {{'func.func' op attribute 'arg_attrs' must be an array, got {}}}
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  "func.return"() : () -> ()
}) {arg_attrs = {}, function_type = (tensor<4xf32>) -> (), sym_name = "arg_attrs_not_array"} : () -> ()

// -----

// expected-error@+1 {{'func.func' op requires attribute 'sym_name'}}
"func.func"() ({
  "func.return"() : () -> ()
}) {function_type = () -> ()} : () -> ()

// -----

// expected-error@+1 {{'func.func' op requires attribute 'function_type'}}
"func.func"() ({
  "func.return"() : () -> ()
}) {sym_name = "no_type"} : () -> ()

// -----

// expected-error@+1 {{'func.func' op attribute 'function_type' must be a type, got "f32"}}
"func.func"() ({
  "func.return"() : () -> ()
}) {function_type = "f32", sym_name = "bad_type"} : () -> ()

// -----

// expected-error@+1 {{'func.func' op attribute 'sym_name' must be a string, got @f}}
"func.func"() ({
  "func.return"() : () -> ()
}) {function_type = () -> (), sym_name = @f} : () -> ()

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
// expected-error@+1 {{'func.func' op 'shard.sharding' of argument #1: placement S(5) on mesh axis 'dp' is out of range for rank-2 tensor tensor<8x16xf32>}}
func.func @arg_sharding_out_of_range(%a: tensor<4xf32>, %x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(5), R]>}) {
  func.return
}

// -----

// expected-error@+1 {{'func.func' op 'shard.sharding' of argument #0: sharding refers to unknown mesh '@nowhere'}}
func.func @arg_sharding_unknown_mesh(%x: tensor<8xf32> {shard.sharding = #shard<@nowhere, [R]>}) {
  func.return
}

// -----

shard.mesh @mesh = <["dp" = 2, "tp" = 4]>
// expected-error@+1 {{'func.func' op 'shard.sharding' of result #0: sharding #shard<@mesh, [R]> has 1 placements but mesh '@mesh' has 2 axes}}
func.func @result_sharding_wrong_arity(%x: tensor<8xf32>) -> (tensor<8xf32> {shard.sharding = #shard<@mesh, [R]>}) {
  func.return %x : tensor<8xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
// expected-error@+1 {{'func.func' op 'shard.sharding' of argument #0 must be a #shard<...> attribute}}
func.func @arg_sharding_not_a_sharding(%x: tensor<8xf32> {shard.sharding = "S(0)"}) {
  func.return
}

// -----

func.func @callee(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
func.func @call_type_mismatch(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'func.call' op types (tensor<8xf32>) -> tensor<8xf32> do not match callee type (tensor<4xf32>) -> tensor<4xf32>}}
  %0 = func.call %x {callee = @callee} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @callee(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
func.func @call_result_count_mismatch(%x: tensor<4xf32>) {
  // expected-error@+1 {{'func.call' op types (tensor<4xf32>) -> () do not match callee type (tensor<4xf32>) -> tensor<4xf32>}}
  func.call %x {callee = @callee} : tensor<4xf32>
  func.return
}

// -----

func.func @call_unknown_callee(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.call' op '@nothing' does not reference a valid function}}
  %0 = func.call %x {callee = @nothing} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

shard.mesh @mesh = <["tp" = 4]>
func.func @call_a_mesh(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.call' op '@mesh' does not reference a valid function}}
  %0 = func.call %x {callee = @mesh} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @call_without_callee(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.call' op requires attribute 'callee'}}
  %0 = func.call %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @call_callee_is_string(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.call' op attribute 'callee' must be a symbol reference (@name), got "call_callee_is_string"}}
  %0 = func.call %x {callee = "call_callee_is_string"} : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @use_before_def(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{use of undeclared SSA value '%1'}}
  %0 = tensor.neg %1 : tensor<4xf32>
  %1 = tensor.exp %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @other_function_value(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
func.func @g() -> tensor<4xf32> {
  // expected-error@+1 {{use of undeclared SSA value '%x'}}
  func.return %x : tensor<4xf32>
}
