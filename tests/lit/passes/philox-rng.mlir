// RUN: %spmdc-opt %s -p philox-rng | FileCheck %s
// RUN: %spmdc-opt %s -p philox-rng,philox-rng | FileCheck %s
// RUN: %spmdc-opt %s -p 'philox-rng,sharding-propagation,partition{rank=1}' | FileCheck %s --check-prefix=RANK1

shard.mesh @mesh = <["tp" = 2]>

// One seed per function, one stream per random op, in program order.
// CHECK-LABEL: func.func @dropout(
// CHECK:         %[[SEED:.*]] = tensor.rng_seed : tensor<i64>
// CHECK-NEXT:    %[[M:.*]] = tensor.random %[[SEED]] {distribution = "bernoulli", p = 0.9, stream = 0} : (tensor<i64>) -> tensor<8x16xf32>
// CHECK:         tensor.random %[[SEED]] {distribution = "normal", mean = 0.0, std = 1.0, stream = 1} : (tensor<i64>) -> tensor<8x16xf32>
// CHECK-NOT:     tensor.rng_seed
// A rank draws its piece: the global shape and where its piece starts.
// RANK1:         tensor.random %{{.*}} {distribution = "bernoulli", global_shape = [8, 16], offset = [4, 0], p = 0.9, stream = 0} : (tensor<i64>) -> tensor<4x16xf32>
func.func @dropout(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<8x16xf32> {
  %m = tensor.random {distribution = "bernoulli", p = 0.9} : tensor<8x16xf32>
  %y = tensor.mul %x, %m : tensor<8x16xf32>
  %n = tensor.random {distribution = "normal", mean = 0.0, std = 1.0} : tensor<8x16xf32>
  %z = tensor.add %y, %n : tensor<8x16xf32>
  func.return %z : tensor<8x16xf32>
}

// Functions without random ops are left alone.
// CHECK-LABEL: func.func @deterministic(
// CHECK-NOT:     tensor.rng_seed
func.func @deterministic(%x: tensor<8xf32>) -> tensor<8xf32> {
  func.return %x : tensor<8xf32>
}
