// RUN: %spmdc-opt %s -p 'spmd-pipeline' | FileCheck %s
// RUN: %spmdc-opt %s -p 'spmd-pipeline' --print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=DUMP
// RUN: %spmdc-opt %s -p 'spmd-pipeline{rank=1 target=triton}' | FileCheck %s --check-prefix=TRITON
// RUN: %spmdc-opt %s -p 'spmd-pipeline{rank=1 target=triton}' --print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=STAGES

// Megatron MLP on 2 ranks, whole pipeline: column-parallel then row-parallel needs one
// all_reduce and nothing else; rank 0's program has local shapes.
shard.mesh @mesh = <["tp" = 2]>

// CHECK-LABEL: func.func @megatron_mlp
// CHECK-SAME: %w1: tensor<16x16xf32> {shard.sharding = #shard<@mesh, [S(1)]>}
// CHECK-SAME: attributes {spmdc.rank = 0}
// CHECK: %[[H:.*]] = tensor.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[Y:.*]] = tensor.matmul {{.*}} : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %[[R:.*]] = comm.all_reduce %[[Y]] {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>
// CHECK-NEXT: func.return %[[R]]
// CHECK-NOT: comm.
func.func @megatron_mlp(%x: tensor<8x16xf32>,
                        %w1: tensor<16x32xf32> {shard.sharding = #shard<@mesh, [S(1)]>},
                        %w2: tensor<32x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>})
    -> (tensor<8x16xf32> {shard.sharding = #shard<@mesh, [R]>}) {
  %h = tensor.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a = tensor.relu %h : tensor<8x32xf32>
  %y = tensor.matmul %a, %w2 : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}

// The stages of spmdc.compiler.pass_pipeline, in order: prepare, global, rank (then
// bucketing and kernels when asked for).
// DUMP: // -----// IR Dump After canonicalize //----- //
// DUMP: // -----// IR Dump After cse //----- //
// DUMP: // -----// IR Dump After sharding-propagation //----- //
// DUMP: // -----// IR Dump After insert-redistribution //----- //
// DUMP: shard.redistribute
// DUMP: // -----// IR Dump After lower-redistribution //----- //
// DUMP: // -----// IR Dump After partition //----- //
// DUMP: // -----// IR Dump After fuse-collectives //----- //

// Rank 1's program for the Triton target: the relu becomes one kernel region.
// TRITON-LABEL: func.func @megatron_mlp
// TRITON-SAME: attributes {spmdc.rank = 1}
// TRITON: kernel.fused %h {kind = "elementwise"}
// TRITON: tensor.relu
// TRITON: kernel.yield
// TRITON: comm.all_reduce

// STAGES: // -----// IR Dump After partition{rank=1} //----- //
// STAGES: // -----// IR Dump After fuse-collectives //----- //
// STAGES: // -----// IR Dump After fuse-kernels //----- //
// STAGES-NOT: IR Dump After bucket-collectives
