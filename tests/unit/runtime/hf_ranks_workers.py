"""Compile side of test_hf_ranks.py: the cases' global programs, compiled by a few processes side by side.

    steps = compile_cases(CASES)   # [CompiledStep], in the cases' order

One process would capture the 33 (family, plan) cases one after another on one core while the others
sit idle; each process here takes every n-th case (the model built from its seed, as the one-device
reference builds it) and the parent puts the steps back in order.
"""

from __future__ import annotations

import os
from typing import Any


def compile_share(cases: list[tuple[str, str, Any]]) -> dict[int, Any]:
    """This process's share of ``cases`` (``RANK`` of ``WORLD_SIZE``): ``{case index: CompiledStep}``."""
    import hf_tiny

    from spmdc.compiler import compile_step

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = {}
    for i in range(rank, len(cases), world):
        name, plan, mesh = cases[i]
        model = hf_tiny.build(name)
        ids, labels = hf_tiny.batch()
        out[i] = compile_step(model, (), mesh=mesh, plan=plan, train=True, kwargs={"input_ids": ids, "labels": labels})
    return out


def compile_cases(cases: list[tuple[str, str, Any]], procs: int | None = None) -> list[Any]:
    """Every case's step, compiled by ``procs`` processes (default: one per core, at most 4)."""
    from spmdc.runtime.launcher import launch

    procs = procs or max(1, min(4, os.cpu_count() or 1, len(cases)))
    shares = launch(compile_share, procs, (cases,), timeout_s=900)
    steps = {i: step for share in shares.values() for i, step in share.items()}
    assert sorted(steps) == list(range(len(cases)))
    return [steps[i] for i in range(len(cases))]
