"""Cutting a training step into pipeline stages by module (spmdc.frontend.stages): the stages run
one after the other compute the model's loss exactly; wrong module names, stages out of order and
random ops are refused by name."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from spmdc.frontend.stages import StageError, auto_stages, buffer_updates, expand_pattern, random_ops, split_stages
from spmdc.frontend.workloads import load_workload


def run_stages(split, user_inputs):
    values = {}
    out = None
    for s in split.stages:
        args = [user_inputs[i] if k == "input" else values[i] for k, i in s.inputs]
        out = s.module(*args)
        out = out if isinstance(out, tuple) else (out,)
        for v, o in zip(s.outputs, out):
            values[v] = o
    return out[0]


@pytest.mark.parametrize("name,stages", [
    ("gpt2-tiny", [["wte", "wpe", "h.0"], ["h.1", "ln_f", "lm_head"]]),
    ("llama-tiny", [["embed_tokens", "layers.0"], ["layers.1", "norm", "lm_head"]]),
    ("gpt2-tiny", [["wte", "wpe"], ["h.0"], ["h.1"]]),
])
def test_stages_compute_the_loss(name, stages):
    w = load_workload(name)
    split = split_stages(w.model, w.inputs, stages=stages, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
    assert len(split.stages) == len(stages)
    loss = run_stages(split, list(w.inputs) + list(w.loss_inputs))
    assert torch.equal(loss, w.loss_fn(w.model(*w.inputs), *w.loss_inputs))
    # every parameter is in some stage, under the model's name (or a tied alias)
    names = {n for s in split.stages for n in s.params}
    every = {n for n, _ in w.model.named_parameters(remove_duplicate=False)}
    assert names <= every
    assert all(any(a in names for a in aliases) for aliases in split.aliases.values())
    # each boundary value flows forward, to exactly the stages that read it
    for v in split.values.values():
        assert all(c > v.producer for c in v.consumers)
        assert v.index in split.stages[v.producer].outputs


def test_gpt2_tied_weight_is_shared_and_targets_go_last():
    w = load_workload("gpt2-tiny")
    split = split_stages(w.model, w.inputs, stages=[["wte", "wpe", "h.0"], ["h.1", "ln_f", "lm_head"]],
                         loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
    assert list(split.shared.values()) == [[0, 1]]          # wte.weight is lm_head.weight
    assert ("input", 1) in split.stages[1].inputs           # the targets are read by the loss, in the last stage
    assert ("input", 1) not in split.stages[0].inputs
    (hidden,) = split.values.values()
    assert hidden.differentiable and hidden.shape == (2, 8, 32)


def test_auto_stages_cut_the_blocks_evenly():
    w = load_workload("gpt2-tiny")
    assert auto_stages(w.model, 2) == [["h.0"], ["h.1"]]
    with pytest.raises(StageError, match="only 2 repeated blocks"):
        auto_stages(w.model, 3)


def test_patterns():
    names = ["h", "h.0", "h.1", "h.2", "h.3", "ln_f"]
    assert expand_pattern("h.1-h.3", names) == ["h.1", "h.2", "h.3"]
    assert expand_pattern("h.0-2", names) == ["h.0", "h.1", "h.2"]
    assert expand_pattern("h.*", names) == ["h.0", "h.1", "h.2", "h.3"]
    assert expand_pattern("ln_f", names) == ["ln_f"]
    with pytest.raises(StageError, match="no module 'h.4'"):
        expand_pattern("h.2-h.4", names)


@pytest.mark.parametrize("stages,message", [
    ([["wte", "h.O"], ["h.1"]], r"stage 0: the model has no module 'h.O' \(did you mean .*'h.0'"),
    ([["h.1"], ["h.0"]], "stage 0 .*reads a value that stage 1 computes"),
    ([["h.0", "h.1"], ["ln_f"], ["h.1"]], "listed in stage 0 and stage 2"),
    ([["h.0"]], "at least 2 stages"),
])
def test_bad_splits_are_refused(stages, message):
    w = load_workload("gpt2-tiny")
    with pytest.raises(StageError, match=message):
        split_stages(w.model, w.inputs, stages=stages, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)


def test_random_ops_are_found():
    class Drop(nn.Module):
        def __init__(self, p: float):
            super().__init__()
            self.a, self.drop, self.b = nn.Linear(4, 4), nn.Dropout(p), nn.Linear(4, 4)

        def forward(self, x):
            return self.b(self.drop(self.a(x)))

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    loss = nn.functional.mse_loss
    split = split_stages(Drop(0.1), (x,), stages=[["a"], ["drop", "b"]], loss_fn=loss, loss_inputs=(y,))
    assert random_ops(split.stages[0].module) == []
    assert random_ops(split.stages[1].module) == ["aten.dropout in module 'drop'"]
    quiet = split_stages(Drop(0.0), (x,), stages=[["a"], ["drop", "b"]], loss_fn=loss, loss_inputs=(y,))
    assert random_ops(quiet.stages[1].module) == []    # p = 0 draws nothing


def test_buffer_updates_are_found():
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 4))
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    split = split_stages(m, (x,), stages=[["0"], ["1", "2"]], loss_fn=nn.functional.mse_loss, loss_inputs=(y,))
    assert buffer_updates(split.stages[0].module) == []
    found = buffer_updates(split.stages[1].module)
    assert any("module '1'" in f for f in found) and len(found) == 2   # num_batches_tracked += 1, running stats
    m.eval()
    quiet = split_stages(m, (x,), stages=[["0"], ["1", "2"]], loss_fn=nn.functional.mse_loss, loss_inputs=(y,))
    assert buffer_updates(quiet.stages[1].module) == []
