"""Partitioned programs: collectives become ``comm.<method>(x, <literals>)`` calls.

With a fake collectives object (records calls) generated code issues exactly the calls
the interpreter issues, with the same results; one real 2-rank gloo launch runs compiled
mlp steps with ``executor="codegen"`` and ``executor="interpret"`` and compares them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from codegen_helpers import FakeCollectives, assert_same, random_inputs, run_both  # noqa: E402

from spmdc.codegen import emit_python  # noqa: E402
from spmdc.dialects.func import FuncOp  # noqa: E402
from spmdc.ir import parse_module  # noqa: E402
from spmdc.passes.manager import PassManager  # noqa: E402
from spmdc.passes.registry import parse_pipeline  # noqa: E402

LIT = Path(__file__).resolve().parents[3] / "tests/lit/passes/lower-redistribution.mlir"


@pytest.fixture(scope="module")
def rank3():
    module = parse_module(LIT.read_text(), str(LIT))
    PassManager(parse_pipeline("lower-redistribution,partition{rank=3}")).run(module)
    return module


EXPECTED_CALLS = {
    "s_to_r": "comm.all_gather(x, 'tp', 0, (13, 14))",
    "r_to_s": "comm.all_slice(x, 'tp', 1)",
    "p_to_r": "comm.all_reduce(x, ['tp'], 'sum')",
    "p_to_s": "comm.reduce_scatter(x, 'tp', 0, 'sum')",
    "s0_to_s1": "comm.all_to_all(x, 'tp', 1, 0, (13, 2))",
}


def test_collectives_are_literal_method_calls(rank3):
    for name, call in EXPECTED_CALLS.items():
        assert f"    v0 = {call}\n" in emit_python(rank3, name), name


def test_partitioned_lit_programs_match_the_interpreter(rank3):
    funcs = [op for op in rank3.body.ops if isinstance(op, FuncOp)]
    assert len(funcs) >= 6
    for f in funcs:
        want, got, ci, cg = run_both(rank3, f.sym_name, random_inputs(f), {"tp": 4})
        assert_same(want, got)
        assert cg.calls == ci.calls and cg.stats == ci.stats, f.sym_name


# -- compiled workloads -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def steps():
    from spmdc.compiler import compile_step
    from spmdc.examples import mlp
    from spmdc.sharding.mesh import Mesh

    model, ((x,), (y,)), loss_fn = mlp.factory()
    return [compile_step(model, (x,), mesh=Mesh({"tp": 2}), plan="megatron"),
            compile_step(model, (x,), mesh=Mesh({"dp": 2}), plan="fsdp", train=True, loss_fn=loss_fn,
                         loss_inputs=(y,)),
            compile_step(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", train=True,
                         loss_fn=loss_fn, loss_inputs=(y,))]


def test_compiled_rank_programs_match_the_interpreter_with_fake_collectives(steps):
    for step in steps:
        for rank in range(step.mesh.size):
            module = step.rank_module(rank)
            coords = step.mesh.coords(rank)
            f = next(op for op in module.body.ops if isinstance(op, FuncOp))
            sizes = dict(zip(step.mesh.axis_names, step.mesh.shape))
            want, got, ci, cg = run_both(module, "main", random_inputs(f, seed=rank), sizes, coords)
            assert_same(want, got)
            assert ci.calls and cg.calls == ci.calls and cg.stats == ci.stats


def test_unknown_executor_is_rejected(steps):
    from spmdc.api.worker import run_on_rank

    with pytest.raises(ValueError, match="unknown executor 'jit'"):
        run_on_rank(steps[0], 0, FakeCollectives({"tp": 2}), executor="jit")


def test_two_rank_launch_codegen_equals_interpret(steps):
    from spmdc.api.worker import run_steps
    from spmdc.runtime.launcher import launch

    launched = steps[:2]
    gen = launch(run_steps, 2, (launched, "codegen"), timeout_s=120)
    ref = launch(run_steps, 2, (launched, "interpret"), timeout_s=120)
    for rank in range(2):
        for g, r in zip(gen[rank], ref[rank]):
            assert len(g["outputs"]) == len(r["outputs"])
            for a, b in zip(g["outputs"], r["outputs"]):
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
            assert g["issued"] == r["issued"] == g["comm_ops"]
    files = list((Path(os.environ["SPMDC_CACHE_DIR"]) / "codegen").glob("spmdc_*.py"))
    assert len(files) == 4  # two programs x two ranks, each written once
