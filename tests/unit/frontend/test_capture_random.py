"""Captured random ops draw exactly what eager PyTorch draws (same seed): every random
factory and dropout form, on contiguous and on transposed/permuted tensors (eager fills
memory in the input's storage order), forward and training step; the generator ends in the
same state."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from spmdc.frontend.capture import capture_program
from spmdc.ir.printer import print_module
from spmdc.runtime.interpreter import interpret

FORMS = {
    "dropout": lambda h: F.dropout(h, 0.3, True),
    "dropout-transposed": lambda h: F.dropout(h.transpose(0, 1), 0.3, True),
    "dropout-permuted": lambda h: F.dropout(h.view(2, 3, 4).permute(2, 0, 1), 0.5, True),
    "dropout-sliced-transposed": lambda h: F.dropout(h.t()[:, :5], 0.2, True),
    "dropout1d": lambda h: F.dropout1d(h.view(2, 3, 4), 0.3, True),
    "alpha_dropout": lambda h: F.alpha_dropout(h, 0.2, True),
    "rand_like-transposed": lambda h: h.t() * torch.rand_like(h.t()),
    "randn_like": lambda h: h + torch.randn_like(h),
    "rand-randn-randint": lambda h: h + torch.rand(6, 4) + torch.randn(6, 4) * torch.randint(0, 3, (6, 4)),
    "bernoulli-probs": lambda h: h * torch.bernoulli(torch.sigmoid(h).detach()),
    "bernoulli-p": lambda h: h * torch.bernoulli(h.detach(), 0.25),
    "uniform-normal": lambda h: h + torch.empty_like(h).uniform_(-2, 2) + torch.empty_like(h).normal_(1, 3),
    "sdpa-dropout": lambda h: F.scaled_dot_product_attention(h.view(1, 2, 3, 4), h.view(1, 2, 3, 4),
                                                             h.view(1, 2, 3, 4), dropout_p=0.4, is_causal=True),
}


class Net(nn.Module):
    def __init__(self, form):
        super().__init__()
        self.fc, self.form = nn.Linear(5, 4), form

    def forward(self, x):
        return self.form(self.fc(x))


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_draws_are_the_eager_draws(name, train):
    torch.manual_seed(0)
    model, x = Net(FORMS[name]), torch.randn(6, 5)
    loss_fn = (lambda out: (out * out).sum()) if train else None
    cap = capture_program(model, (x,), train=train, loss_fn=loss_fn)
    assert "tensor.random" in print_module(cap.module)
    torch.manual_seed(42)
    got = interpret(cap.module, cap.arguments(x))
    got_next = torch.rand(4)
    torch.manual_seed(42)
    out = model(x)
    if train:
        loss = loss_fn(out)
        loss.backward()
    want_next = torch.rand(4)
    assert torch.equal(got_next, want_next), "the generator ends where eager's does"
    if train:
        torch.testing.assert_close(got[0], loss.detach(), rtol=1e-6, atol=1e-6)
        grads = dict(model.named_parameters())
        for o, v in zip(cap.info.outputs, got):
            if o.kind == "gradient":
                torch.testing.assert_close(v, grads[o.fqn].grad, rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(got[0], out.detach()) or torch.allclose(got[0], out.detach(), rtol=1e-6, atol=1e-7)
        assert torch.equal(got[0] == 0, out.detach() == 0), "the same elements dropped"


def test_transformer_encoder_layer_trains_like_eager_with_its_default_dropout():
    torch.manual_seed(0)
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2)
    x, w = torch.randn(2, 8, 32), torch.linspace(-1, 1, 32)

    def loss_fn(out):
        return (out * w).sum()

    cap = capture_program(model, (x,), train=True, loss_fn=loss_fn)
    torch.manual_seed(1)
    got = interpret(cap.module, cap.arguments(x))
    torch.manual_seed(1)
    loss = loss_fn(model(x))
    loss.backward()
    torch.testing.assert_close(got[0], loss.detach(), rtol=1e-5, atol=1e-5)
    grads = dict(model.named_parameters())
    for o, v in zip(cap.info.outputs, got):
        if o.kind == "gradient":
            torch.testing.assert_close(v, grads[o.fqn].grad, rtol=1e-4, atol=1e-5)
