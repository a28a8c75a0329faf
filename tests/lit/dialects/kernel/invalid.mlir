// RUN: %spmdc-opt %s --split-input-file --verify-diagnostics

func.func @region_args_mismatch(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kernel.fused' op region arguments (tensor<8xf32>) must match the operand types (tensor<4xf32>)}}
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<8xf32>):
    %c = tensor.constant {value = dense<0.0> : tensor<4xf32>} : tensor<4xf32>
    kernel.yield %c : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

func.func @region_args_missing(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kernel.fused' op region arguments (tensor<4xf32>) must match the operand types (tensor<4xf32>, tensor<4xf32>)}}
  %0 = kernel.fused %a, %b : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    kernel.yield %x : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

func.func @yield_type_mismatch(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %s = tensor.sum %x {dims = [0]} : (tensor<4xf32>) -> tensor<f32>
    // expected-error@+1 {{'kernel.yield' op yields (tensor<f32>) but the enclosing 'kernel.fused' returns (tensor<4xf32>)}}
    kernel.yield %s : tensor<f32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

func.func @yield_count_mismatch(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    // expected-error@+1 {{'kernel.yield' op yields (tensor<4xf32>, tensor<4xf32>) but the enclosing 'kernel.fused' returns (tensor<4xf32>)}}
    kernel.yield %x, %x : tensor<4xf32>, tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

func.func @missing_yield(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kernel.fused' op region must end with 'kernel.yield'}}
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %1 = tensor.neg %x : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

func.func @ends_in_func_return(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kernel.fused' op region must end with 'kernel.yield'}}
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    func.return %x : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

shard.mesh @mesh = <["tp" = 2]>
func.func @non_tensor_op_inside(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    // expected-error@+1 {{'comm.all_reduce' op is not allowed inside 'kernel.fused' (only 'tensor' ops)}}
    %1 = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<4xf32>
    kernel.yield %1 : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

func.func @yield_in_the_middle(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    // expected-error@+1 {{'kernel.yield' op is not allowed inside 'kernel.fused' (only 'tensor' ops)}}
    kernel.yield %x : tensor<4xf32>
    kernel.yield %x : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

func.func @two_blocks(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kernel.fused' op expects a single-block region}}
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    kernel.yield %x : tensor<4xf32>
  ^bb1(%y: tensor<4xf32>):
    kernel.yield %y : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

func.func @no_region(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kernel.fused' op expected 1 regions, but found 0}}
  %0 = "kernel.fused"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @kind_not_a_string(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kernel.fused' op attribute 'kind' must be a string, got 1}}
  %0 = kernel.fused %a {kind = 1} : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    kernel.yield %x : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

// The region is isolated from above: values of the function are not visible in it.
func.func @uses_value_from_above(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused : tensor<4xf32> {
    // expected-error@+1 {{use of undeclared SSA value '%a'}}
    %1 = tensor.neg %a : tensor<4xf32>
    kernel.yield %1 : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// -----

// expected-error@+1 {{'kernel.yield' op expects parent op 'kernel.fused'}}
kernel.yield

// -----

func.func @yield_with_result(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    // expected-error@+1 {{'kernel.yield' op expected 0 results, but found 1}}
    %y = "kernel.yield"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}
