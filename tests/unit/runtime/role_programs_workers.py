"""Rank side of test_role_programs.py: each case trained twice on 4 gloo ranks, its rank programs
shared per role (the default) and then compiled by every rank (``share_programs=False``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

STEPS = 2
BATCH = 4
SGD = ("sgd", {"lr": 0.1})
HERE = str(Path(__file__).resolve())
HF_GPT2 = str(Path(__file__).resolve().parents[2] / "models" / "hf_tiny.py") + ":gpt2"   # dropout 0.1
GROUPS = {"name": "tp-and-fsdp", "groups": [
    {"name": "tp", "ranks": [0, 1], "mesh": "tp=2", "plan": "megatron", "share": 1},
    {"name": "fsdp", "ranks": [2, 3], "mesh": "dp=2", "plan": "fsdp", "share": 1}]}


class _Uneven(nn.Module):
    """Widths 10 and 6 over 4 ranks: torch.chunk pieces 3, 3, 3, 1 and 2, 2, 2, 0 (two shape roles)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(6, 10), nn.Linear(10, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def uneven(batch: int = BATCH) -> tuple[Any, ...]:
    torch.manual_seed(0)
    return _Uneven(), ((torch.randn(batch, 6),), (torch.randn(batch, 6),)), nn.functional.mse_loss


class _TwoBranch(nn.Module):
    """Two row-parallel projections with biases, summed: fuse-collectives' Partial bias add
    (comm.keep_at_origin) under megatron."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.o_proj, self.down_proj = nn.Linear(32, 16), nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.gelu(self.fc1(x))
        return self.o_proj(h) + self.down_proj(h * 2)


def two_branch(batch: int = BATCH) -> tuple[Any, ...]:
    torch.manual_seed(0)
    return _TwoBranch(), ((torch.randn(batch, 16),), (torch.randn(batch, 16),)), nn.functional.mse_loss


# name -> (workload, mesh, plan, options)
CASES: dict[str, tuple[str, Any, str | None, dict[str, Any]]] = {
    "one mesh fsdp+tp": ("gpt2-tiny", "dp=2,tp=2", "fsdp+tp", {}),
    "one mesh bias add": (HERE + ":two_branch", "dp=2,tp=2", "fsdp+tp", {"bucket": False}),
    "uneven fsdp": (HERE + ":uneven", "dp=4", "fsdp", {}),
    "dropout fsdp": (HF_GPT2, "dp=4", "fsdp", {}),
    "device groups": ("gpt2-tiny", None, None, {}),
    "pipeline": ("gpt2-tiny", "pp=2,dp=2", "fsdp", {}),
}


def run_case(workload: str, mesh: Any, plan: str | None, opts: dict[str, Any]) -> dict[str, Any]:
    import spmdc
    from spmdc.api.compile_shared import sharing
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.device_groups import HeteroPlan

    out = {}
    for share in (True, False):
        sharing.reset()
        torch.manual_seed(0)
        w = load_workload(workload, batch=BATCH)
        cm = spmdc.compile(w.model, tuple(w.inputs), mesh=mesh, plan=plan or HeteroPlan.from_dict(GROUPS),
                           train=True, loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs,
                           optimizer=SGD, share_programs=share, **opts)
        torch.manual_seed(1)   # dropout draws
        losses = [cm.step(*w.inputs, *w.loss_inputs, **w.kwargs).detach() for _ in range(STEPS)]
        sources = {k: p.source.split("\n", 1)[1] for k, p in cm.programs.items()}   # (less the codegen key)
        out["shared" if share else "own"] = {
            "losses": losses, "state": cm.full_state_dict(), "compiled": sharing.compiled,
            "received": sharing.received, "roles": sharing.roles, "sources": sources}
    return out


def run_cases(cases: dict[str, Any]) -> dict[str, Any]:
    from rank_checks import run_cases_in_gloo

    return run_cases_in_gloo(run_case, cases)
