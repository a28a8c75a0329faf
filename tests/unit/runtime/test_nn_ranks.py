"""torch.nn building blocks (nn.TransformerEncoder with its default dropout 0.1, a ViT with a
Conv2d patch embedding, a grouped Conv1d stack) train on 4 gloo ranks under megatron, fsdp
and fsdp+tp (one launch), matching eager PyTorch on one device with the same seed: loss and
gradients rtol 1e-4, atol 1e-5."""

from __future__ import annotations

import os
import re
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))

import nn_models  # noqa: E402
from rank_checks import assert_step_matches  # noqa: E402

from spmdc.api.worker import run_steps  # noqa: E402
from spmdc.compiler import compile_step  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402

SEED = 9
MODELS = ["encoder", "vit", "conv1d"]
PLANS = [("megatron", Mesh({"tp": 4})), ("fsdp", Mesh({"dp": 4})), ("fsdp+tp", Mesh({"dp": 2, "tp": 2}))]
# a grouped Conv1d stack has nothing megatron shards: its tp axis would only repeat work (refused below)
CASES = [(m, p, mesh) for m in MODELS for p, mesh in PLANS if not (m == "conv1d" and "tp" in mesh.axis_names)]


def _eager(name):
    model, ((x,), (y,)), loss_fn = getattr(nn_models, name)()
    torch.manual_seed(SEED)
    loss = loss_fn(model(x), y)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def runs():
    steps = []
    for name, plan, mesh in CASES:
        model, ((x,), (y,)), loss_fn = getattr(nn_models, name)()
        steps.append(compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,)))
    return steps, launch(run_steps, 4, (steps, "codegen", "torch", SEED), timeout_s=600)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{m}-{p}" for m, p, _ in CASES])
def test_training_step_matches_one_device(runs, case):
    steps, results = runs
    name = CASES[case][0]
    loss, grads = _eager(name)
    assert_step_matches(steps[case], [results[rank][case] for rank in range(4)], loss, grads,
                        f"{name} {CASES[case][1]}")


def test_convolution_is_captured_as_conv_ops(runs):
    steps, _ = runs
    ir = steps[MODELS.index("vit") * len(PLANS)].global_ir
    assert "tensor.conv " in ir and "tensor.conv_weight_grad" in ir


@pytest.mark.parametrize("plan,mesh", [p for p in PLANS if "tp" in p[1].axis_names], ids=lambda p: str(p))
def test_a_plan_with_nothing_to_shard_over_tp_is_refused(plan, mesh):
    from spmdc.sharding.plan import PlanError

    model, ((x,), (y,)), loss_fn = nn_models.conv1d()
    with pytest.raises(PlanError, match=f"mesh axis 'tp' \\(size {mesh.axis_size('tp')}\\) is used by no layout of "
                                        f"plan '{re.escape(plan)}'"):
        compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,))
