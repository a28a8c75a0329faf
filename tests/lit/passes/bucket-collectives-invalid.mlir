// RUN: not %spmdc-opt %s -p 'bucket-collectives{max-bytes=25MB}' 2>&1 | FileCheck %s --check-prefix=BAD-VALUE
// RUN: not %spmdc-opt %s -p 'bucket-collectives{max-bytes}' 2>&1 | FileCheck %s --check-prefix=NO-VALUE
// RUN: not %spmdc-opt %s -p 'bucket-collectives{bucket-size=1048576}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION
// RUN: not %spmdc-opt %s -p 'bucket-collectives{max-bytes=0}' 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not %spmdc-opt %s -p 'bucket-collectives{max-bytes=1 max-bytes=2}' 2>&1 | FileCheck %s --check-prefix=TWICE

// bucket-collectives emits no diagnostics of its own: ops it cannot bucket are left
// alone. Its option mistakes are reported before the input is read.

// A size with a unit: max-bytes is a plain number of bytes.
// BAD-VALUE: spmdc-opt: error: option 'max-bytes' of pass 'bucket-collectives' expects int, got '25MB'

// The option without a value.
// NO-VALUE: spmdc-opt: error: option 'max-bytes' of pass 'bucket-collectives' needs a value (max-bytes=<int>)

// A zero cap would put every collective in a bucket of its own: refused.
// ZERO: spmdc-opt: error: pass 'bucket-collectives': max-bytes must be positive, got 0

// The same option twice: which one was meant is unclear.
// TWICE: spmdc-opt: error: option 'max-bytes' of pass 'bucket-collectives' is given twice

// The option under another name; the message lists the real one.
// UNKNOWN-OPTION: spmdc-opt: error: pass 'bucket-collectives' has no option 'bucket-size' (options: max-bytes, mode)

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
