// RUN: not %spmdc-opt %s -p bogus 2>&1 | FileCheck %s --check-prefix=UNKNOWN-PASS
// RUN: not %spmdc-opt %s -p canonicalise 2>&1 | FileCheck %s --check-prefix=NEAR-MISS
// RUN: not %spmdc-opt %s -p 'canonicalize{bogus=1}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION
// RUN: not %spmdc-opt %s -p 'canonicalize{max-iterations=many}' 2>&1 | FileCheck %s --check-prefix=BAD-VALUE
// RUN: not %spmdc-opt %s -p 'cse,,dce' 2>&1 | FileCheck %s --check-prefix=BAD-SYNTAX
// RUN: not %spmdc-opt %s --no-such-flag 2>&1 | FileCheck %s --check-prefix=BAD-FLAG
// RUN: not %spmdc-opt %t.does-not-exist.mlir 2>&1 | FileCheck %s --check-prefix=NO-FILE
// RUN: not %spmdc-opt %s -o %t.no-such-dir/out.mlir 2>&1 | FileCheck %s --check-prefix=NO-DIR
// RUN: %spmdc-opt --list-passes | FileCheck %s --check-prefix=LIST

// UNKNOWN-PASS: spmdc-opt: error: unknown pass 'bogus'
// UNKNOWN-PASS-NOT: module

// NEAR-MISS: spmdc-opt: error: unknown pass 'canonicalise'; did you mean 'canonicalize'?

// UNKNOWN-OPTION: spmdc-opt: error: pass 'canonicalize' has no option 'bogus' (options: max-iterations)

// BAD-VALUE: spmdc-opt: error: option 'max-iterations' of pass 'canonicalize' expects int, got 'many'

// BAD-SYNTAX: spmdc-opt: error: invalid pass pipeline 'cse,,dce'

// BAD-FLAG: spmdc-opt: error: unrecognized arguments: --no-such-flag

// NO-FILE: spmdc-opt: error: cannot read '{{.*}}does-not-exist.mlir': No such file or directory

// NO-DIR: spmdc-opt: error: cannot write output '{{.*}}no-such-dir/out.mlir': directory '{{.*}}no-such-dir' does not exist

// LIST:      Passes:
// LIST-DAG:  canonicalize {{.*}}[max-iterations=10]
// LIST-DAG:  cse
// LIST-DAG:  dce

func.func @f() {
  func.return
}
