// RUN: %roundtrip %s | FileCheck %s

// split_with_sizes becomes slices; slices may stride.
// CHECK-LABEL: func.func @slice_and_concat(
// CHECK:         %[[Q:.*]] = tensor.slice %qkv {dim = 2, end = 32, start = 0, step = 1} : (tensor<2x8x96xf32>) -> tensor<2x8x32xf32>
// CHECK-NEXT:    %[[K:.*]] = tensor.slice %qkv {dim = 2, end = 64, start = 32, step = 1} : (tensor<2x8x96xf32>) -> tensor<2x8x32xf32>
// CHECK-NEXT:    %[[EVEN:.*]] = tensor.slice %qkv {dim = 1, end = 8, start = 0, step = 2} : (tensor<2x8x96xf32>) -> tensor<2x4x96xf32>
// CHECK-NEXT:    %[[CAT:.*]] = tensor.concat %[[Q]], %[[K]] {dim = 2} : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
func.func @slice_and_concat(%qkv: tensor<2x8x96xf32>) -> (tensor<2x8x64xf32>, tensor<2x4x96xf32>) {
  %q = tensor.slice %qkv {dim = 2, end = 32, start = 0, step = 1} : (tensor<2x8x96xf32>) -> tensor<2x8x32xf32>
  %k = tensor.slice %qkv {dim = 2, end = 64, start = 32, step = 1} : (tensor<2x8x96xf32>) -> tensor<2x8x32xf32>
  %e = tensor.slice %qkv {dim = 1, end = 8, start = 0, step = 2} : (tensor<2x8x96xf32>) -> tensor<2x4x96xf32>
  %c = tensor.concat %q, %k {dim = 2} : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
  func.return %c, %e : tensor<2x8x64xf32>, tensor<2x4x96xf32>
}

// The backward of a slice writes into zeros; padding may also crop (negative amounts).
// CHECK-LABEL: func.func @insert_slice_and_pad(
// CHECK:         %[[INS:.*]] = tensor.insert_slice %z, %g {dim = 1, end = 8, start = 4, step = 1} : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    %[[PAD:.*]] = tensor.pad %labels {high = [0, 1], low = [0, 0], value = -100} : (tensor<2x8xi64>) -> tensor<2x9xi64>
// CHECK-NEXT:    %[[CROP:.*]] = tensor.pad %z {high = [0, -2], low = [1, 0], value = 0.0} : (tensor<2x8xf32>) -> tensor<3x6xf32>
func.func @insert_slice_and_pad(%z: tensor<2x8xf32>, %g: tensor<2x4xf32>, %labels: tensor<2x8xi64>) -> (tensor<2x8xf32>, tensor<2x9xi64>, tensor<3x6xf32>) {
  %0 = tensor.insert_slice %z, %g {dim = 1, end = 8, start = 4, step = 1} : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %1 = tensor.pad %labels {high = [0, 1], low = [0, 0], value = -100} : (tensor<2x8xi64>) -> tensor<2x9xi64>
  %2 = tensor.pad %z {high = [0, -2], low = [1, 0], value = 0.0} : (tensor<2x8xf32>) -> tensor<3x6xf32>
  func.return %0, %1, %2 : tensor<2x8xf32>, tensor<2x9xi64>, tensor<3x6xf32>
}

// Embedding forward and its backward (index_put with accumulation); cross-entropy's
// gather/scatter pair.
// CHECK-LABEL: func.func @embedding_and_backward(
// CHECK:         %[[E:.*]] = tensor.embedding %w, %ids : (tensor<64x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
// CHECK-NEXT:    %[[DW:.*]] = tensor.index_put %w, %ids, %[[E]] {accumulate = true} : (tensor<64x32xf32>, tensor<2x8xi64>, tensor<2x8x32xf32>) -> tensor<64x32xf32>
// CHECK-NEXT:    %[[G:.*]] = tensor.gather %logits, %t {dim = 1} : (tensor<16x64xf32>, tensor<16x1xi64>) -> tensor<16x1xf32>
// CHECK-NEXT:    %[[S:.*]] = tensor.scatter %logits, %t, %[[G]] {dim = 1} : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf32>) -> tensor<16x64xf32>
// CHECK-NEXT:    %[[SA:.*]] = tensor.scatter %logits, %t, %[[G]] {dim = 1, reduce = "add"} : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf32>) -> tensor<16x64xf32>
func.func @embedding_and_backward(%w: tensor<64x32xf32>, %ids: tensor<2x8xi64>, %logits: tensor<16x64xf32>, %t: tensor<16x1xi64>) -> (tensor<64x32xf32>, tensor<16x64xf32>, tensor<16x64xf32>) {
  %0 = tensor.embedding %w, %ids : (tensor<64x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
  %1 = tensor.index_put %w, %ids, %0 {accumulate = true} : (tensor<64x32xf32>, tensor<2x8xi64>, tensor<2x8x32xf32>) -> tensor<64x32xf32>
  %2 = tensor.gather %logits, %t {dim = 1} : (tensor<16x64xf32>, tensor<16x1xi64>) -> tensor<16x1xf32>
  %3 = tensor.scatter %logits, %t, %2 {dim = 1} : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf32>) -> tensor<16x64xf32>
  %4 = tensor.scatter %logits, %t, %2 {dim = 1, reduce = "add"} : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf32>) -> tensor<16x64xf32>
  func.return %1, %3, %4 : tensor<64x32xf32>, tensor<16x64xf32>, tensor<16x64xf32>
}

// Advanced indexing of the two leading dims by broadcast index tensors.
// CHECK-LABEL: func.func @advanced_index(
// CHECK:         %[[R:.*]] = tensor.index %x, %i, %j : (tensor<2x8x4xf32>, tensor<2x1xi64>, tensor<1x8xi64>) -> tensor<2x8x4xf32>
// CHECK-NEXT:    %[[P:.*]] = tensor.index_put %x, %i, %j, %v : (tensor<2x8x4xf32>, tensor<2x1xi64>, tensor<1x8xi64>, tensor<4xf32>) -> tensor<2x8x4xf32>
func.func @advanced_index(%x: tensor<2x8x4xf32>, %i: tensor<2x1xi64>, %j: tensor<1x8xi64>, %v: tensor<4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x4xf32>) {
  %0 = tensor.index %x, %i, %j : (tensor<2x8x4xf32>, tensor<2x1xi64>, tensor<1x8xi64>) -> tensor<2x8x4xf32>
  %1 = tensor.index_put %x, %i, %j, %v : (tensor<2x8x4xf32>, tensor<2x1xi64>, tensor<1x8xi64>, tensor<4xf32>) -> tensor<2x8x4xf32>
  func.return %0, %1 : tensor<2x8x4xf32>, tensor<2x8x4xf32>
}

// flip (the backward of cumsum reverses, scans and reverses back).
// CHECK-LABEL: func.func @reverse_dims(
// CHECK:         %[[R:.*]] = tensor.reverse %x {dims = [0, 2]} : tensor<2x3x4xf32>
func.func @reverse_dims(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = tensor.reverse %x {dims = [0, 2]} : tensor<2x3x4xf32>
  func.return %0 : tensor<2x3x4xf32>
}
