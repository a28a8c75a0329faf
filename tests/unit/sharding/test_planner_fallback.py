"""The sharding planner never gives up: where no strategy of an op yields the result layouts
propagation gave it, the op runs in the best strategy there is and a redistribution after it
brings the results to their layouts, with one warning per op site (op, location, bytes moved).

LoRA workloads (frozen base weights, trainable adapters; ``tests/models/lora.py``) train on 4 gloo
ranks under megatron, fsdp+tp and sp (one launch) and match eager PyTorch on one device: loss and
the adapters' gradients rtol 1e-4, atol 1e-5; the frozen weights get no gradient. Under sp the
bidirectional block's ``tensor.attention_grad`` is such an op (dq by queries, dk/dv by heads)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runtime"))

import lora  # noqa: E402
from rank_checks import assert_step_matches  # noqa: E402

from spmdc.api.worker import run_steps  # noqa: E402
from spmdc.compiler import compile_step  # noqa: E402
from spmdc.dialects.shard import Replicate, Shard  # noqa: E402
from spmdc.ir.diagnostics import DiagnosticError  # noqa: E402
from spmdc.ir.parser import parse_module  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402
from spmdc.sharding.planner import moved_bytes  # noqa: E402
from spmdc.sharding.strategy import ShardingFallbackWarning, choose, choose_or_fallback, rule_for  # noqa: E402

TP4, DP2_TP2 = Mesh({"tp": 4}), Mesh({"dp": 2, "tp": 2})
CASES = [("mlp", "megatron", TP4), ("mlp", "fsdp+tp", DP2_TP2), ("attention", "fsdp+tp", DP2_TP2),
         ("bidirectional", "megatron", TP4), ("bidirectional", "sp", TP4)]
FALLBACK = ("bidirectional", "sp")   # the case whose attention backward falls back

T = "tensor<2x4x8x8xf32>"
GRAD = f"""
shard.mesh @mesh = <["tp" = 4]>
func.func @f(%do: {T}, %q: {T}, %k: {T}, %v: {T}, %o: {T}) -> ({T}, {T}, {T}) {{
  %dq, %dk, %dv = tensor.attention_grad %do, %q, %k, %v, %o {{scale = 0.35}} : ({T}, {T}, {T}, {T}, {T})
      -> ({T}, {T}, {T})
  func.return %dq, %dk, %dv : {T}, {T}, {T}
}}
"""


def _attention_grad():
    module = parse_module(GRAD)
    func = next(op for op in module.body.ops if op.name == "func.func")
    return next(op for op in func.body.ops if op.name == "tensor.attention_grad")


def test_choose_falls_back_where_no_strategy_yields_the_results():
    op = _attention_grad()
    heads, queries = (Shard(1),), (Shard(2),)
    ins = [queries] + [heads] * 4
    with pytest.raises(DiagnosticError, match="no sharding strategy on mesh axis #0 produces the required"):
        choose(op, rule_for(op), (4,), ins, [queries, heads, heads], exact_results=True)
    choice, fell_back = choose_or_fallback(op, rule_for(op), (4,), ins, [queries, heads, heads], exact_results=True)
    assert fell_back and choice.results == (heads, heads, heads)   # by heads: one result to move, not two
    choice, fell_back = choose_or_fallback(op, rule_for(op), (4,), ins, [heads, heads, heads], exact_results=True)
    assert not fell_back and choice.operands[0] == heads


def test_moved_bytes_follow_the_ring_algorithms():
    nbytes = 2 * 4 * 8 * 8 * 4.0
    assert moved_bytes((Shard(1),), (Shard(2),), 4, nbytes, (4,)) == nbytes * 3 / 16   # all_to_all
    assert moved_bytes((Shard(1),), (Replicate(),), 4, nbytes, (4,)) == nbytes * 3 / 4   # all_gather
    assert moved_bytes((Replicate(),), (Shard(0),), 4, nbytes, (4,)) == 0.0              # all_slice


def _compile(name, plan, mesh):
    model, ((x,), (y,)), loss_fn = getattr(lora, name)()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ShardingFallbackWarning)
        step = compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,))
    return step, [str(w.message) for w in caught if issubclass(w.category, ShardingFallbackWarning)]


def _eager(name):
    model, ((x,), (y,)), loss_fn = getattr(lora, name)()
    loss = loss_fn(model(x), y)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


@pytest.fixture(scope="module")
def runs():
    compiled = [_compile(*case) for case in CASES]
    steps = [s for s, _ in compiled]
    return compiled, launch(run_steps, 4, (steps, "codegen", "torch"), timeout_s=600)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{m}-{p}" for m, p, _ in CASES])
def test_lora_step_matches_one_device(runs, case):
    compiled, results = runs
    name, plan, _ = CASES[case]
    step, _ = compiled[case]
    loss, grads = _eager(name)
    kinds = set(step.result_kinds)
    assert {f"grad:{n}" for n in grads} == kinds - {"loss"}   # adapters (and the rest) only: W is frozen
    frozen, adapter = ("fc1.weight", "fc1.lora_A") if name == "mlp" else ("q_proj.weight", "q_proj.lora_B")
    assert f"grad:{frozen}" not in kinds and f"grad:{adapter}" in kinds
    assert_step_matches(step, [results[rank][case] for rank in range(4)], loss, grads, f"lora {name} {plan}")


def test_fallback_warns_once_per_op_site_naming_op_location_and_bytes(runs):
    compiled, _ = runs
    messages = compiled[CASES.index((*FALLBACK, TP4))][1]
    assert len(messages) == 1, messages
    (msg,) = messages
    assert msg.startswith("'tensor.attention_grad' op at loc(") and "\n" not in msg
    assert "no sharding strategy produces the required result layout" in msg
    assert msg.endswith("extra bytes moved per rank") and " 0 extra bytes" not in msg
    others = [m for (name, plan, _), (_, ms) in zip(CASES, compiled) if (name, plan) != FALLBACK for m in ms]
    assert others == []   # where a strategy exists, nothing falls back


def test_spmdc_run_check_of_the_falling_back_lora_workload_passes():
    """Two optimizer steps (AdamW): losses and updated parameters equal one device's."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "models", "lora.py")
    res = subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", f"{path}:bidirectional", "--nproc", "4",
                          "--mesh", "tp=4", "--plan", "sp", "--steps", "2", "--optimizer", "adamw", "--lr", "0.01",
                          "--check"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "check passed" in res.stdout and "q_proj.lora_A" in res.stdout
    # the fallback is said on the terminal once (by the rank that compiled the step), not only in a log
    said = [ln for ln in res.stdout.splitlines() if "warning: 'tensor.attention_grad' op" in ln]
    assert len(said) == 1 and "extra bytes moved per rank" in said[0], res.stdout
