"""Every form of attention torch produces becomes ``tensor.attention`` / ``tensor.attention_grad``:
``F.scaled_dot_product_attention`` (CPU flash kernel and its backward when training) and the
CUDA flash and memory-efficient kernels with their backward (what a model captured on a GPU
calls; their meta functions let them be traced here). Forward and gradients against
``F.scaled_dot_product_attention`` with autograd (rtol 1e-5)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from spmdc.frontend.capture import capture_program
from spmdc.ir.printer import print_module
from spmdc.runtime.interpreter import interpret

aten = torch.ops.aten


def _public(q, k, v, bias):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=False, scale=0.5)


def _efficient(q, k, v, bias):
    return aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, False, scale=0.5)[0]


def _flash_cuda(q, k, v, bias):
    return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=0.5)[0]


FORMS = {"sdpa": (_public, True), "cuda-efficient": (_efficient, True), "cuda-flash": (_flash_cuda, False)}


class Net(nn.Module):
    def __init__(self, form):
        super().__init__()
        self.w, self.form = nn.Parameter(torch.randn(4, 4)), form

    def forward(self, q, k, v, bias):
        return self.form(q @ self.w, k @ self.w, v, bias)


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_attention_forms_capture_and_match_torch(name, train):
    form, uses_bias = FORMS[name]
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 5, 4, generator=g).unbind(0)
    bias = torch.randn(1, 2, 5, 5, generator=g)
    torch.manual_seed(0)
    model = Net(form)
    loss_fn = (lambda out: (out * out).sum()) if train else None
    cap = capture_program(model, (q, k, v, bias), train=train, loss_fn=loss_fn)
    text = print_module(cap.module)
    assert "tensor.attention " in text and ("tensor.attention_grad" in text) == train
    got = interpret(cap.module, cap.arguments(q, k, v, bias))
    w = model.w.detach().clone().requires_grad_(True)
    ref = F.scaled_dot_product_attention(q @ w, k @ w, v, attn_mask=bias if uses_bias else None, scale=0.5)
    if not train:
        torch.testing.assert_close(got[0], ref.detach(), rtol=1e-5, atol=1e-6)
        return
    loss = (ref * ref).sum()
    loss.backward()
    torch.testing.assert_close(got[0], loss.detach(), rtol=1e-5, atol=1e-5)
    (grad,) = [v for o, v in zip(cap.info.outputs, got) if o.kind == "gradient"]
    torch.testing.assert_close(grad, w.grad, rtol=1e-5, atol=1e-5)


def test_a_fused_kernel_with_dropout_is_refused_with_its_reason():
    from spmdc.frontend.aten.base import UnsupportedOpError

    class Drop(nn.Module):
        def forward(self, q):
            return aten._scaled_dot_product_efficient_attention(q, q, q, None, False, 0.1, False)[0]

    with pytest.raises(UnsupportedOpError, match="Philox stream"):
        capture_program(Drop(), (torch.randn(1, 2, 4, 4),))
