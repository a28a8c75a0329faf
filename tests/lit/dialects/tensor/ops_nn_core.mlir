// RUN: %roundtrip %s | FileCheck %s

// Average pooling with padding, ceil_mode and count_include_pad = false, and its gradient;
// a 3-D pool with divisor_override.
// CHECK-LABEL: func.func @avg_pools(
// CHECK:         tensor.avg_pool %x {ceil_mode = true, count_include_pad = false, kernel = [3, 3], padding = [1, 1], stride = [2, 2]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x4xf32>
// CHECK-NEXT:    tensor.avg_pool_grad %dy {ceil_mode = true, count_include_pad = false, kernel = [3, 3], padding = [1, 1], stride = [2, 2]} : (tensor<2x3x4x4xf32>) -> tensor<2x3x6x6xf32>
// CHECK-NEXT:    tensor.avg_pool %v {divisor_override = 3, kernel = [2, 2, 2], padding = [0, 0, 0], stride = [2, 2, 2]} : (tensor<2x3x4x6x6xf32>) -> tensor<2x3x2x3x3xf32>
func.func @avg_pools(%x: tensor<2x3x6x6xf32>, %dy: tensor<2x3x4x4xf32>, %v: tensor<2x3x4x6x6xf32>)
    -> (tensor<2x3x4x4xf32>, tensor<2x3x6x6xf32>, tensor<2x3x2x3x3xf32>) {
  %0 = tensor.avg_pool %x {kernel = [3, 3], stride = [2, 2], padding = [1, 1], ceil_mode = true, count_include_pad = false} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x4xf32>
  %1 = tensor.avg_pool_grad %dy {kernel = [3, 3], stride = [2, 2], padding = [1, 1], ceil_mode = true, count_include_pad = false} : (tensor<2x3x4x4xf32>) -> tensor<2x3x6x6xf32>
  %2 = tensor.avg_pool %v {kernel = [2, 2, 2], stride = [2, 2, 2], padding = [0, 0, 0], divisor_override = 3} : (tensor<2x3x4x6x6xf32>) -> tensor<2x3x2x3x3xf32>
  func.return %0, %1, %2 : tensor<2x3x4x4xf32>, tensor<2x3x6x6xf32>, tensor<2x3x2x3x3xf32>
}

// Max pooling gives the maxima and their flat indices in each input plane (an unbatched 3-D pool
// with padding and ceil_mode too).
// CHECK-LABEL: func.func @max_pools(
// CHECK:         %[[V:.*]]:2 = tensor.max_pool %x {dilation = [1, 1], kernel = [2, 2], padding = [0, 0], stride = [2, 2]} : (tensor<2x3x6x6xf32>) -> (tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>)
// CHECK-NEXT:    %{{.*}}:2 = tensor.max_pool %u {ceil_mode = true, dilation = [1, 1, 1], kernel = [2, 2, 2], padding = [1, 1, 1], stride = [1, 2, 2]} : (tensor<3x4x6x6xf32>) -> (tensor<3x5x4x4xf32>, tensor<3x5x4x4xi64>)
func.func @max_pools(%x: tensor<2x3x6x6xf32>, %u: tensor<3x4x6x6xf32>)
    -> (tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>, tensor<3x5x4x4xf32>) {
  %v, %i = tensor.max_pool %x {kernel = [2, 2], stride = [2, 2], padding = [0, 0], dilation = [1, 1]} : (tensor<2x3x6x6xf32>) -> (tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>)
  %w, %j = tensor.max_pool %u {kernel = [2, 2, 2], stride = [1, 2, 2], padding = [1, 1, 1], dilation = [1, 1, 1], ceil_mode = true} : (tensor<3x4x6x6xf32>) -> (tensor<3x5x4x4xf32>, tensor<3x5x4x4xi64>)
  func.return %v, %i, %w : tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>, tensor<3x5x4x4xf32>
}

// Adaptive average pooling (overlapping windows of unequal size), its gradient, and 1-D.
// CHECK-LABEL: func.func @adaptive_pools(
// CHECK:         tensor.adaptive_avg_pool %x {output_size = [4, 5]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x5xf32>
// CHECK-NEXT:    tensor.adaptive_avg_pool_grad %dy {spatial_dims = 2} : (tensor<2x3x4x5xf32>) -> tensor<2x3x6x6xf32>
// CHECK-NEXT:    tensor.adaptive_avg_pool %r {output_size = [4]} : (tensor<2x3x6xf32>) -> tensor<2x3x4xf32>
func.func @adaptive_pools(%x: tensor<2x3x6x6xf32>, %dy: tensor<2x3x4x5xf32>, %r: tensor<2x3x6xf32>)
    -> (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x3x4xf32>) {
  %0 = tensor.adaptive_avg_pool %x {output_size = [4, 5]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x5xf32>
  %1 = tensor.adaptive_avg_pool_grad %dy {spatial_dims = 2} : (tensor<2x3x4x5xf32>) -> tensor<2x3x6x6xf32>
  %2 = tensor.adaptive_avg_pool %r {output_size = [4]} : (tensor<2x3x6xf32>) -> tensor<2x3x4xf32>
  func.return %0, %1, %2 : tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x3x4xf32>
}

// Nearest upsampling to a size, and with the caller's scale factors (which pick the source rows).
// CHECK-LABEL: func.func @upsample_nearest(
// CHECK:         tensor.upsample_nearest %x {output_size = [9, 4]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x9x4xf32>
// CHECK-NEXT:    tensor.upsample_nearest %x {output_size = [9, 4], scales = [1.5, 0.7]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x9x4xf32>
func.func @upsample_nearest(%x: tensor<2x3x6x6xf32>) -> (tensor<2x3x9x4xf32>, tensor<2x3x9x4xf32>) {
  %0 = tensor.upsample_nearest %x {output_size = [9, 4]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x9x4xf32>
  %1 = tensor.upsample_nearest %x {output_size = [9, 4], scales = [1.5, 0.7]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x9x4xf32>
  func.return %0, %1 : tensor<2x3x9x4xf32>, tensor<2x3x9x4xf32>
}

// Bilinear grid sampling with zero padding and its two gradients.
// CHECK-LABEL: func.func @grid_sample(
// CHECK:         tensor.grid_sample %x, %g {align_corners = false, interpolation_mode = 0, padding_mode = 0} : (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
// CHECK-NEXT:    %{{.*}}:2 = tensor.grid_sample_grad %dy, %x, %g {align_corners = true, interpolation_mode = 1, padding_mode = 1} : (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) -> (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>)
func.func @grid_sample(%x: tensor<2x3x6x6xf32>, %g: tensor<2x4x5x2xf32>, %dy: tensor<2x3x4x5xf32>)
    -> (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) {
  %0 = tensor.grid_sample %x, %g {interpolation_mode = 0, padding_mode = 0, align_corners = false} : (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
  %dx, %dg = tensor.grid_sample_grad %dy, %x, %g {interpolation_mode = 1, padding_mode = 1, align_corners = true} : (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) -> (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>)
  func.return %0, %dx, %dg : tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>
}

// Batched p-norm distances (p = inf, and the matrix-product Euclidean form) and the gradient.
// CHECK-LABEL: func.func @cdist(
// CHECK:         %[[D:[a-z]+]] = tensor.cdist %a, %b {p = inf} : (tensor<2x5x6xf32>, tensor<2x4x6xf32>) -> tensor<2x5x4xf32>
// CHECK-NEXT:    tensor.cdist_grad %g, %a, %b, %[[D]] {p = inf} : (tensor<2x5x4xf32>, tensor<2x5x6xf32>, tensor<2x4x6xf32>, tensor<2x5x4xf32>) -> tensor<2x5x6xf32>
// CHECK-NEXT:    tensor.cdist %a, %b {mm = true, p = 2.0} : (tensor<2x5x6xf32>, tensor<2x4x6xf32>) -> tensor<2x5x4xf32>
func.func @cdist(%a: tensor<2x5x6xf32>, %b: tensor<2x4x6xf32>, %g: tensor<2x5x4xf32>)
    -> (tensor<2x5x6xf32>, tensor<2x5x4xf32>) {
  %d = tensor.cdist %a, %b {p = inf} : (tensor<2x5x6xf32>, tensor<2x4x6xf32>) -> tensor<2x5x4xf32>
  %da = tensor.cdist_grad %g, %a, %b, %d {p = inf} : (tensor<2x5x4xf32>, tensor<2x5x6xf32>, tensor<2x4x6xf32>, tensor<2x5x4xf32>) -> tensor<2x5x6xf32>
  %e = tensor.cdist %a, %b {p = 2.0, mm = true} : (tensor<2x5x6xf32>, tensor<2x4x6xf32>) -> tensor<2x5x4xf32>
  func.return %da, %e : tensor<2x5x6xf32>, tensor<2x5x4xf32>
}

// Distances of every pair of rows (row-major pair order) and the gradient.
// CHECK-LABEL: func.func @pdist(
// CHECK:         %[[Q:[a-z]+]] = tensor.pdist %x {p = 1.5} : (tensor<5x6xf32>) -> tensor<10xf32>
// CHECK-NEXT:    tensor.pdist_grad %g, %x, %[[Q]] {p = 1.5} : (tensor<10xf32>, tensor<5x6xf32>, tensor<10xf32>) -> tensor<5x6xf32>
func.func @pdist(%x: tensor<5x6xf32>, %g: tensor<10xf32>) -> (tensor<10xf32>, tensor<5x6xf32>) {
  %q = tensor.pdist %x {p = 1.5} : (tensor<5x6xf32>) -> tensor<10xf32>
  %dx = tensor.pdist_grad %g, %x, %q {p = 1.5} : (tensor<10xf32>, tensor<5x6xf32>, tensor<10xf32>) -> tensor<5x6xf32>
  func.return %q, %dx : tensor<10xf32>, tensor<5x6xf32>
}

// Max-mode embedding bags (bag 1 is empty: zeros, index 0) with a padding index.
// CHECK-LABEL: func.func @embedding_bag_max(
// CHECK:         %{{.*}}:2 = tensor.embedding_bag_max %w, %{{.*}}, %{{.*}} {include_last_offset = false, padding_idx = 4} : (tensor<10x6xf32>, tensor<8xi64>, tensor<4xi64>) -> (tensor<4x6xf32>, tensor<4x6xi64>)
func.func @embedding_bag_max(%w: tensor<10x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xi64>) {
  %ids = tensor.constant {value = dense<[1, 4, 4, 0, 7, 2, 9, 3]> : tensor<8xi64>} : tensor<8xi64>
  %off = tensor.constant {value = dense<[0, 3, 3, 5]> : tensor<4xi64>} : tensor<4xi64>
  %o, %i = tensor.embedding_bag_max %w, %ids, %off {include_last_offset = false, padding_idx = 4} : (tensor<10x6xf32>, tensor<8xi64>, tensor<4xi64>) -> (tensor<4x6xf32>, tensor<4x6xi64>)
  func.return %o, %i : tensor<4x6xf32>, tensor<4x6xi64>
}
