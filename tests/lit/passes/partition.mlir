// RUN: %spmdc-opt %s -p 'sharding-propagation,insert-redistribution,lower-redistribution,partition{rank=1}' | FileCheck %s
// RUN: not %spmdc-opt %s -p 'partition{rank=7}' 2>&1 | FileCheck %s --check-prefix=BADRANK

shard.mesh @mesh = <["dp" = 2, "tp" = 2]>

// Local shapes: rank 1 is (dp=0, tp=1). Uneven: 5 rows over dp -> 3 on dp=0.
// CHECK-LABEL: func.func @local_shapes
// CHECK-SAME: %x: tensor<3x8xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}
// CHECK-SAME: %w: tensor<8x2xf32> {shard.sharding = #shard<@mesh, [R, S(1)]>}
// CHECK-SAME: attributes {spmdc.rank = 1, spmdc.uneven}
// CHECK: tensor.matmul %x, %w : (tensor<3x8xf32>, tensor<8x2xf32>) -> tensor<3x2xf32>
// CHECK-NOT: shard.sharding = [
// CHECK: func.return
func.func @local_shapes(%x: tensor<5x8xf32> {shard.sharding = #shard<@mesh, [S(0), R]>},
                        %w: tensor<8x4xf32> {shard.sharding = #shard<@mesh, [R, S(1)]>}) -> tensor<5x4xf32> {
  %0 = tensor.matmul %x, %w : (tensor<5x8xf32>, tensor<8x4xf32>) -> tensor<5x4xf32>
  func.return %0 : tensor<5x4xf32>
}

// Annotations vanish; reshapes and splat constants become local.
// CHECK-LABEL: func.func @annotate_reshape_constant
// CHECK-NOT: shard.annotate
// CHECK: tensor.constant {value = dense<2.0> : tensor<2x8xf32>} : tensor<2x8xf32>
// CHECK: tensor.reshape %{{.*}} : (tensor<2x8xf32>) -> tensor<2x2x4xf32>
func.func @annotate_reshape_constant(%x: tensor<4x8xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}) -> tensor<4x2x4xf32> {
  %0 = shard.annotate %x {sharding = #shard<@mesh, [S(0), R]>} : tensor<4x8xf32>
  %c = tensor.constant {value = dense<2.0> : tensor<4x8xf32>} : tensor<4x8xf32>
  %1 = tensor.mul %0, %c : tensor<4x8xf32>
  %2 = tensor.reshape %1 : (tensor<4x8xf32>) -> tensor<4x2x4xf32>
  func.return %2 : tensor<4x2x4xf32>
}

// BADRANK: error: 'func.func' op rank 7 is outside mesh '@mesh' (4 devices)
