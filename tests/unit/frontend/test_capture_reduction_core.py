"""Capturing the reduction / ordering / indexing / random ops of Core ATen and of mixture-of-experts
routing: what the Core ATen samples cannot check (they compare draw-independent outputs and
avoid NaNs), and what capture refuses."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from spmdc.frontend.aten import UnsupportedOpError
from spmdc.frontend.capture import capture_program
from spmdc.runtime.interpreter import interpret
from spmdc.tools.core_aten.samples_reduction import _router


class Fn(nn.Module):
    def __init__(self, fn, weight: torch.Tensor | None = None):
        super().__init__()
        self.fn = fn
        self.w = nn.Parameter(weight) if weight is not None else None

    def forward(self, *args):
        return self.fn(self.w, *args) if self.w is not None else self.fn(*args)


def test_randperm_draws_eagers_permutation_and_leaves_the_generator_where_eager_does():
    model = Fn(lambda x: (x.index_select(0, torch.randperm(6)), torch.randperm(4)))
    x = torch.randn(6, 3)
    cap = capture_program(model, (x,))
    assert any(op.name == "tensor.randperm" for op in cap.module.walk())
    torch.manual_seed(7)
    got = interpret(cap.module, cap.arguments(x))
    got_next = torch.rand(3)
    torch.manual_seed(7)
    want = model(x)
    assert torch.equal(torch.rand(3), got_next)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_randperm_in_a_training_step_routes_the_gradient_like_autograd():
    torch.manual_seed(0)
    model = Fn(lambda w: w.index_select(0, torch.randperm(5)) * torch.arange(5.0).unsqueeze(1), torch.randn(5, 2))

    def loss_fn(out):
        return (out * out).sum()

    cap = capture_program(model, (), train=True, loss_fn=loss_fn)
    torch.manual_seed(11)
    got = interpret(cap.module, cap.arguments())
    torch.manual_seed(11)
    loss = loss_fn(model())
    loss.backward()
    torch.testing.assert_close(got[0], loss.detach())
    grad = next(v for o, v in zip(cap.info.outputs, got) if o.kind == "gradient")
    assert torch.equal(grad, model.w.grad)


@pytest.mark.parametrize("fn", [lambda x: torch.max(x, dim=1), lambda x: torch.min(x, dim=1, keepdim=True),
                                lambda x: torch.max(x, dim=0), lambda x: (torch.argmax(x, 1), torch.argmin(x, 0))],
                         ids=["max.dim", "min.dim", "max.dim0", "argmax-argmin"])
def test_extremes_and_their_indices_follow_torch_on_ties_and_nans(fn):
    nan = float("nan")
    x = torch.tensor([[1.0, nan, 3.0, nan], [2.0, 2.0, 1.0, 2.0], [-1.0, -3.0, -3.0, 0.5], [4.0, 4.0, 4.0, 4.0]])
    model = Fn(fn)
    cap = capture_program(model, (x,))
    got, want = interpret(cap.module, cap.arguments(x)), model(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g.isnan(), w.isnan())
        assert torch.equal(torch.nan_to_num(g, 99.0), torch.nan_to_num(w, 99.0))


def test_the_router_becomes_topk_sort_histc_cumsum_and_index_selects():
    torch.manual_seed(0)
    logits, x = torch.randn(8, 4), torch.randn(8, 5)
    model = Fn(_router)
    cap = capture_program(model, (logits, x))
    names = {op.name for op in cap.module.walk()}
    assert {"tensor.softmax", "tensor.topk", "tensor.sort", "tensor.histc", "tensor.cumsum",
            "tensor.index_select", "tensor.scatter"} <= names
    got, want = interpret(cap.module, cap.arguments(logits, x)), model(logits, x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    counts, offsets = want[-1], want[3]
    assert int(counts.sum()) == 16 and int(offsets[-1]) == 16


def test_index_select_by_a_0d_index_is_refused_in_training():
    # torch's index_add decomposition turns its backward into an index_put eager PyTorch rejects
    model = Fn(lambda w: w.index_select(1, torch.tensor(2)), torch.randn(3, 4))
    with pytest.raises(UnsupportedOpError, match="do not broadcast to the indexed shape"):
        capture_program(model, (), train=True, loss_fn=lambda out: out.sum())


def test_bincount_never_reaches_a_graph():
    # its result's length is the largest value + 1: torch.export cannot give it a static shape
    model = Fn(lambda i: torch.bincount(i, minlength=5))
    with pytest.raises(Exception, match="data-dependent"):
        capture_program(model, (torch.tensor([0, 1, 1, 3]),))
