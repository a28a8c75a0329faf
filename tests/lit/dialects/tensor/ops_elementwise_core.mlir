// RUN: %roundtrip %s | FileCheck %s
// RUN: %spmdc-opt %s --print-op-generic | %spmdc-opt | FileCheck %s

// The float math functions of Core ATen, each on the same input (NaN outside a domain).
// CHECK-LABEL: func.func @float_math(
// CHECK:         %[[TAN:.*]] = tensor.tan %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[SINH:.*]] = tensor.sinh %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[COSH:.*]] = tensor.cosh %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[ASIN:.*]] = tensor.asin %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[ACOS:.*]] = tensor.acos %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[ATAN:.*]] = tensor.atan %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[ASINH:.*]] = tensor.asinh %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[ACOSH:.*]] = tensor.acosh %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[ATANH:.*]] = tensor.atanh %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[EXPM1:.*]] = tensor.expm1 %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[LOG2:.*]] = tensor.log2 %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[LOG10:.*]] = tensor.log10 %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[B:.*]] = tensor.asinh %h : tensor<4xbf16>
func.func @float_math(%x: tensor<3x4xf32>, %h: tensor<4xbf16>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>) {
  %0 = tensor.tan %x : tensor<3x4xf32>
  %1 = tensor.sinh %x : tensor<3x4xf32>
  %2 = tensor.cosh %x : tensor<3x4xf32>
  %3 = tensor.asin %x : tensor<3x4xf32>
  %4 = tensor.acos %x : tensor<3x4xf32>
  %5 = tensor.atan %x : tensor<3x4xf32>
  %6 = tensor.asinh %x : tensor<3x4xf32>
  %7 = tensor.acosh %x : tensor<3x4xf32>
  %8 = tensor.atanh %x : tensor<3x4xf32>
  %9 = tensor.expm1 %x : tensor<3x4xf32>
  %10 = tensor.log2 %x : tensor<3x4xf32>
  %11 = tensor.log10 %x : tensor<3x4xf32>
  %12 = tensor.asinh %h : tensor<4xbf16>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>
}

// atan2 broadcasts like the other binary ops; the roundings keep the float type.
// CHECK-LABEL: func.func @atan2_and_roundings(
// CHECK:         %[[A:.*]] = tensor.atan2 %y, %x : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT:    %[[C:.*]] = tensor.ceil %[[A]] : tensor<3x4xf32>
// CHECK-NEXT:    %[[F:.*]] = tensor.floor %y : tensor<3x4xf32>
// CHECK-NEXT:    %[[T:.*]] = tensor.trunc %y : tensor<3x4xf32>
// CHECK-NEXT:    %[[R:.*]] = tensor.round %y : tensor<3x4xf32>
// CHECK-NEXT:    %[[RB:.*]] = tensor.round %h : tensor<4xbf16>
func.func @atan2_and_roundings(%y: tensor<3x4xf32>, %x: tensor<4xf32>, %h: tensor<4xbf16>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>) {
  %0 = tensor.atan2 %y, %x : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %1 = tensor.ceil %0 : tensor<3x4xf32>
  %2 = tensor.floor %y : tensor<3x4xf32>
  %3 = tensor.trunc %y : tensor<3x4xf32>
  %4 = tensor.round %y : tensor<3x4xf32>
  %5 = tensor.round %h : tensor<4xbf16>
  func.return %1, %2, %3, %4, %5 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>
}

// fmod (the dividend's sign) and remainder (the divisor's), on floats and integers (divisors 1..2),
// and the quotient's rounding modes of div.
// CHECK-LABEL: func.func @remainders_and_rounded_quotients(
// CHECK:         %[[FM:.*]] = tensor.fmod %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT:    %[[RM:.*]] = tensor.remainder %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
// CHECK:         %[[D:.*]] = tensor.add %j, %{{.*}} : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
// CHECK-NEXT:    %[[IFM:.*]] = tensor.fmod %i, %[[D]] : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
// CHECK-NEXT:    %[[IRM:.*]] = tensor.remainder %[[IFM]], %[[D]] : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
// CHECK-NEXT:    %[[TR:.*]] = tensor.div %a, %b {rounding_mode = "trunc"} : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT:    %[[FL:.*]] = tensor.div %a, %b {rounding_mode = "floor"} : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT:    %[[IFL:.*]] = tensor.div %i, %[[D]] {rounding_mode = "floor"} : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
func.func @remainders_and_rounded_quotients(%a: tensor<3x4xf32>, %b: tensor<4xf32>, %i: tensor<3x4xi64>, %j: tensor<4xi64>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>) {
  %0 = tensor.fmod %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %1 = tensor.remainder %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %one = tensor.constant {value = dense<1> : tensor<i64>} : tensor<i64>
  %d = tensor.add %j, %one : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  %2 = tensor.fmod %i, %d : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
  %3 = tensor.remainder %2, %d : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
  %4 = tensor.div %a, %b {rounding_mode = "trunc"} : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %5 = tensor.div %a, %b {rounding_mode = "floor"} : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %6 = tensor.div %i, %d {rounding_mode = "floor"} : (tensor<3x4xi64>, tensor<4xi64>) -> tensor<3x4xi64>
  func.return %0, %1, %3, %4, %5, %6 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>
}

// isinf and isnan test float elements and give i1.
// CHECK-LABEL: func.func @float_tests(
// CHECK:         %[[D:.*]] = tensor.div %x, %x : tensor<4xf32>
// CHECK-NEXT:    %[[INF:.*]] = tensor.isinf %x : (tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    %[[NAN:.*]] = tensor.isnan %[[D]] : (tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    %[[BNAN:.*]] = tensor.isnan %h : (tensor<2x3xbf16>) -> tensor<2x3xi1>
func.func @float_tests(%x: tensor<4xf32>, %h: tensor<2x3xbf16>) -> (tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>) {
  %0 = tensor.div %x, %x : tensor<4xf32>
  %1 = tensor.isinf %x : (tensor<4xf32>) -> tensor<4xi1>
  %2 = tensor.isnan %0 : (tensor<4xf32>) -> tensor<4xi1>
  %3 = tensor.isnan %h : (tensor<2x3xbf16>) -> tensor<2x3xi1>
  func.return %1, %2, %3 : tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>
}

// ELU's coefficients default to 1 (absent attributes); leaky_relu's slope to 0.01.
// CHECK-LABEL: func.func @elu_and_leaky_relu(
// CHECK:         %[[E:.*]] = tensor.elu %x : tensor<3x4xf32>
// CHECK-NEXT:    %[[S:.*]] = tensor.elu %x {alpha = 1.5, input_scale = 0.5, scale = 2.0} : tensor<3x4xf32>
// CHECK-NEXT:    %[[L:.*]] = tensor.leaky_relu %x {negative_slope = 0.2} : tensor<3x4xf32>
// CHECK-NEXT:    %[[D:.*]] = tensor.leaky_relu %h : tensor<4xbf16>
func.func @elu_and_leaky_relu(%x: tensor<3x4xf32>, %h: tensor<4xbf16>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>) {
  %0 = tensor.elu %x : tensor<3x4xf32>
  %1 = tensor.elu %x {alpha = 1.5, input_scale = 0.5, scale = 2.0} : tensor<3x4xf32>
  %2 = tensor.leaky_relu %x {negative_slope = 0.2} : tensor<3x4xf32>
  %3 = tensor.leaky_relu %h : tensor<4xbf16>
  func.return %0, %1, %2, %3 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4xbf16>
}
