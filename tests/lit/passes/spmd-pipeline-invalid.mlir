// RUN: not %spmdc-opt %s -p 'spmd-pipeline{rnk=1}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OPTION
// RUN: not %spmdc-opt %s -p 'spmd-pipeline{target=cuda}' 2>&1 | FileCheck %s --check-prefix=BAD-TARGET
// RUN: not %spmdc-opt %s -p 'spmd-pipeline{rank}' 2>&1 | FileCheck %s --check-prefix=NO-VALUE

// The named pipeline takes options (rank, bucket, target); mistakes in them are
// reported before the input is read, naming the pipeline.

// A misspelt option; the message lists the real ones.
// UNKNOWN-OPTION: spmdc-opt: error: pipeline 'spmd-pipeline' has no option 'rnk' (options: rank, bucket, overlap, memory-cap, target, rng, fuse, suspend, capacity-factor, in-place, remat)
// UNKNOWN-OPTION-NOT: module

// The codegen target is torch or triton (cuda is a device, not a target).
// BAD-TARGET: spmdc-opt: error: unknown codegen target 'cuda' (choices: torch, triton)

// An option without its value.
// NO-VALUE: spmdc-opt: error: option 'rank' of pipeline 'spmd-pipeline' needs a value (rank=<int>)

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
