"""Rank side of test_compile_cache_ranks.py: warm starts on 4 gloo ranks (one launch).

Every case compiles a fresh model in a fresh module (nothing shared in memory but the files of
``$SPMDC_CACHE_DIR``) and trains it; each rank returns its losses, the full state afterwards and
what the compile cache did on it (a job compiles on one rank: the test sums the counts)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

STEPS = 3
SGD = ("sgd", {"lr": 0.1})
PIPELINE = {"name": "pp2", "microbatches": 2, "stages": [{"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp"},
                                                         {"ranks": [2, 3], "mesh": "dp=2", "plan": "dp"}]}
GROUPS = {"name": "groups2", "groups": [{"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp"},
                                        {"ranks": [2, 3], "mesh": "dp=2", "plan": "dp"}]}


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + torch.tanh(self.fc(h))


class Net(torch.nn.Module):
    """An input projection, two residual blocks (a pipeline's stages), a head."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(12, 8)
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.inp(x)))


def model() -> Net:
    torch.manual_seed(0)
    return Net()


def batch(rows: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(rows, 12, generator=g), torch.randn(rows, 4, generator=g)


def _compile(kind: str, x: torch.Tensor, y: torch.Tensor, **kw: Any) -> Any:
    import spmdc
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.pipeline_plan import PipelinePlan

    mesh, plan = {"mesh": ({"dp": 4}, "fsdp"), "groups": (None, HeteroPlan.from_dict(GROUPS)),
                  "pipeline": (None, PipelinePlan.from_dict(PIPELINE))}[kind]
    return spmdc.compile(model(), (x,), mesh=mesh, plan=plan, train=True, loss_fn=F.mse_loss, loss_inputs=(y,),
                         optimizer=SGD, **kw)


def _case(kind: str, rows: int = 8, **kw: Any) -> dict[str, Any]:
    from spmdc.compiler import compile_cache as cc

    cc.stats.reset()
    x, y = batch(rows)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        cm = _compile(kind, x, y, **kw)
    losses = [float(cm.step(x, y)) for _ in range(STEPS)]
    state = {k: v.detach().clone() for k, v in cm.full_state_dict().items() if isinstance(v, torch.Tensor)}
    s = cc.stats
    runners = cm._programs.runners.values() if kind == "mesh" else []
    return {"losses": losses, "state": state, "hits": s.hits, "misses": s.misses, "stores": s.stores,
            "corrupt": s.corrupt, "uncacheable": s.uncacheable, "bypassed": s.bypassed, "key": s.last_key,
            "reason": s.last_reason, "rank_hits": s.rank_hits, "rank_misses": s.rank_misses,
            "rank_parsed": s.rank_parsed, "params": [(type(p).__name__, isinstance(p, torch.nn.Parameter), p.is_leaf,
                                                     p.requires_grad) for p in cm.parameters()],
            "sources": sorted(r.program.source for r in runners),
            "cache_warnings": [str(w.message) for w in got if issubclass(w.category, cc.CompileCacheWarning)]}


def cache_cases() -> dict[str, Any]:
    import torch.distributed as dist

    from spmdc.compiler.compile_cache import steps_dir

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        for kind in ("mesh", "groups", "pipeline"):
            out[f"{kind} cold"] = _case(kind)
            out[f"{kind} warm"] = _case(kind)
        out["mesh shape"] = _case("mesh", rows=16)
        key = out["mesh warm"]["key"]   # the entry this rank compiled (job j compiles on rank j)
        if key:
            (steps_dir() / f"{key}.pkl").write_bytes(b"\x80\x05 not a compiled step")
        dist.barrier()
        out["mesh corrupt"] = _case("mesh")
        out["mesh rewritten"] = _case("mesh")
        out["mesh off"] = _case("mesh", compile_cache=False)
        out["entries"] = sorted(p.name for p in steps_dir().iterdir())
    finally:
        dist.destroy_process_group()
    return out
