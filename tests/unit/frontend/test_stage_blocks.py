"""A pipeline stage's repeated blocks captured once (spmdc.frontend.stage_blocks with
spmdc.frontend.repeated): every program of every stage, built from traces of the stage cut to 4
and 5 blocks, equals the program the whole stage's export gives (printed IR with locations, input
names, unused parameters); a stage whose blocks differ or are too few is exported whole."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from spmdc.api.pipeline_executor import stage_jobs
from spmdc.compiler.options import CompileOptions
from spmdc.frontend.capture import capture_program
from spmdc.frontend.repeated import RepeatedBlocksWarning
from spmdc.frontend.stages import split_stages
from spmdc.ir.printer import print_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))

import hf_tiny  # noqa: E402


def _hf(name: str, layers: int) -> tuple[nn.Module, dict]:
    import transformers as T

    cfg = hf_tiny.CONFIGS[name]()
    d = cfg.to_dict()
    d.pop("layer_types", None)
    d["n_layer" if name == "gpt2" else "num_hidden_layers"] = layers
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(type(cfg)(**d))
    ids, labels = hf_tiny.batch()
    return model, {"input_ids": ids, "labels": labels}


def _programs(split, mb):
    """Every (stage, program) capture as the pipeline compiles it: built from its blocks, and whole."""
    for k, stage in enumerate(split.stages):
        for job in stage_jobs(split, k, mb, CompileOptions()):
            args = dict(train=job["train"], loss_fn=job.get("loss_fn"), loss_inputs=job.get("loss_inputs", ()))
            with warnings.catch_warnings():
                warnings.simplefilter("error", RepeatedBlocksWarning)
                built = capture_program(stage.module, job["inputs"], reuse_blocks=True, **args)
            whole = capture_program(stage.module, job["inputs"], reuse_blocks=False, **args)
            yield k, job["train"], built, whole


@pytest.mark.parametrize("name,stages,opts", [
    # three stages: the first (embeddings), a middle one (a boundary input and output) and the last (the loss)
    ("llama", [["model.embed_tokens", "model.layers.0-5"], ["model.layers.6-11"],
               ["model.layers.12-17", "model.norm", "lm_head"]], {}),
    ("gpt2", [["transformer.wte", "transformer.wpe", "transformer.h.0-5"],
              ["transformer.h.6-11", "transformer.ln_f", "lm_head"]],
     dict(mixed_precision="bf16", checkpoint="blocks")),
])
def test_every_stage_program_built_from_its_blocks_is_the_exported_one(name, stages, opts):
    layers = 6 * len(stages)
    model, kwargs = _hf(name, layers)
    split = split_stages(model, (), stages=stages, kwargs=kwargs, **opts)
    firsts = [s.module.repeated_blocks.stack.first for s in split.stages]
    assert firsts == [6 * k for k in range(len(stages))]
    assert all(s.module.repeated_blocks.stack.count == 6 for s in split.stages)
    seen = 0
    for k, train, built, whole in _programs(split, list(kwargs.values())):
        assert built.blocks.reused, (k, train, built.blocks.reason)
        assert not whole.blocks.reused
        assert print_module(built.module, debuginfo=True) == print_module(whole.module, debuginfo=True), (k, train)
        assert [i.fqn for i in built.info.inputs] == [i.fqn for i in whole.info.inputs]
        assert built.info.unused_parameters == whole.info.unused_parameters
        seen += 1
    assert seen == 2 * len(stages) - 1   # a forward and a training program per stage, the last: training only


class Block(nn.Module):
    def __init__(self, width: int, scale: float) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.scale = scale   # a plain attribute: blocks with other values are other programs

    def forward(self, x):
        return x + F.gelu(self.fc(x)) * self.scale


class Stack(nn.Module):
    def __init__(self, scales: list[float]) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(Block(8, s) for s in scales)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.out(h)


def test_a_stage_of_one_block_or_of_blocks_that_differ_is_exported_whole():
    torch.manual_seed(0)
    x, y = torch.randn(4, 4), torch.randn(4, 2)
    same = Stack([1.0] * 7)
    split = split_stages(same, (x,), stages=[["inp", "blocks.0"], ["blocks.1-6", "out"]], loss_fn=F.mse_loss,
                         loss_inputs=(y,))
    assert split.stages[0].module.repeated_blocks is None          # one block: nothing to repeat
    assert split.stages[1].module.repeated_blocks.stack.count == 6
    differ = Stack([1.0] * 6 + [2.0])   # the model's blocks differ: no stack, no stage runs
    split = split_stages(differ, (x,), stages=[["inp", "blocks.0-2"], ["blocks.3-6", "out"]], loss_fn=F.mse_loss,
                         loss_inputs=(y,))
    assert all(s.module.repeated_blocks is None for s in split.stages)
    # and a stage still captures (whole) and computes the model's loss
    cap = capture_program(split.stages[1].module, [torch.zeros(4, 8, requires_grad=True), y], train=True)
    assert not cap.blocks.reused
