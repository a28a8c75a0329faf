// RUN: not %spmdc-opt %s -p 'cse{commutative=false}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION

// cse emits no diagnostics of its own: what it cannot rewrite it leaves alone.
// Its option mistakes are reported before the input is read.

// cse has no options: it always matches commutative ops with swapped operands.
// UNKNOWN-OPTION: spmdc-opt: error: pass 'cse' has no option 'commutative' (options: none)

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
