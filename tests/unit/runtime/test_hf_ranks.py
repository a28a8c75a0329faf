"""HuggingFace families at default settings train on 4 gloo ranks under megatron, fsdp and
fsdp+tp (one launch), matching eager PyTorch on one device: loss and gradients rtol 1e-4,
atol 1e-5, with the same seed on every side (GPT-2, OPT and BERT keep their dropout 0.1).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))

import hf_tiny  # noqa: E402
from hf_ranks_workers import compile_cases  # noqa: E402
from rank_checks import assert_step_matches  # noqa: E402

from spmdc.api.worker import run_steps  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402

SEED = 5
FAMILIES = ["gpt2", "llama", "gemma", "falcon", "bloom", "gptj", "stablelm", "olmo", "bert", "opt", "phi3"]
PLANS = [("megatron", Mesh({"tp": 4})), ("fsdp", Mesh({"dp": 4})), ("fsdp+tp", Mesh({"dp": 2, "tp": 2}))]
CASES = [(f, p, m) for f in FAMILIES for p, m in PLANS]


def _eager(name):
    model = hf_tiny.build(name)
    ids, labels = hf_tiny.batch()
    torch.manual_seed(SEED)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def runs():
    steps = compile_cases(CASES)   # the global programs, compiled side by side on the cores
    return steps, launch(run_steps, 4, (steps, "codegen", "torch", SEED), timeout_s=900)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{f}-{p}" for f, p, _ in CASES])
def test_training_step_matches_one_device(runs, case):
    steps, results = runs
    name = CASES[case][0]
    loss, grads = _eager(name)
    assert_step_matches(steps[case], [results[rank][case] for rank in range(4)], loss, grads,
                        f"{name} {CASES[case][1]}")
