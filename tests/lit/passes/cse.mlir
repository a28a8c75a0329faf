// RUN: %spmdc-opt %s -p cse | FileCheck %s

shard.mesh @mesh = <["tp" = 2]>

// CHECK-LABEL: func.func @cse_identical_pure_ops(
// CHECK-NEXT:    %[[E:.*]] = tensor.exp %x : tensor<4xf32>
// CHECK-NEXT:    %[[S:.*]] = tensor.add %[[E]], %[[E]] : tensor<4xf32>
// CHECK-NEXT:    func.return %[[S]] : tensor<4xf32>
func.func @cse_identical_pure_ops(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.exp %x : tensor<4xf32>
  %1 = tensor.exp %x : tensor<4xf32>
  %2 = tensor.add %0, %1 : tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// Merging one pair makes their users identical too.
// CHECK-LABEL: func.func @cse_chain(
// CHECK-NEXT:    %[[E:.*]] = tensor.exp %x : tensor<4xf32>
// CHECK-NEXT:    %[[N:.*]] = tensor.neg %[[E]] : tensor<4xf32>
// CHECK-NEXT:    func.return %[[N]], %[[N]] : tensor<4xf32>, tensor<4xf32>
func.func @cse_chain(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.exp %x : tensor<4xf32>
  %1 = tensor.neg %0 : tensor<4xf32>
  %2 = tensor.exp %x : tensor<4xf32>
  %3 = tensor.neg %2 : tensor<4xf32>
  func.return %1, %3 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @cse_commutative_swapped_operands(
// CHECK-NEXT:    %[[A:.*]] = tensor.add %x, %y : tensor<4xf32>
// CHECK-NEXT:    %[[M:.*]] = tensor.mul %y, %x : tensor<4xf32>
// CHECK-NEXT:    func.return %[[A]], %[[A]], %[[M]], %[[M]] :
func.func @cse_commutative_swapped_operands(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.add %x, %y : tensor<4xf32>
  %1 = tensor.add %y, %x : tensor<4xf32>
  %2 = tensor.mul %y, %x : tensor<4xf32>
  %3 = tensor.mul %x, %y : tensor<4xf32>
  func.return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @cse_identical_constants(
// CHECK-NEXT:    %[[C:.*]] = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
// CHECK-NEXT:    func.return %[[C]], %[[C]] :
func.func @cse_identical_constants() -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
  %1 = tensor.constant {value = dense<[1.0, 1.0, 1.0, 1.0]> : tensor<4xf32>} : tensor<4xf32>
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @do_not_cse_swapped_operands_of_non_commutative_ops(
// CHECK-NEXT:    %[[A:.*]] = tensor.sub %x, %y : tensor<4xf32>
// CHECK-NEXT:    %[[B:.*]] = tensor.sub %y, %x : tensor<4xf32>
// CHECK-NEXT:    func.return %[[A]], %[[B]] :
func.func @do_not_cse_swapped_operands_of_non_commutative_ops(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.sub %x, %y : tensor<4xf32>
  %1 = tensor.sub %y, %x : tensor<4xf32>
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @do_not_cse_different_attributes(
// CHECK-NEXT:    %[[A:.*]] = tensor.sum %x {dims = [0]} : (tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[B:.*]] = tensor.sum %x {dims = [0], keepdim = false} : (tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[C:.*]] = tensor.exp %x {shard.sharding = [#shard<@mesh, [S(0)]>]} : tensor<4xf32>
// CHECK-NEXT:    %[[D:.*]] = tensor.exp %x {shard.sharding = [#shard<@mesh, [R]>]} : tensor<4xf32>
// CHECK-NEXT:    func.return %[[A]], %[[B]], %[[C]], %[[D]] :
func.func @do_not_cse_different_attributes(%x: tensor<4xf32>) -> (tensor<f32>, tensor<f32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.sum %x {dims = [0]} : (tensor<4xf32>) -> tensor<f32>
  %1 = tensor.sum %x {dims = [0], keepdim = false} : (tensor<4xf32>) -> tensor<f32>
  %2 = tensor.exp %x {shard.sharding = [#shard<@mesh, [S(0)]>]} : tensor<4xf32>
  %3 = tensor.exp %x {shard.sharding = [#shard<@mesh, [R]>]} : tensor<4xf32>
  func.return %0, %1, %2, %3 : tensor<f32>, tensor<f32>, tensor<4xf32>, tensor<4xf32>
}

// 0.0 and -0.0 compare equal in Python but are different constants.
// CHECK-LABEL: func.func @do_not_cse_different_constants(
// CHECK-NEXT:    %[[A:.*]] = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
// CHECK-NEXT:    %[[B:.*]] = tensor.constant {value = dense<2.0> : tensor<4xf32>} : tensor<4xf32>
// CHECK-NEXT:    %[[C:.*]] = tensor.constant {value = dense<0.0> : tensor<f32>} : tensor<f32>
// CHECK-NEXT:    %[[D:.*]] = tensor.constant {value = dense<-0.0> : tensor<f32>} : tensor<f32>
// CHECK-NEXT:    func.return %[[A]], %[[B]], %[[C]], %[[D]] :
func.func @do_not_cse_different_constants() -> (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) {
  %0 = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
  %1 = tensor.constant {value = dense<2.0> : tensor<4xf32>} : tensor<4xf32>
  %2 = tensor.constant {value = dense<0.0> : tensor<f32>} : tensor<f32>
  %3 = tensor.constant {value = dense<-0.0> : tensor<f32>} : tensor<f32>
  func.return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>
}

// CHECK-LABEL: func.func @do_not_cse_different_result_types(
// CHECK-NEXT:    %[[A:.*]] = tensor.cast %x : (tensor<4xf32>) -> tensor<4xf16>
// CHECK-NEXT:    %[[B:.*]] = tensor.cast %x : (tensor<4xf32>) -> tensor<4xbf16>
func.func @do_not_cse_different_result_types(%x: tensor<4xf32>) -> (tensor<4xf16>, tensor<4xbf16>) {
  %0 = tensor.cast %x : (tensor<4xf32>) -> tensor<4xf16>
  %1 = tensor.cast %x : (tensor<4xf32>) -> tensor<4xbf16>
  func.return %0, %1 : tensor<4xf16>, tensor<4xbf16>
}

// Collectives must run on every rank as written.
// CHECK-LABEL: func.func @do_not_cse_collectives(
// CHECK-NEXT:    %[[A:.*]] = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
// CHECK-NEXT:    %[[B:.*]] = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
// CHECK-NEXT:    func.return %[[A]], %[[B]] :
func.func @do_not_cse_collectives(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
  %1 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @do_not_cse_calls(
// CHECK-NEXT:    func.call %x {callee = @cse_identical_pure_ops}
// CHECK-NEXT:    func.call %x {callee = @cse_identical_pure_ops}
func.func @do_not_cse_calls(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = func.call %x {callee = @cse_identical_pure_ops} : tensor<4xf32>
  %1 = func.call %x {callee = @cse_identical_pure_ops} : tensor<4xf32>
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// Inside a region, and without reaching into the isolated region from outside.
// CHECK-LABEL: func.func @cse_inside_fused_region(
// CHECK-NEXT:    %[[C:.*]] = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
// CHECK-NEXT:    %[[F:.*]] = kernel.fused %x : tensor<4xf32> {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<4xf32>):
// CHECK-NEXT:      %[[IC:.*]] = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
// CHECK-NEXT:      %[[E:.*]] = tensor.exp %[[A]] : tensor<4xf32>
// CHECK-NEXT:      %[[S:.*]] = tensor.add %[[E]], %[[E]] : tensor<4xf32>
// CHECK-NEXT:      %[[T:.*]] = tensor.add %[[S]], %[[IC]] : tensor<4xf32>
// CHECK-NEXT:      kernel.yield %[[T]] : tensor<4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]], %[[C]] :
func.func @cse_inside_fused_region(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %c = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
  %0 = kernel.fused %x : tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %ic = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
    %e = tensor.exp %a : tensor<4xf32>
    %e2 = tensor.exp %a : tensor<4xf32>
    %s = tensor.add %e, %e2 : tensor<4xf32>
    %t = tensor.add %s, %ic : tensor<4xf32>
    kernel.yield %t : tensor<4xf32>
  }
  func.return %0, %c : tensor<4xf32>, tensor<4xf32>
}

// Ops with regions are left alone, even when identical.
// CHECK-LABEL: func.func @do_not_cse_ops_with_regions(
// CHECK:         %[[F:.*]] = kernel.fused %x : tensor<4xf32> {
// CHECK:         %[[G:.*]] = kernel.fused %x : tensor<4xf32> {
// CHECK:         func.return %[[F]], %[[G]] :
func.func @do_not_cse_ops_with_regions(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kernel.fused %x : tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    kernel.yield %a : tensor<4xf32>
  }
  %1 = kernel.fused %x : tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    kernel.yield %a : tensor<4xf32>
  }
  func.return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// Functions are isolated: the same constant in two functions stays in both.
// CHECK-LABEL: func.func @do_not_cse_across_functions_a(
// CHECK-NEXT:    tensor.constant {value = dense<3.0> : tensor<2xf32>}
// CHECK-LABEL: func.func @do_not_cse_across_functions_b(
// CHECK-NEXT:    tensor.constant {value = dense<3.0> : tensor<2xf32>}
func.func @do_not_cse_across_functions_a() -> tensor<2xf32> {
  %0 = tensor.constant {value = dense<3.0> : tensor<2xf32>} : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
func.func @do_not_cse_across_functions_b() -> tensor<2xf32> {
  %0 = tensor.constant {value = dense<3.0> : tensor<2xf32>} : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
