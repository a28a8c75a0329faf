"""Repeated blocks captured once (spmdc.frontend.repeated): the program built from a 3-block trace
equals the one a whole export gives, op for op and name for name (printed IR with locations),
and it computes what the model does; models whose blocks differ are exported whole."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from spmdc.frontend.capture import capture_program
from spmdc.frontend.repeated import MIN_BLOCKS, RepeatedBlocksWarning, find_block_stack
from spmdc.ir.printer import print_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hf_tiny  # noqa: E402
from capture_helpers import check_train  # noqa: E402


def _hf(name: str, layers: int) -> tuple[nn.Module, dict]:
    """A tiny HuggingFace model of ``hf_tiny`` at its defaults, ``layers`` deep."""
    import transformers as T

    cfg = hf_tiny.CONFIGS[name]()
    d = cfg.to_dict()
    d.pop("layer_types", None)   # recomputed for the new depth
    d["n_layer" if name == "gpt2" else "num_hidden_layers"] = layers
    torch.manual_seed(0)
    cls = T.AutoModelForMaskedLM if name in hf_tiny.MASKED_LM else T.AutoModelForCausalLM
    model = cls.from_config(type(cfg)(**d))
    ids, labels = hf_tiny.batch()
    return model, {"input_ids": ids, "labels": labels}


def _both(model, kwargs, **opts):
    """(built from 3 blocks, exported whole)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RepeatedBlocksWarning)
        built = capture_program(model, (), example_kwargs=kwargs, reuse_blocks=True, **opts)
    whole = capture_program(model, (), example_kwargs=kwargs, reuse_blocks=False, **opts)
    return built, whole


@pytest.mark.parametrize("name,opts", [
    ("llama", dict(train=True)),
    ("mixtral", dict(train=True)),
    ("gpt2", dict(train=True, checkpoint="blocks", mixed_precision="bf16")),
    ("bert", dict(train=False)),
])
def test_built_program_is_the_exported_one(name, opts):
    model, kwargs = _hf(name, 6)
    built, whole = _both(model, kwargs, **opts)
    assert built.blocks.reused and not whole.blocks.reused
    assert built.blocks.stack.count == 6
    assert print_module(built.module, debuginfo=True) == print_module(whole.module, debuginfo=True)
    assert [i.fqn for i in built.info.inputs] == [i.fqn for i in whole.info.inputs]
    assert built.info.unused_parameters == whole.info.unused_parameters


class Block(nn.Module):
    def __init__(self, width: int, index: int, skip_at: int | None = None) -> None:
        super().__init__()
        self.layer_idx = index   # follows the block's index (as HuggingFace's): allowed
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.drop = nn.Dropout(0.0)
        self.skip_at = skip_at

    def forward(self, x):
        if self.layer_idx == self.skip_at:   # a block that behaves by its index
            return x
        return x + self.drop(F.gelu(self.fc(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, depth: int = 8, width: int = 8, read_all: bool = False, skip_at: int | None = None,
                 mean: bool = False, by_range: bool = False) -> None:
        super().__init__()
        self.inp = nn.Linear(4, width)
        self.blocks = nn.ModuleList(Block(width, i, skip_at) for i in range(depth))
        self.out = nn.Linear(width, 2)
        self.read_all, self.mean, self.depth = read_all, mean, depth if by_range else None

    def forward(self, x):
        h = self.inp(x)
        seen = []
        for i in range(self.depth) if self.depth else range(len(self.blocks)):
            h = self.blocks[i](h)
            seen.append(h)
        if self.read_all:   # every block's output read after the loop: a middle block read outside
            h = h + sum(seen)
        if self.mean:       # the number of blocks is a constant of the program
            h = h / len(self.blocks)
        return self.out(h)


def test_built_program_trains_like_the_model():
    """Eight blocks (the automatic threshold): built by default; loss and every gradient equal
    eager PyTorch's (rtol 1e-4), the frozen input layer gets none."""
    torch.manual_seed(0)
    model = Stack()
    model.inp.requires_grad_(False)
    x, y = torch.randn(5, 4), torch.randn(5, 2)
    cap = capture_program(model, ((x,), (y,)), train=True, loss_fn=F.mse_loss)
    assert cap.blocks.reused and cap.blocks.stack.count == MIN_BLOCKS
    check_train(cap, model, (x,), F.mse_loss, (y,))
    grads = {o.fqn for o in cap.info.outputs if o.kind == "gradient"}
    assert "blocks.7.fc.weight" in grads and "inp.weight" not in grads


def test_fewer_blocks_than_the_threshold_are_exported_whole():
    model = Stack(depth=MIN_BLOCKS - 1)
    cap = capture_program(model, (torch.randn(2, 4),))
    assert not cap.blocks.reused and "blocks" in cap.blocks.reason


def test_a_middle_block_read_outside_is_exported_whole_and_said():
    torch.manual_seed(0)
    model = Stack(read_all=True)
    x = torch.randn(3, 4)
    with pytest.warns(RepeatedBlocksWarning, match="exported one by one"):
        cap = capture_program(model, (x,))
    assert not cap.blocks.reused
    whole = capture_program(model, (x,), reuse_blocks=False)
    assert print_module(cap.module, debuginfo=True) == print_module(whole.module, debuginfo=True)


@pytest.mark.parametrize("variant,match", [
    (dict(skip_at=7), "exported one by one"),                   # the last block skips its body: the check sees it
    (dict(mean=True), "exported one by one"),                   # 1 / len(blocks): 1/3 built, 1/4 traced
    (dict(by_range=True), r"tracing blocks \[0, 1, 2\] alone failed: .*IndexError"),   # needs all its blocks
])
def test_models_that_are_not_their_blocks_repeated_are_exported_whole(variant, match):
    torch.manual_seed(0)
    model = Stack(**variant)
    x = torch.randn(3, 4)
    with pytest.warns(RepeatedBlocksWarning, match=match):
        cap = capture_program(model, (x,))
    assert not cap.blocks.reused
    whole = capture_program(model, (x,), reuse_blocks=False)
    assert print_module(cap.module, debuginfo=True) == print_module(whole.module, debuginfo=True)


def test_blocks_that_differ_are_not_repeated():
    model = Stack()
    model.blocks[5].drop.p = 0.1
    stack, why = find_block_stack(model)
    assert stack is None and "block 5 of 'blocks' differs from block 0 in 'drop.p' (0.1 vs 0.0)" in why
    model = Stack()
    model.blocks[2].fc.weight = model.blocks[1].fc.weight   # tied across blocks
    stack, why = find_block_stack(model)
    assert stack is None and "shared by blocks 1 and 2" in why
    model = Stack()
    model.blocks[3].requires_grad_(False)   # a frozen block: its program has no weight gradients
    stack, why = find_block_stack(model)
    assert stack is None and "block 3" in why and "frozen" in why
    model = Stack()
    model.blocks[4].eval()
    stack, why = find_block_stack(model)
    assert stack is None and "training" in why
    stack, why = find_block_stack(Stack())
    assert stack is not None and stack.path == "blocks" and stack.count == 8


def test_hf_layers_with_their_own_layer_types_fall_back():
    """Mistral's program grows by more than its blocks (a mask constant per layer): the check at 4
    blocks catches it, the capture is the whole export."""
    model, kwargs = _hf("mistral", 6)
    with pytest.warns(RepeatedBlocksWarning, match="differs|nodes"):
        cap = capture_program(model, (), train=True, example_kwargs=kwargs, reuse_blocks=True)
    whole = capture_program(model, (), train=True, example_kwargs=kwargs, reuse_blocks=False)
    assert print_module(cap.module) == print_module(whole.module)


def test_meta_model_is_built_on_meta():
    from spmdc.examples.llama3 import build

    model, kwargs, _ = build("1b", batch=1, seq=8, layers=MIN_BLOCKS)
    cap = capture_program(model, (), train=True, example_kwargs=kwargs)
    assert cap.blocks.reused
    assert all(p.device.type == "meta" for p in model.parameters())
    assert sum(1 for i in cap.info.inputs if i.fqn and i.fqn.endswith("q_proj.weight")) == MIN_BLOCKS
    whole = capture_program(model, (), train=True, example_kwargs=kwargs, reuse_blocks=False)
    assert print_module(cap.module, debuginfo=True) == print_module(whole.module, debuginfo=True)


def _cut_captures(model, args, depths, **opts):
    """Within one search (``reusing_captures``): the model cut to each of ``depths`` captured, and
    each cut's real export (no template) outside it."""
    from spmdc.frontend.capture import reusing_captures
    from spmdc.frontend.repeated import keep_blocks

    stack = find_block_stack(model)[0]
    searched, real = [], []
    with reusing_captures():
        for d in depths:
            with keep_blocks(model, stack, list(range(d))):
                searched.append(capture_program(model, args, **opts))
    for d in depths:
        with keep_blocks(model, stack, list(range(d))):
            real.append(capture_program(model, args, reuse_blocks=False, **opts))
    return searched, real


@pytest.mark.parametrize("meta", [False, True])
def test_a_model_cut_in_a_search_is_built_from_one_template(meta):
    """The layout search prices a deep model cut to 4, 5, 6, ... blocks: each cut is built from
    one template traced once (and checked against the uncut model's last block, on meta too), and
    is the program the cut model's own export gives."""
    from spmdc.examples.llama3 import build

    torch.manual_seed(0)
    if meta:
        model, kwargs, _ = build("1b", batch=1, seq=8, layers=12)
        args, opts = (), dict(train=True, example_kwargs=kwargs)
    else:
        model = Stack(depth=12)
        model.inp.requires_grad_(False)
        args, opts = ((torch.randn(5, 4),), (torch.randn(5, 2),)), dict(train=True, loss_fn=F.mse_loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RepeatedBlocksWarning)
        searched, real = _cut_captures(model, args, [4, 5, 7, 12], **opts)
    assert all(c.blocks.reused for c in searched) and not any(c.blocks.reused for c in real)
    assert ["template" in c.blocks.timings for c in searched] == [True, False, False, False]   # (traced once)
    for d, c, r in zip([4, 5, 7, 12], searched, real):
        assert c.blocks.stack.count == d
        assert print_module(c.module, debuginfo=True) == print_module(r.module, debuginfo=True), d
    if meta:
        assert all(p.device.type == "meta" for p in model.parameters())


def test_a_cut_model_whose_last_block_differs_is_exported_in_a_search():
    """The uncut model's last block behaves by its index: the template's check fails once (said
    once), and every cut is its own export."""
    torch.manual_seed(0)
    model = Stack(depth=12, skip_at=11)
    with pytest.warns(RepeatedBlocksWarning, match="exported one by one") as said:
        searched, real = _cut_captures(model, (torch.randn(3, 4),), [4, 6, 12])
    assert sum("exported one by one" in str(w.message) for w in said) == 1
    assert not any(c.blocks.reused for c in searched)
    for c, r in zip(searched, real):
        assert print_module(c.module, debuginfo=True) == print_module(r.module, debuginfo=True)
