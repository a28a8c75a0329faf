// RUN: %roundtrip %s | FileCheck %s
// RUN: %spmdc-opt %s --print-op-generic | %spmdc-opt | FileCheck %s

// One type when every operand and result has it, a function type otherwise.
// CHECK-LABEL: func.func @binary_ops(
// CHECK:         %[[ADD:.*]] = tensor.add %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %[[SUB:.*]] = tensor.sub %[[ADD]], %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[MUL:.*]] = tensor.mul %[[SUB]], %s : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %[[DIV:.*]] = tensor.div %[[MUL]], %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[MAX:.*]] = tensor.maximum %[[DIV]], %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[MIN:.*]] = tensor.minimum %[[MAX]], %a : tensor<8x16xf32>
// CHECK-NEXT:    func.return %[[MIN]] : tensor<8x16xf32>
func.func @binary_ops(%a: tensor<8x16xf32>, %b: tensor<16xf32>, %s: tensor<f32>) -> tensor<8x16xf32> {
  %0 = tensor.add %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %1 = tensor.sub %0, %a : tensor<8x16xf32>
  %2 = tensor.mul %1, %s : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
  %3 = tensor.div %2, %a : tensor<8x16xf32>
  %4 = tensor.maximum %3, %a : tensor<8x16xf32>
  %5 = tensor.minimum %4, %a : tensor<8x16xf32>
  func.return %5 : tensor<8x16xf32>
}

// Both operands broadcast (4x1 and 1x8 give 4x8); a function type in the custom form
// equal to the single-type form prints as the single type.
// CHECK-LABEL: func.func @broadcasting_binary(
// CHECK:         %[[R:.*]] = tensor.add %x, %y : (tensor<4x1xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[Z:.*]] = tensor.sub %z, %z : tensor<2xi64>
func.func @broadcasting_binary(%x: tensor<4x1xf32>, %y: tensor<1x8xf32>, %z: tensor<2xi64>) -> tensor<4x8xf32> {
  %0 = tensor.add %x, %y : (tensor<4x1xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %1 = tensor.sub %z, %z : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  func.return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @unary_ops(
// CHECK:         %[[NEG:.*]] = tensor.neg %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[EXP:.*]] = tensor.exp %[[NEG]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[LOG:.*]] = tensor.log %[[EXP]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[SQRT:.*]] = tensor.sqrt %[[LOG]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[RSQRT:.*]] = tensor.rsqrt %[[SQRT]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[TANH:.*]] = tensor.tanh %[[RSQRT]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[RELU:.*]] = tensor.relu %[[TANH]] : tensor<8x16xf32>
// CHECK-NEXT:    func.return %[[RELU]] : tensor<8x16xf32>
func.func @unary_ops(%a: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = tensor.neg %a : tensor<8x16xf32>
  %1 = tensor.exp %0 : tensor<8x16xf32>
  %2 = tensor.log %1 : tensor<8x16xf32>
  %3 = tensor.sqrt %2 : tensor<8x16xf32>
  %4 = tensor.rsqrt %3 : tensor<8x16xf32>
  %5 = tensor.tanh %4 : tensor<8x16xf32>
  %6 = tensor.relu %5 : tensor<8x16xf32>
  func.return %6 : tensor<8x16xf32>
}

// neg and relu also take integer tensors; rank-0 tensors are fine.
// CHECK-LABEL: func.func @integer_unary_ops(
// CHECK:         %[[N:.*]] = tensor.neg %i : tensor<4xi32>
// CHECK-NEXT:    %[[R:.*]] = tensor.relu %[[N]] : tensor<4xi32>
// CHECK-NEXT:    %[[E:.*]] = tensor.exp %s : tensor<bf16>
func.func @integer_unary_ops(%i: tensor<4xi32>, %s: tensor<bf16>) -> tensor<4xi32> {
  %0 = tensor.neg %i : tensor<4xi32>
  %1 = tensor.relu %0 : tensor<4xi32>
  %2 = tensor.exp %s : tensor<bf16>
  func.return %1 : tensor<4xi32>
}

// CHECK-LABEL: func.func @cast(
// CHECK:         %[[H:.*]] = tensor.cast %a : (tensor<8x16xf32>) -> tensor<8x16xbf16>
// CHECK-NEXT:    %[[B:.*]] = tensor.cast %[[H]] : (tensor<8x16xbf16>) -> tensor<8x16xi1>
// CHECK-NEXT:    %[[S:.*]] = tensor.cast %a : tensor<8x16xf32>
func.func @cast(%a: tensor<8x16xf32>) -> tensor<8x16xi1> {
  %0 = tensor.cast %a : (tensor<8x16xf32>) -> tensor<8x16xbf16>
  %1 = tensor.cast %0 : (tensor<8x16xbf16>) -> tensor<8x16xi1>
  %2 = tensor.cast %a : tensor<8x16xf32>
  func.return %1 : tensor<8x16xi1>
}

// keepdim defaults to false and is only printed when given.
// CHECK-LABEL: func.func @reductions(
// CHECK:         %[[SUM:.*]] = tensor.sum %a {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %[[MAX:.*]] = tensor.max %a {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
// CHECK-NEXT:    %[[MEAN:.*]] = tensor.mean %a {dims = [0, 1]} : (tensor<8x16xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[ALL:.*]] = tensor.sum %a {dims = [0, 1], keepdim = true} : (tensor<8x16xf32>) -> tensor<1x1xf32>
// CHECK-NEXT:    %[[NONE:.*]] = tensor.sum %a {dims = []} : tensor<8x16xf32>
func.func @reductions(%a: tensor<8x16xf32>) -> tensor<8xf32> {
  %0 = tensor.sum %a {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>
  %1 = tensor.max %a {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
  %2 = tensor.mean %a {dims = [0, 1]} : (tensor<8x16xf32>) -> tensor<f32>
  %3 = tensor.sum %a {keepdim = true, dims = [0, 1]} : (tensor<8x16xf32>) -> tensor<1x1xf32>
  %4 = tensor.sum %a {dims = []} : tensor<8x16xf32>
  func.return %0 : tensor<8xf32>
}

// CHECK-LABEL: func.func @shape_ops(
// CHECK:         %[[P:.*]] = tensor.permute %a {perm = [1, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>
// CHECK-NEXT:    %[[R:.*]] = tensor.reshape %[[P]] : (tensor<16x8xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT:    %[[B:.*]] = tensor.broadcast %b : (tensor<16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %[[B1:.*]] = tensor.broadcast %c : (tensor<4x1xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %[[P3:.*]] = tensor.permute %[[R]] {perm = [2, 0, 1]} : (tensor<2x8x8xf32>) -> tensor<8x2x8xf32>
// CHECK-NEXT:    %[[R0:.*]] = tensor.reshape %s : (tensor<f32>) -> tensor<1x1xf32>
func.func @shape_ops(%a: tensor<8x16xf32>, %b: tensor<16xf32>, %c: tensor<4x1xf32>, %s: tensor<f32>) -> tensor<2x8x8xf32> {
  %0 = tensor.permute %a {perm = [1, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %1 = tensor.reshape %0 : (tensor<16x8xf32>) -> tensor<2x8x8xf32>
  %2 = tensor.broadcast %b : (tensor<16xf32>) -> tensor<8x16xf32>
  %3 = tensor.broadcast %c : (tensor<4x1xf32>) -> tensor<2x4x8xf32>
  %4 = tensor.permute %1 {perm = [2, 0, 1]} : (tensor<2x8x8xf32>) -> tensor<8x2x8xf32>
  %5 = tensor.reshape %s : (tensor<f32>) -> tensor<1x1xf32>
  func.return %1 : tensor<2x8x8xf32>
}

// CHECK-LABEL: func.func @matmul_2d_and_batched(
// CHECK:         %[[MM:.*]] = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %[[BMM:.*]] = tensor.matmul %q, %k : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:    %[[BC:.*]] = tensor.matmul %q, %b : (tensor<2x4x8x16xf32>, tensor<16x32xf32>) -> tensor<2x4x8x32xf32>
// CHECK-NEXT:    %[[BB:.*]] = tensor.matmul %l, %r : (tensor<3x1x8x16xf32>, tensor<5x16x4xf32>) -> tensor<3x5x8x4xf32>
func.func @matmul_2d_and_batched(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>, %q: tensor<2x4x8x16xf32>,
                                 %k: tensor<2x4x16x8xf32>, %l: tensor<3x1x8x16xf32>, %r: tensor<5x16x4xf32>) -> tensor<8x32xf32> {
  %0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %1 = tensor.matmul %q, %k : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %2 = tensor.matmul %q, %b : (tensor<2x4x8x16xf32>, tensor<16x32xf32>) -> tensor<2x4x8x32xf32>
  %3 = tensor.matmul %l, %r : (tensor<3x1x8x16xf32>, tensor<5x16x4xf32>) -> tensor<3x5x8x4xf32>
  func.return %0 : tensor<8x32xf32>
}

// A list of equal values is stored and printed as a splat.
// CHECK-LABEL: func.func @dense_splat_constants(
// CHECK:         tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
// CHECK-NEXT:    tensor.constant {value = dense<1.0> : tensor<2xf32>} : tensor<2xf32>
// CHECK-NEXT:    tensor.constant {value = dense<0.0> : tensor<4x8x16xf32>} : tensor<4x8x16xf32>
// CHECK-NEXT:    tensor.constant {value = dense<2.5> : tensor<f32>} : tensor<f32>
// CHECK-NEXT:    tensor.constant {value = dense<-3> : tensor<2x2xi64>} : tensor<2x2xi64>
// CHECK-NEXT:    tensor.constant {value = dense<true> : tensor<3xi1>} : tensor<3xi1>
// CHECK-NEXT:    tensor.constant {value = dense<2.0> : tensor<2xbf16>} : tensor<2xbf16>
func.func @dense_splat_constants() -> tensor<4xf32> {
  %0 = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
  %1 = tensor.constant {value = dense<[1.0, 1.0]> : tensor<2xf32>} : tensor<2xf32>
  %2 = tensor.constant {value = dense<0.0> : tensor<4x8x16xf32>} : tensor<4x8x16xf32>
  %3 = tensor.constant {value = dense<2.5> : tensor<f32>} : tensor<f32>
  %4 = tensor.constant {value = dense<-3> : tensor<2x2xi64>} : tensor<2x2xi64>
  %5 = tensor.constant {value = dense<true> : tensor<3xi1>} : tensor<3xi1>
  %6 = tensor.constant {value = dense<2> : tensor<2xbf16>} : tensor<2xbf16>
  func.return %0 : tensor<4xf32>
}

// Nested literals keep their shape; floats print with the shortest exact text.
// CHECK-LABEL: func.func @dense_nested_constants(
// CHECK:         tensor.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>} : tensor<2x3xi32>
// CHECK-NEXT:    tensor.constant {value = dense<{{\[\[\[}}1.0], [2.0]]]> : tensor<1x2x1xf32>} : tensor<1x2x1xf32>
// CHECK-NEXT:    tensor.constant {value = dense<[true, false]> : tensor<2xi1>} : tensor<2xi1>
// CHECK-NEXT:    tensor.constant {value = dense<[inf, -inf, nan, 1.5e-10]> : tensor<4xf32>} : tensor<4xf32>
// CHECK-NEXT:    tensor.constant {value = dense<[0.1, -2.0]> : tensor<2xf64>} : tensor<2xf64>
// CHECK-NEXT:    tensor.constant {value = dense<[5.0]> : tensor<1xf32>} : tensor<1xf32>
// CHECK-NEXT:    tensor.constant {value = dense<[]> : tensor<0xf32>} : tensor<0xf32>
// CHECK-NEXT:    tensor.constant {value = dense<nan> : tensor<2xf32>} : tensor<2xf32>
func.func @dense_nested_constants() -> tensor<2x3xi32> {
  %0 = tensor.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>} : tensor<2x3xi32>
  %1 = tensor.constant {value = dense<[[[1.0], [2.0]]]> : tensor<1x2x1xf32>} : tensor<1x2x1xf32>
  %2 = tensor.constant {value = dense<[true, false]> : tensor<2xi1>} : tensor<2xi1>
  %3 = tensor.constant {value = dense<[inf, -inf, nan, 1.5e-10]> : tensor<4xf32>} : tensor<4xf32>
  %4 = tensor.constant {value = dense<[0.1, -2]> : tensor<2xf64>} : tensor<2xf64>
  %5 = tensor.constant {value = dense<5.0> : tensor<1xf32>} : tensor<1xf32>
  %6 = tensor.constant {value = dense<[]> : tensor<0xf32>} : tensor<0xf32>
  %7 = tensor.constant {value = dense<[nan, nan]> : tensor<2xf32>} : tensor<2xf32>
  func.return %0 : tensor<2x3xi32>
}

// Result shardings and other discardable attributes print in the attribute dictionary.
// CHECK-LABEL: func.func @result_sharding_attribute(
// CHECK:         %[[E:.*]] = tensor.exp %x {shard.sharding = [#shard<@mesh, [S(0)]>], spmdc.tag = "hot"} : tensor<8xf32>
shard.mesh @mesh = <["tp" = 2]>
func.func @result_sharding_attribute(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = tensor.exp %x {spmdc.tag = "hot", shard.sharding = [#shard<@mesh, [S(0)]>]} : tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// The generic form of every tensor op prints in its custom form.
// CHECK-LABEL: func.func @generic_forms(
// CHECK:         %[[ADD:.*]] = tensor.add %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %[[SUB:.*]] = tensor.sub %[[ADD]], %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[MUL:.*]] = tensor.mul %[[SUB]], %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[DIV:.*]] = tensor.div %[[MUL]], %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[MAX:.*]] = tensor.maximum %[[DIV]], %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[MIN:.*]] = tensor.minimum %[[MAX]], %a : tensor<8x16xf32>
// CHECK-NEXT:    %[[NEG:.*]] = tensor.neg %[[MIN]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[EXP:.*]] = tensor.exp %[[NEG]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[LOG:.*]] = tensor.log %[[EXP]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[SQRT:.*]] = tensor.sqrt %[[LOG]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[RSQRT:.*]] = tensor.rsqrt %[[SQRT]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[TANH:.*]] = tensor.tanh %[[RSQRT]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[RELU:.*]] = tensor.relu %[[TANH]] : tensor<8x16xf32>
// CHECK-NEXT:    %[[CAST:.*]] = tensor.cast %[[RELU]] : (tensor<8x16xf32>) -> tensor<8x16xf16>
// CHECK-NEXT:    %[[SUM:.*]] = tensor.sum %a {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
// CHECK-NEXT:    %[[RMAX:.*]] = tensor.max %a {dims = [0]} : (tensor<8x16xf32>) -> tensor<16xf32>
// CHECK-NEXT:    %[[MEAN:.*]] = tensor.mean %a {dims = [0, 1]} : (tensor<8x16xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[PERM:.*]] = tensor.permute %a {perm = [1, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>
// CHECK-NEXT:    %[[RESH:.*]] = tensor.reshape %[[PERM]] : (tensor<16x8xf32>) -> tensor<128xf32>
// CHECK-NEXT:    %[[BCAST:.*]] = tensor.broadcast %b : (tensor<16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %[[CST:.*]] = tensor.constant {value = dense<[1.0, 2.0]> : tensor<2xf32>} : tensor<2xf32>
// CHECK-NEXT:    %[[MM:.*]] = tensor.matmul %a, %[[PERM]] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT:    func.return %[[MM]] : tensor<8x8xf32>
func.func @generic_forms(%a: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<8x8xf32> {
  %0 = "tensor.add"(%a, %b) : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %1 = "tensor.sub"(%0, %a) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = "tensor.mul"(%1, %a) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %3 = "tensor.div"(%2, %a) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %4 = "tensor.maximum"(%3, %a) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %5 = "tensor.minimum"(%4, %a) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %6 = "tensor.neg"(%5) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %7 = "tensor.exp"(%6) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %8 = "tensor.log"(%7) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %9 = "tensor.sqrt"(%8) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %10 = "tensor.rsqrt"(%9) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %11 = "tensor.tanh"(%10) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %12 = "tensor.relu"(%11) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %13 = "tensor.cast"(%12) : (tensor<8x16xf32>) -> tensor<8x16xf16>
  %14 = "tensor.sum"(%a) {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
  %15 = "tensor.max"(%a) {dims = [0]} : (tensor<8x16xf32>) -> tensor<16xf32>
  %16 = "tensor.mean"(%a) {dims = [0, 1]} : (tensor<8x16xf32>) -> tensor<f32>
  %17 = "tensor.permute"(%a) {perm = [1, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %18 = "tensor.reshape"(%17) : (tensor<16x8xf32>) -> tensor<128xf32>
  %19 = "tensor.broadcast"(%b) : (tensor<16xf32>) -> tensor<8x16xf32>
  %20 = "tensor.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %21 = "tensor.matmul"(%a, %17) : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  func.return %21 : tensor<8x8xf32>
}

// The newer ops are checked in ops_{activation,compare,index,nn}.mlir; the cases
// below are the ones those files do not cover.

// An integer bound on a float tensor; abs of integers.
// CHECK-LABEL: func.func @clamp_integer_bound_and_integer_abs(
// CHECK:         %[[V0:.*]] = tensor.clamp %x {min = -1} : tensor<8x16xf32>
// CHECK-NEXT:    %[[V1:.*]] = tensor.abs %i : tensor<8xi64>
// CHECK-NEXT:    func.return %[[V0]], %[[V1]] : tensor<8x16xf32>, tensor<8xi64>
func.func @clamp_integer_bound_and_integer_abs(%x: tensor<8x16xf32>, %i: tensor<8xi64>) -> (tensor<8x16xf32>, tensor<8xi64>) {
  %0 = tensor.clamp %x {min = -1} : tensor<8x16xf32>
  %1 = tensor.abs %i : tensor<8xi64>
  func.return %0, %1 : tensor<8x16xf32>, tensor<8xi64>
}

// and/or/xor are bitwise on integers and broadcast like the arithmetic ops.
// CHECK-LABEL: func.func @bitwise_and_broadcast(
// CHECK:         %[[BITS:.*]] = tensor.and %a, %b : (tensor<8x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi64>
func.func @bitwise_and_broadcast(%a: tensor<8x8xi64>, %b: tensor<8x1xi64>) -> tensor<8x8xi64> {
  %0 = tensor.and %a, %b : (tensor<8x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi64>
  func.return %0 : tensor<8x8xi64>
}

// 'correction' of var may be a float; keepdim is only printed when given.
// CHECK-LABEL: func.func @var_float_correction(
// CHECK:         %[[V0:.*]] = tensor.var %z {correction = 1.5, dims = [0, 2]} : (tensor<2x8x32xf32>) -> tensor<8xf32>
func.func @var_float_correction(%z: tensor<2x8x32xf32>) -> tensor<8xf32> {
  %0 = tensor.var %z {correction = 1.5, dims = [0, 2]} : (tensor<2x8x32xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// A strided slice of 0..7 by 3 has 3 elements; concat takes any number of operands.
// CHECK-LABEL: func.func @strided_slice_and_concat(
// CHECK:         %[[V0:.*]] = tensor.slice %x {dim = 1, end = 8, start = 4, step = 1} : (tensor<2x8xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %[[V1:.*]] = tensor.slice %x {dim = 1, end = 7, start = 0, step = 3} : (tensor<2x8xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %[[V2:.*]] = tensor.concat %[[V0]], %[[V1]], %[[V0]] {dim = 1} : (tensor<2x4xf32>, tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x11xf32>
// CHECK-NEXT:    %[[V3:.*]] = tensor.concat %x {dim = 0} : tensor<2x8xf32>
// CHECK-NEXT:    func.return %[[V2]], %[[V3]] : tensor<2x11xf32>, tensor<2x8xf32>
func.func @strided_slice_and_concat(%x: tensor<2x8xf32>) -> (tensor<2x11xf32>, tensor<2x8xf32>) {
  %0 = tensor.slice %x {dim = 1, end = 8, start = 4, step = 1} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %1 = tensor.slice %x {dim = 1, end = 7, start = 0, step = 3} : (tensor<2x8xf32>) -> tensor<2x3xf32>
  %2 = tensor.concat %0, %1, %0 {dim = 1} : (tensor<2x4xf32>, tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x11xf32>
  %3 = tensor.concat %x {dim = 0} : tensor<2x8xf32>
  func.return %2, %3 : tensor<2x11xf32>, tensor<2x8xf32>
}
