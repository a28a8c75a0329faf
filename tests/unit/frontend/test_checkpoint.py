"""Activation checkpointing survives capture: the backward recomputes checkpointed regions.

Every form (``checkpoint(use_reentrant=False)``, ``use_reentrant=True``, the ``blocks``
option, HuggingFace's ``gradient_checkpointing_enable()``) gives ops marked
``spmdc.recompute`` that the backward reads instead of the forward's values, the same loss
and gradients as eager PyTorch with checkpointing (dropout masks replayed: rtol 1e-5), a
lower static peak of live memory, and CSE keeps the recomputation.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))

import hf_tiny  # noqa: E402

from spmdc.frontend.capture import capture_program  # noqa: E402
from spmdc.frontend.checkpoint import block_modules  # noqa: E402
from spmdc.ir.printer import print_module  # noqa: E402
from spmdc.passes.manager import PassManager  # noqa: E402
from spmdc.passes.memory import peak_bytes  # noqa: E402
from spmdc.passes.registry import parse_pipeline  # noqa: E402
from spmdc.runtime.interpreter import interpret  # noqa: E402


class Block(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.a, self.b = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.b(F.dropout(F.gelu(self.a(x)), 0.1, self.training))


class Net(nn.Module):
    def __init__(self, mode: str | None, layers: int = 3):
        super().__init__()
        self.inp, self.mode = nn.Linear(16, 16), mode
        self.blocks = nn.ModuleList([Block() for _ in range(layers)])

    def forward(self, x):
        x = self.inp(x)
        for blk in self.blocks:
            if self.mode in ("reentrant", "non-reentrant"):
                x = checkpoint(blk, x, use_reentrant=self.mode == "reentrant")
            else:
                x = blk(x)
        return (x * x).mean()


def _run(model, x, checkpoint_opt=None):
    cap = capture_program(model, (x,), train=True, checkpoint=checkpoint_opt)
    torch.manual_seed(5)
    got = interpret(cap.module, cap.arguments(x))
    torch.manual_seed(5)
    model.zero_grad()
    loss = model(x)
    loss.backward()
    return cap, got, loss.detach()


def _check_numerics(cap, got, loss, model):
    torch.testing.assert_close(got[0], loss, rtol=1e-5, atol=1e-6)
    params = dict(model.named_parameters())
    for o, v in zip(cap.info.outputs, got):
        if o.kind == "gradient":
            torch.testing.assert_close(v, params[o.fqn].grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["non-reentrant", "reentrant", "blocks"])
def test_checkpointed_regions_are_recomputed_and_match_eager(mode):
    torch.manual_seed(0)
    model, x = Net(mode), torch.randn(64, 16)
    cap, got, loss = _run(model, x, "blocks" if mode == "blocks" else None)
    _check_numerics(cap, got, loss, model)
    text = print_module(cap.module)
    regions = {int(line.split("spmdc.recompute = ")[1].split("}")[0].split(",")[0])
               for line in text.splitlines() if "spmdc.recompute" in line}
    assert len(regions) == 3    # one recomputation per block
    assert text.count("tensor.random") == 3   # masks are replayed, never drawn again

    torch.manual_seed(0)
    plain = capture_program(Net(None), (x,), train=True)
    assert "spmdc.recompute" not in print_module(plain.module)
    assert peak_bytes(cap.module) < 0.75 * peak_bytes(plain.module)


def _regions(text: str) -> set[int]:
    return {int(line.split("spmdc.recompute = ")[1].split("}")[0].split(",")[0])
            for line in text.splitlines() if "spmdc.recompute" in line}


def test_every_kth_block_is_recomputed_with_blocks_k():
    """``checkpoint="blocks/2"`` on 4 blocks recomputes blocks 0 and 2 (two regions), the same loss and
    gradients as eager PyTorch; its static peak lies between no checkpointing and every block."""
    torch.manual_seed(0)
    model, x = Net(None, layers=4), torch.randn(64, 16)
    peaks = {}
    for opt, want in ((None, 0), ("blocks/2", 2), ("blocks/4", 1), ("blocks", 4), ("blocks/1", 4)):
        cap, got, loss = _run(model, x, opt)
        _check_numerics(cap, got, loss, model)
        text = print_module(cap.module)
        assert len(_regions(text)) == want, opt
        peaks[opt] = peak_bytes(cap.module)
    assert peaks["blocks"] < peaks["blocks/2"] < peaks[None]
    assert peaks["blocks/1"] == peaks["blocks"]


@pytest.mark.parametrize("bad", ["layers", "blocks/0", "blocks/x", "blocks/", 2])
def test_a_checkpoint_mode_spmdc_does_not_know_is_refused(bad):
    from spmdc.dialects.attrs import checkpoint_every
    from spmdc.frontend.export import ExportError

    with pytest.raises(ValueError, match="expected 'blocks' .* or 'blocks/K'"):
        checkpoint_every(bad)
    with pytest.raises(ExportError, match="blocks/K"):
        capture_program(Net(None), (torch.randn(4, 16),), train=True, checkpoint=bad)


def test_cse_keeps_the_recomputation():
    torch.manual_seed(0)
    model, x = Net("non-reentrant"), torch.randn(8, 16)
    cap = capture_program(model, (x,), train=True)
    before = print_module(cap.module).count("spmdc.recompute")
    PassManager(parse_pipeline("cse")).run(cap.module)
    assert print_module(cap.module).count("spmdc.recompute") == before > 0


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_huggingface_gradient_checkpointing(name):
    model = hf_tiny.build(name)
    model.gradient_checkpointing_enable()
    ids, labels = hf_tiny.batch()
    cap = capture_program(model, (), train=True, example_kwargs={"input_ids": ids, "labels": labels})
    assert "spmdc.recompute" in print_module(cap.module)
    torch.manual_seed(3)
    got = interpret(cap.module, cap.arguments(ids, labels))
    torch.manual_seed(3)
    model.zero_grad()
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    torch.testing.assert_close(got[0], loss.detach(), rtol=1e-5, atol=1e-6)
    params = dict(model.named_parameters())
    for o, v in zip(cap.info.outputs, got):
        if o.kind == "gradient":
            torch.testing.assert_close(v, params[o.fqn].grad, rtol=1e-4, atol=1e-5)


def test_blocks_are_the_repeated_children_of_module_lists():
    model = hf_tiny.build("llama")
    assert block_modules(model) == [f"model.layers.{i}" for i in range(model.config.num_hidden_layers)]
    assert block_modules(Net(None)) == ["blocks.0", "blocks.1", "blocks.2"]
    assert block_modules(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) == []


def test_a_forward_capture_ignores_checkpointing():
    torch.manual_seed(0)
    model, x = Net("non-reentrant"), torch.randn(8, 16)
    model.eval()
    cap = capture_program(model, (x,))
    assert "spmdc.recompute" not in print_module(cap.module)
    torch.testing.assert_close(interpret(cap.module, cap.arguments(x))[0], model(x).detach())
