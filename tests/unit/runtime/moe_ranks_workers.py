"""Compile side of test_moe_ranks.py: each process compiles every n-th case (model built from its
seed, as the one-device reference builds it); the parent puts the steps back in order."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


def build(name: str) -> tuple[Any, tuple, dict, Any, tuple]:
    """``(model, args, kwargs, loss_fn, loss_inputs)`` of a MoE case: a HuggingFace family of
    tests/models/hf_tiny.py (its own loss from labels) or a workload of tests/models/moe.py; a name
    ending ``+iota`` is the same model, compiled with every integer ``arange`` a ``tensor.iota``."""
    import hf_tiny
    import moe

    name = name.removesuffix("+iota")
    if name in hf_tiny.CONFIGS:
        ids, labels = hf_tiny.batch()
        return hf_tiny.build(name), (), {"input_ids": ids, "labels": labels}, None, ()
    model, (args, target), loss_fn = getattr(moe, name)()
    return model, tuple(args), {}, loss_fn, tuple(target)


def compile_share(cases: list[tuple[str, str, Any]]) -> dict[int, Any]:
    from spmdc.compiler import compile_step

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = {}
    for i in range(rank, len(cases), world):
        name, plan, mesh = cases[i]
        model, args, kwargs, loss_fn, loss_inputs = build(name)
        with _iota(name.endswith("+iota")):
            out[i] = compile_step(model, args, mesh=mesh, plan=plan, train=True, kwargs=kwargs or None,
                                  loss_fn=loss_fn, loss_inputs=loss_inputs)
    return out


@contextlib.contextmanager
def _iota(every: bool) -> Iterator[None]:
    """Every integer ``arange`` a ``tensor.iota`` while it runs (as a real-size batch's are)."""
    from spmdc.frontend.aten import creation

    was = creation.IOTA_MIN_ELEMENTS
    creation.IOTA_MIN_ELEMENTS = 1 if every else was
    try:
        yield
    finally:
        creation.IOTA_MIN_ELEMENTS = was


def compile_cases(cases: list[tuple[str, str, Any]]) -> list[Any]:
    from spmdc.runtime.launcher import launch

    procs = max(1, min(4, os.cpu_count() or 1, len(cases)))
    shares = launch(compile_share, procs, (cases,), timeout_s=900)
    steps = {i: step for share in shares.values() for i, step in share.items()}
    return [steps[i] for i in range(len(cases))]
