// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect

// expected-error@+1 {{'builtin.module' op expects a single block without arguments}}
"builtin.module"() ({
^bb0(%a: tensor<4xf32>):
}) : () -> ()

// -----

// expected-error@+1 {{'builtin.module' op expects a single block without arguments}}
"builtin.module"() ({
^bb0:
  shard.mesh @a = <["x" = 2]>
^bb1:
  shard.mesh @b = <["x" = 2]>
}) : () -> ()

// -----

shard.mesh @mesh = <["tp" = 2]>
// expected-error@+1 {{'func.func' op redefinition of symbol '@mesh'}}
func.func @mesh() {
  func.return
}

// -----

func.func @f() {
  func.return
}
// expected-error@+1 {{'func.func' op redefinition of symbol '@f'}}
func.func @f() {
  func.return
}

// -----

// Symbols of different modules do not clash.
module @a {
  shard.mesh @mesh = <["tp" = 2]>
}
module @b {
  shard.mesh @mesh = <["tp" = 2]>
  // expected-error@+1 {{'shard.mesh' op redefinition of symbol '@mesh'}}
  shard.mesh @mesh = <["dp" = 2]>
}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'sym_name' must be a string, got 3}}
"builtin.module"() ({
}) {sym_name = 3} : () -> ()

// -----

// expected-error@+1 {{'builtin.module' op expected 1 regions, but found 0}}
"builtin.module"() : () -> ()

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'builtin.module' op expected 0 results, but found 1}}
  %m = "builtin.module"() ({
  }) : () -> tensor<4xf32>
  func.return %x : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{'builtin.module' op expected 0 operands, but found 1}}
  "builtin.module"(%x) ({
  }) : (tensor<4xf32>) -> ()
  func.return
}

// -----

// The blocks of a region do not see each other's values (there are no branches),
// only the values of enclosing non-isolated regions.
func.func @value_of_another_block(%x: tensor<4xf32>) {
  "test.region"() ({
  ^bb0:
    %a = tensor.neg %x : tensor<4xf32>
  ^bb1:
    // expected-error@+1 {{'tensor.neg' op operand #0 is not visible here (defined in another scope)}}
    %b = tensor.neg %a : tensor<4xf32>
  }) : () -> ()
  func.return
}

// -----

// Use before definition is rejected while parsing.
func.func @use_before_def(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{use of undeclared SSA value '%late'}}
  %0 = tensor.neg %late : tensor<4xf32>
  %late = tensor.exp %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// An unregistered op is not verified, but what is nested in it is.
func.func @verified_inside_unregistered_op(%x: tensor<4xf32>) {
  "test.region"() ({
    // expected-error@+1 {{'tensor.neg' op result type tensor<8xf32> does not match the inferred type tensor<4xf32>}}
    %a = "tensor.neg"(%x) : (tensor<4xf32>) -> tensor<8xf32>
  }) {anything = "goes"} : () -> ()
  func.return
}
