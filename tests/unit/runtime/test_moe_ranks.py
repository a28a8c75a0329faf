"""Mixtures of experts train on 4 gloo ranks (one launch) under megatron (tensor parallelism inside
every expert), fsdp and fsdp+tp, matching eager PyTorch on one device: loss and gradients rtol 1e-4,
atol 1e-5, every rank issuing exactly its program's collectives. Models: HuggingFace Mixtral (top-2
of 4), Qwen2-MoE (top-4 of 8, shared expert), DeepSeek-V3 (multi-head latent attention, grouped
top-k, shared expert) at their default settings, and the hand-written MoE of tests/models/moe.py
whose expert 3 gets no token; and expert parallelism (``ep`` on ep=4, ``fsdp+ep`` on dp=2 x ep=2):
each rank holds its experts, which no collective ever gathers, and runs them (HuggingFace families)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))

from moe_ranks_workers import build, compile_cases  # noqa: E402
from rank_checks import assert_step_matches  # noqa: E402

from spmdc.api.worker import run_steps  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402

SEED = 5
TP, DP, DPTP = ("megatron", Mesh({"tp": 4})), ("fsdp", Mesh({"dp": 4})), ("fsdp+tp", Mesh({"dp": 2, "tp": 2}))
EP4, DPEP = ("ep", Mesh({"ep": 4})), ("fsdp+ep", Mesh({"dp": 2, "ep": 2}))
CASES = [("mixtral", *TP), ("mixtral", *DP), ("mixtral", *DPTP), ("qwen2_moe", *TP), ("deepseek_v3", *DPTP),
         ("moe", *DP), ("moe", *TP), ("moe_dense", *DPTP),
         ("mixtral", *EP4), ("mixtral", *DPEP), ("deepseek_v3", *DPEP), ("moe", *EP4)]


def _eager(name):
    model, args, kwargs, loss_fn, loss_inputs = build(name)
    torch.manual_seed(SEED)
    out = model(*args, **kwargs)
    loss = out.loss if loss_fn is None else loss_fn(out, *loss_inputs)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def runs():
    steps = compile_cases(CASES)
    return steps, launch(run_steps, 4, (steps, "codegen", "torch", SEED), timeout_s=900)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{n}-{p}" for n, p, _ in CASES])
def test_moe_training_step_matches_one_device(runs, case):
    steps, results = runs
    name = CASES[case][0]
    loss, grads = _eager(name)
    assert_step_matches(steps[case], [results[rank][case] for rank in range(4)], loss, grads,
                        f"{name} {CASES[case][1]}")


def test_megatron_splits_every_expert_and_keeps_the_router_whole():
    from spmdc.compiler.plan_resolution import conv1d_modules
    from spmdc.dialects.shard.placements import Shard, StridedShard
    from spmdc.sharding.plan import preset

    model = build("mixtral")[0]
    params = {n: tuple(p.shape) for n, p in model.named_parameters()}
    plan = preset("megatron", Mesh({"tp": 4}), params, transposed=conv1d_modules(model))
    layer = "model.layers.0.mlp."
    assert plan.params[layer + "experts.gate_up_proj"].storage["tp"] == StridedShard(1, 2)   # [E, 2I, H]: gate|up
    assert plan.params[layer + "experts.down_proj"].storage["tp"] == Shard(2)                # [E, H, I]: row-parallel
    assert layer + "gate.weight" not in plan.params                                         # the router: replicated
    # stored [E, in, out] (is_transposed experts): the roles of dims 1 and 2 swap
    t = preset("megatron", Mesh({"tp": 2}), {"e.gate_up_proj": (4, 8, 16), "e.down_proj": (4, 8, 8)},
               transposed={"e"})
    assert t.params["e.gate_up_proj"].storage["tp"] == StridedShard(2, 2)
    assert t.params["e.down_proj"].storage["tp"] == Shard(1)


GROUPED = {"mixtral", "qwen2_moe", "deepseek_v3"}   # experts as grouped matmuls (HuggingFace's experts)
EP_CASES = [i for i, (n, p, _) in enumerate(CASES) if "ep" in p and n in GROUPED]


@pytest.mark.parametrize("case", EP_CASES, ids=[f"{CASES[i][0]}-{CASES[i][1]}" for i in EP_CASES])
def test_expert_parallel_ranks_hold_and_run_only_their_experts(runs, case):
    """Each rank's program takes its E/ep experts' weights, never gathers one over ep, and its
    grouped matmuls run those. (The hand-written MoE under ep also matches one device, above; its
    per-expert loop selects one expert at a time from the stacked weight, so its experts are
    stored, not run, per rank.)"""
    from spmdc.sharding.plan import is_expert_weight

    steps, _ = runs
    step = steps[case]
    ep = step.mesh.shape[step.mesh.axis_names.index("ep")]
    experts = {kind.split(":", 1)[1]: shape for kind, shape in zip(step.arg_kinds, step.arg_shapes)
               if kind.startswith("param:") and is_expert_weight(kind.split(":", 1)[1], shape)}
    assert experts, "the model has stacked expert weights"
    module = step.rank_module(0)
    func = next(op for op in module.body.ops if op.name == "func.func" and op.attributes["sym_name"].value == "main")
    local = {func.arg_attrs(i)["spmdc.param"].value: tuple(a.type.shape) for i, a in enumerate(func.args)
             if "spmdc.param" in func.arg_attrs(i)}
    for fqn, shape in experts.items():
        assert local[fqn][0] == shape[0] // ep, f"{fqn}: rank 0 holds {local[fqn]} of {shape}"
    full = {tuple(s) for s in experts.values()}
    for op in module.walk():
        if op.name.startswith("comm.all_gather") and op.attributes["axis"].value == "ep":
            for r in op.results:
                assert tuple(getattr(r.type, "shape", ())) not in full, f"an expert weight gathered over ep: {op}"
    gm = [op for op in module.walk() if op.name == "tensor.grouped_matmul"]
    assert gm and all(op.operand(1).type.shape[0] == experts[next(iter(experts))][0] // ep for op in gm)
