// RUN: not %spmdc-opt %s -p 'fuse-kernels{matmul-epilogue=yes}' 2>&1 | FileCheck %s --check-prefix=BAD-BOOL
// RUN: not %spmdc-opt %s -p 'fuse-kernels{min-ops=two}' 2>&1 | FileCheck %s --check-prefix=BAD-INT
// RUN: not %spmdc-opt %s -p 'fuse-kernels{epilogue}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION
// RUN: not %spmdc-opt %s -p 'fuse-kernels{min-ops=0}' 2>&1 | FileCheck %s --check-prefix=ZERO

// fuse-kernels emits no diagnostics of its own: ops it cannot fuse are left alone.
// Its option mistakes are reported before the input is read.

// A boolean option takes true/false/1/0 (or no value), not yes/no.
// BAD-BOOL: spmdc-opt: error: option 'matmul-epilogue' of pass 'fuse-kernels' expects bool, got 'yes'

// A count spelt out.
// BAD-INT: spmdc-opt: error: option 'min-ops' of pass 'fuse-kernels' expects int, got 'two'

// Regions of no ops do not exist.
// ZERO: spmdc-opt: error: pass 'fuse-kernels': min-ops must be at least 1, got 0

// A shortened option name; the message lists the real ones.
// UNKNOWN-OPTION: spmdc-opt: error: pass 'fuse-kernels' has no option 'epilogue' (options: matmul-epilogue, min-ops)

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
