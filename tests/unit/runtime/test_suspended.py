"""A vjp program suspended before its backward (``suspend-for-backward``, ``func.suspend``), run in
one process by the reference interpreter and by the generated code: the forward half hands back
the model output, the backward half takes the output gradient, and the results equal the
unsuspended program's (exactly: the same ops on the same values)."""

from __future__ import annotations

import pytest
import torch

from spmdc.codegen.cache import load_program
from spmdc.ir.parser import parse_module
from spmdc.passes.suspend_for_backward import SuspendForBackward
from spmdc.runtime.interpreter import Interpreter
from spmdc.runtime.suspended import Paused, suspend_results

VJP = """
func.func @main(%w: tensor<3x4xf32> {spmdc.param = "fc.w"}, %x: tensor<2x3xf32>, %g: tensor<2x4xf32>)
    -> (tensor<f32> {spmdc.loss}, tensor<2x4xf32>, tensor<3x4xf32> {spmdc.grad_of = "fc.w"}) {
  %y = tensor.matmul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %t = tensor.tanh %y : tensor<2x4xf32>
  %m = tensor.mul %t, %g : tensor<2x4xf32>
  %l = tensor.sum %m {dims = [0, 1], keepdim = false} : (tensor<2x4xf32>) -> tensor<f32>
  %one = tensor.constant {value = dense<1.0> : tensor<f32>} : tensor<f32>
  %tt = tensor.mul %t, %t : tensor<2x4xf32>
  %d = tensor.sub %one, %tt : (tensor<f32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %dy = tensor.mul %g, %d : tensor<2x4xf32>
  %xt = tensor.permute %x {perm = [1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %dw = tensor.matmul %xt, %dy : (tensor<3x2xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
  func.return %l, %t, %dw : tensor<f32>, tensor<2x4xf32>, tensor<3x4xf32>
}
"""


@pytest.fixture
def values():
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(2, 3), torch.randn(2, 4)


def suspended():
    module = parse_module(VJP, "<vjp>")
    SuspendForBackward(first=1, count=1).run(module)
    return module


def test_interpreter_hands_back_the_output_then_takes_the_gradient(values):
    w, x, g = values
    whole = Interpreter().call(parse_module(VJP, "<vjp>"), "main", [w, x, g])
    module = suspended()
    assert suspend_results(module) == [1]
    paused = Paused.start(Interpreter().steps(module, "main", [w, x, None]), [1])
    torch.testing.assert_close(paused.early[1], torch.tanh(x @ w), rtol=0, atol=0)
    outs = paused.resume([g])
    for a, b in zip(outs, whole):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="resumed already"):
        paused.resume([g])


def test_generated_code_is_a_generator_with_the_same_results(values):
    w, x, g = values
    whole = Interpreter().call(parse_module(VJP, "<vjp>"), "main", [w, x, g])
    module = suspended()
    fn, _ = load_program(module, "main")
    paused = Paused.start(fn([w, x, None], None), suspend_results(module))
    torch.testing.assert_close(paused.early[1], whole[1], rtol=0, atol=0)
    for a, b in zip(paused.resume([g]), whole):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_suspending_program_run_whole_is_refused(values):
    w, x, g = values
    with pytest.raises(RuntimeError, match="suspends before its backward"):
        Interpreter().call(suspended(), "main", [w, x, g])
    fn, _ = load_program(suspended(), "main")
    from spmdc.runtime.suspended import run_whole

    with pytest.raises(RuntimeError, match="suspends before its backward"):
        run_whole(fn([w, x, g], None))
