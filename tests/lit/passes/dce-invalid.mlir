// RUN: not %spmdc-opt %s -p 'dce{aggressive}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION

// dce emits no diagnostics of its own: what it cannot rewrite it leaves alone.
// Its option mistakes are reported before the input is read.

// dce has no options.
// UNKNOWN-OPTION: spmdc-opt: error: pass 'dce' has no option 'aggressive' (options: none)

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
