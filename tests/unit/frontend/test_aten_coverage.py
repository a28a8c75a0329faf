"""Handlers and ``tensor`` op references the built-in workloads do not reach, checked end to end:
capture (forward and training step), round-trip, interpret, compare with eager/autograd."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))

from capture_helpers import check_forward, check_ir, check_train  # noqa: E402

from spmdc.frontend.capture import capture_program  # noqa: E402
from spmdc.frontend.translate import supported_ops  # noqa: E402


class KitchenSink(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.emb = nn.Embedding(10, 6)

    def forward(self, x, ids):
        h = self.lin(x) + self.emb(ids)                         # [4, 5, 6]
        a = F.silu(h).abs().clamp(max=3.0) + torch.sin(h) * torch.cos(h)
        b = torch.where(h > 0.1, h, 0.5) + torch.maximum(h, a) - torch.minimum(h, a)
        c = F.pad(b, (1, -1, 0, 2), value=0.25)                 # grow and crop
        first, rest = c.narrow(1, 0, 1).squeeze(1), c[:, 1:]    # narrow, strided slice below
        rows = torch.unbind(rest[:, ::2], dim=1)
        d = torch.stack(rows, dim=0).sum(0) + first             # unbind/stack
        e = d.log_softmax(-1) + d.softmax(0) + torch.erf(d) / (1 + d.pow(2))
        idx = ids[:, :2].clamp(0, 5)                            # integer clamp
        g = torch.gather(e, 1, idx) + e.select(1, 3).unsqueeze(1)
        s = torch.zeros(4, 6).scatter_add(1, idx, g)
        m = (ids > 4).sum(dim=1, keepdim=True).float()          # bool -> int sum -> cast
        return (s + e * m).cumsum(-1) / (e.var(dim=0, keepdim=True) + 1)


@pytest.fixture(scope="module")
def sink():
    torch.manual_seed(0)
    model = KitchenSink()
    x, ids = torch.randn(4, 5, 6), torch.randint(0, 10, (4, 5))
    target = torch.randn(4, 6)
    fwd = capture_program(model, (x, ids))
    train = capture_program(model, (x, ids), train=True, loss_fn=F.mse_loss, loss_inputs=(target,))
    return model, (x, ids), target, fwd, train


def test_kitchen_sink_forward(sink):
    model, args, _, fwd, _ = sink
    check_ir(fwd.module)
    check_forward(fwd, model, args)
    names = {op.name for op in fwd.module.walk()}
    assert {"tensor.pad", "tensor.scatter", "tensor.gather", "tensor.cumsum",
            "tensor.clamp", "tensor.var", "tensor.concat"} <= names, names


def test_kitchen_sink_training_step(sink):
    model, args, target, _, train = sink
    check_ir(train.module)
    check_train(train, model, args, F.mse_loss, (target,))
    names = {op.name for op in train.module.walk()}
    assert {"tensor.sign", "tensor.reverse", "tensor.insert_slice"} <= names, names  # abs', cumsum', slice'


@pytest.mark.parametrize("act", [nn.Softplus(), nn.Softplus(beta=2.0, threshold=5.0), nn.Mish()],
                         ids=["softplus", "softplus-beta2", "mish"])
def test_softplus_and_mish_capture_and_match_eager(act):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), act, nn.Linear(8, 3))
    x, target = torch.randn(5, 6) * 4, torch.randn(5, 3)
    fwd = capture_program(model, (x,))
    check_ir(fwd.module)
    check_forward(fwd, model, (x,))
    assert "tensor.log1p" in {op.name for op in fwd.module.walk()}
    train = capture_program(model, (x,), train=True, loss_fn=F.mse_loss, loss_inputs=(target,))
    check_train(train, model, (x,), F.mse_loss, (target,))


def test_supported_ops_listed():
    ops = supported_ops()
    assert "torch.aten.mm" in ops and "torch.aten._softmax" in ops and "torch.aten.index_put" in ops
    assert all(o.startswith("torch.") for o in ops)
