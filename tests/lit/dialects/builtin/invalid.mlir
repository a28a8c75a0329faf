// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

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
