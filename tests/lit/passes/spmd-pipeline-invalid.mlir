// RUN: not %spmdc-opt %s -p 'spmd-pipeline{rank=1}' 2>&1 | FileCheck %s --check-prefix=PIPELINE-OPTION

// A named pipeline takes no options: to partition for another rank, spell the
// pipeline out with 'partition{rank=1}'. The message today wrongly calls it an
// unknown pass and suggests the same name back, so only its subject is checked.
// PIPELINE-OPTION: spmdc-opt: error: {{.*}}'spmd-pipeline'
// PIPELINE-OPTION-NOT: module

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
