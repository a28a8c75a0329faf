// RUN: not %spmdc-opt %s -p 'canonicalize{max-iterations}' 2>&1 | FileCheck %s --check-prefix=NO-VALUE
// RUN: not %spmdc-opt %s -p 'canonicalize{max-iterations=2.5}' 2>&1 | FileCheck %s --check-prefix=BAD-VALUE
// RUN: not %spmdc-opt %s -p 'canonicalize{max-iter=3}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION
// RUN: not %spmdc-opt %s -p 'canonicalize{max-iterations=0}' 2>&1 | FileCheck %s --check-prefix=ZERO

// canonicalize emits no diagnostics of its own: patterns that do not apply leave the
// IR alone. Its option mistakes are reported before the input is read
// (tests/lit/tools/errors.mlir has 'max-iterations=many' and an unknown option too).

// The option without a value.
// NO-VALUE: spmdc-opt: error: option 'max-iterations' of pass 'canonicalize' needs a value (max-iterations=<int>)

// Zero iterations would do nothing.
// ZERO: spmdc-opt: error: pass 'canonicalize': max-iterations must be at least 1, got 0

// A fractional iteration count.
// BAD-VALUE: spmdc-opt: error: option 'max-iterations' of pass 'canonicalize' expects int, got '2.5'

// A shortened option name; the message lists the real one.
// UNKNOWN-OPTION: spmdc-opt: error: pass 'canonicalize' has no option 'max-iter' (options: max-iterations)

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
