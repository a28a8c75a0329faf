// RUN: not %spmdc-opt %s -p 'fuse-collectives{max-bytes=1024}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION

// fuse-collectives emits no diagnostics of its own: what it cannot rewrite it leaves alone.
// Its option mistakes are reported before the input is read.

// fuse-collectives has no options (max-bytes belongs to bucket-collectives).
// UNKNOWN-OPTION: spmdc-opt: error: pass 'fuse-collectives' has no option 'max-bytes' (options: none)

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
