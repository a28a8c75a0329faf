"""Random numbers of pipeline stages (spmdc.api.pipeline_rng), on one process: replaying the
model's random ops advances the generator exactly as running the model does, so each stage's
state for micro-batch j is where one device's generator is when that stage starts drawing for j;
an order stages cannot keep is refused by name."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from spmdc.api.pipeline_rng import StageRandomness, model_draws
from spmdc.frontend.stages import split_stages


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3))
        self.b = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 4))

    def forward(self, x):
        return self.b(self.a(x))


def _split(model, x, y):
    return split_stages(model, (x,), stages=[["a"], ["b"]], loss_fn=nn.functional.mse_loss, loss_inputs=(y,))


def test_each_stage_starts_where_one_device_is():
    torch.manual_seed(0)
    model, x, y = Net().train(), torch.randn(4, 8), torch.randn(4, 4)
    split = _split(model, x[:2], y[:2])
    assert [(d.stage, d.what.split(" ")[0]) for d in model_draws(split)] == [(0, "aten.dropout"),
                                                                              (1, "aten.dropout")]
    torch.manual_seed(7)
    rngs = [StageRandomness(split, k, torch.device("cpu")) for k in range(2)]
    start = torch.get_rng_state()
    for r in rngs:
        torch.set_rng_state(start)
        r.begin(2)
    # one device: micro-batch 0 through stage a then b, then micro-batch 1 (a gradient-accumulation loop)
    torch.set_rng_state(start)
    seen = []
    for j in range(2):
        seen.append(torch.get_rng_state())
        h = model.a(x[2 * j:2 * j + 2])
        seen.append(torch.get_rng_state())
        model.b(h)
    final = torch.get_rng_state()
    for j in range(2):
        for k in range(2):
            rngs[k].enter(j)
            assert torch.equal(torch.get_rng_state(), seen[2 * j + k]), (j, k)
    rngs[1].end()
    assert torch.equal(torch.get_rng_state(), final)
    # and the stage's own module, started there, draws one device's masks
    torch.set_rng_state(start)
    h0 = model.a(x[:2])
    rngs[0].enter(0)
    assert torch.equal(split.stages[0].module(x[:2])[0], h0)


def test_no_random_op_costs_nothing():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
    split = split_stages(model, (torch.randn(2, 8),), stages=[["0"], ["1"]], loss_fn=nn.functional.mse_loss,
                         loss_inputs=(torch.randn(2, 4),))
    r = StageRandomness(split, 0, torch.device("cpu"))
    state = torch.get_rng_state()
    r.begin(4)
    r.enter(3)
    r.end()
    assert not r.active and torch.equal(torch.get_rng_state(), state)


class Interleaved(nn.Module):
    """Stage b's noise is drawn (at the root, read by b) before stage a's dropout runs."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3))
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        noise = torch.rand(x.shape[0], 8)
        h = self.a(x)
        return self.b(h + noise)


def test_out_of_order_draws_are_refused():
    model = Interleaved().train()
    split = _split(model, torch.randn(2, 8), torch.randn(2, 4))
    with pytest.raises(NotImplementedError,
                       match=r"draws random numbers for stage 0 \(aten.dropout in module .a.1.\) after stage 1 drew"):
        model_draws(split)
