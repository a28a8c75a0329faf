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
         ("mixtral", *EP4), ("mixtral", *DPEP), ("deepseek_v3", *DPEP), ("moe", *EP4),
         ("mixtral+iota", *EP4)]   # (its aranges as tensor.iota, as a real-size batch's are)


def _eager(name):
    model, args, kwargs, loss_fn, loss_inputs = build(name)   # (+iota: the same model)
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


@pytest.mark.parametrize("case", EP_CASES, ids=[f"{CASES[i][0]}-{CASES[i][1]}" for i in EP_CASES])
def test_expert_parallel_dispatch_is_two_all_to_all_each_way(runs, case):
    """Expert parallelism moves tokens by all_to_all with run-time splits (``comm.expert_dispatch``
    / ``comm.expert_combine``): per MoE layer exactly one dispatch and one combine in the forward
    and one of each in the backward (tokens and routing weights packed into one exchange), plus the
    all-gather of the ``[ranks, experts]`` counts (the size exchange); no token all-gather over ep.
    Bytes: every routed assignment's row crosses once per move, no padding — summed over the ranks,
    each op moves ``world * (its rank's assignments) * (bytes of one row of every payload)``."""
    steps, results = runs
    step = steps[case]
    name = CASES[case][0]
    config = build(name)[0].config
    moe_layers = config.num_hidden_layers - (getattr(config, "first_k_dense_replace", None) or 0)
    world = 4
    module = step.rank_module(0)
    moves = [op for op in module.walk() if op.name in ("comm.expert_dispatch", "comm.expert_combine")]
    for kind in ("comm.expert_dispatch", "comm.expert_combine"):
        ops = [op for op in moves if op.name == kind]
        assert len(ops) == 2 * moe_layers, f"{name}: {len(ops)} {kind} for {moe_layers} MoE layers"
        want = 0
        for op in ops:
            dest = op.operand(op.payloads).type.shape[0]
            row = sum(v.type.num_bytes // v.type.shape[0] for v in op.operands[:op.payloads])
            want += world * dest * row
        got = sum(results[r][case]["issued_bytes"][kind] for r in range(world))
        assert results[0][case]["issued"][kind] == 2 * moe_layers
        assert got == want, f"{name} {kind}: {got} bytes moved, analytic {want}"
    assert any(len(op.operands) - 2 == 2 for op in moves), "tokens and routing weights travel in one exchange"
    # the load table's counts: every routed assignment of every MoE layer lands at one expert, once
    # per dp replica (world / ep of them), counted at its forward dispatch only
    ep = step.mesh.shape[step.mesh.axis_names.index("ep")]
    disp = next(op for op in moves if op.name == "comm.expert_dispatch")
    dest = disp.operand(disp.payloads)
    loads = [results[r][case]["expert_rows"] for r in range(world)]
    assert sum(sum(v.values()) for v in loads) == moe_layers * dest.type.shape[0] * world
    assert all(len(v) == config_experts(config) // ep for v in loads)
    counts = [op for op in module.walk() if op.name.startswith("comm.all_gather")
              and op.attributes["axis"].value == "ep" and op.operand(0).type.element_type == "i64"]
    assert len(counts) >= moe_layers, "one size exchange (the counts' all-gather) per MoE layer"
    if step.mesh.axis_names == ("ep",):   # (with dp too, tokens are gathered over dp first: docs/expert-parallel.md)
        for op in module.walk():
            if op.name.startswith("comm.all_gather") and op.attributes["axis"].value == "ep":
                assert op.operand(0).type.element_type == "i64", f"tokens gathered over ep: {op}"


def config_experts(config) -> int:
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    raise AssertionError("no expert count in the config")


def test_a_router_arange_as_iota_is_dispatched_by_expert_all_to_all(runs):
    """A MoE router's ``arange`` over a real-size batch's assignments is a ``tensor.iota`` (not a dense
    constant of millions of numbers): the expert dispatch rewrite still sees the inverse
    permutation, so each rank exchanges tokens by ``comm.expert_dispatch`` as with the dense
    constant (and matches one device: the parametrized test above)."""
    steps, results = runs
    case = next(i for i, (n, _, _) in enumerate(CASES) if n == "mixtral+iota")
    dense = next(i for i, c in enumerate(CASES) if c[:2] == ("mixtral", "ep"))
    assert "tensor.iota" in steps[case].global_ir and "tensor.iota" not in steps[dense].global_ir

    def moves(i):
        return sorted(op.name for op in steps[i].rank_module(0).walk()
                      if op.name in ("comm.expert_dispatch", "comm.expert_combine"))
    assert moves(case) and moves(case) == moves(dense)
    assert results[0][case]["issued"] == results[0][dense]["issued"]
