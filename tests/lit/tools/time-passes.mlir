// RUN: %spmdc-opt %s -p canonicalize,cse,dce --time-passes 2>&1 >/dev/null | FileCheck %s
// RUN: %spmdc-opt %s -p cse --time-passes 2>/dev/null | FileCheck %s --check-prefix=STDOUT

// The report goes to stderr: one row per pass in pipeline order, then the total.
// CHECK:      ... Pass execution timing report ...
// CHECK:      Total Execution Time: {{[0-9]+\.[0-9]+}} seconds
// CHECK:      ----Wall Time----  ----Name----
// CHECK-NEXT: {{[0-9]+\.[0-9]+}} ({{ *[0-9]+\.[0-9]}}%)  canonicalize
// CHECK-NEXT: {{[0-9]+\.[0-9]+}} ({{ *[0-9]+\.[0-9]}}%)  cse
// CHECK-NEXT: {{[0-9]+\.[0-9]+}} ({{ *[0-9]+\.[0-9]}}%)  dce
// CHECK-NEXT: {{[0-9]+\.[0-9]+}} (100.0%)  Total

// STDOUT-NOT: Pass execution timing report
// STDOUT:     func.func @timed(

func.func @timed(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.exp %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
