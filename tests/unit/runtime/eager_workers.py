"""Rank side of ``test_eager.py``: spmdc.eager against the compiled program on 4 gloo ranks."""

from __future__ import annotations

import importlib
from typing import Any

import torch

CASES = [("gpt2_tiny", {"dp": 2, "tp": 2}, "fsdp+tp"), ("llama_tiny", {"dp": 2, "tp": 2}, "fsdp+tp"),
         ("gpt2_tiny", {"tp": 4}, "megatron")]


def job(name: str):
    torch.manual_seed(0)
    return importlib.import_module(f"spmdc.examples.{name}").factory(batch=4)


def _run(cm, x, y, steps=2):
    cm.comm.stats.order = []
    torch.manual_seed(1)   # dropout draws: the same stream in every mode
    losses = [cm.step(x, y).detach().clone() for _ in range(steps)]
    return {"losses": losses, "order": list(cm.comm.stats.order), "state": cm.full_state_dict()}


def eager_four() -> dict[str, Any]:
    import torch.distributed as dist

    import spmdc

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        for name, mesh, plan in CASES:
            model, ((x,), (y,)), loss = job(name)
            kw = dict(mesh=mesh, plan=plan, train=True, loss_fn=loss, loss_inputs=(y,), optimizer=("sgd", {"lr": 0.1}))
            key = f"{name}/{plan}"
            eager = spmdc.eager(model, (x,), trace=True, **kw)
            out[key] = {"eager": _run(eager, x, y), "trace": eager.eager_trace,
                        "ops": eager.programs["train"].module.body.ops[-1].body.ops.__len__()}
            out[key]["plain"] = _run(spmdc.compile(model, (x,), bucket=False, overlap=False, fuse_collectives=False,
                                                   **kw), x, y)
            out[key]["default"] = _run(spmdc.compile(model, (x,), **kw), x, y)
            if name == "gpt2_tiny" and plan == "fsdp+tp":
                out[key]["no_hints"] = _run(spmdc.eager(model, (x,), hints=False, **kw), x, y)
        try:
            spmdc.eager(model, (x,), bucket=True, **kw)
            out["refused"] = None
        except TypeError as e:
            out["refused"] = str(e)
    finally:
        dist.destroy_process_group()
    return out
