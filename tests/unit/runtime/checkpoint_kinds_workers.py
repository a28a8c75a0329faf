"""Rank side of test_checkpoint_kinds.py: one training run handed between layout kinds by checkpoints.

One 4-rank launch compiles a tiny language model (tied embedding and head, a persistent buffer)
three ways — pipeline stages (fsdp on ranks 0-1 | dp on ranks 2-3), fsdp on a 4-rank mesh, device
groups (fsdp on 0-1 | dp on 2-3) — and trains it for 10 AdamW steps, handed on by a checkpoint
every 2 steps:

    pipeline 1-2 → fsdp 3-4 → pipeline 5-6 → device groups 7-8 → fsdp 9-10

It reports each segment's losses and parameters, the optimizer state on both sides of each hand-off,
each checkpoint's entries (name → shape) and an interrupted pipeline save.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F

LR, VOCAB, DIM, BATCH, SEQ = 1e-2, 16, 8, 8, 4
PIPELINE = {"name": "pp2", "microbatches": 2, "stages": [{"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp"},
                                                         {"ranks": [2, 3], "mesh": "dp=2", "plan": "dp"}]}
GROUPS = {"name": "groups2", "groups": [{"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp"},
                                        {"ranks": [2, 3], "mesh": "dp=2", "plan": "dp"}]}
SEGMENTS = ("pipeline", "fsdp", "pipeline", "groups", "fsdp")   # 2 steps each


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(DIM, DIM)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + torch.tanh(self.fc(h))


class TinyLM(torch.nn.Module):
    """Embedding, two blocks, a scale (persistent buffer), a head tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.register_buffer("scale", torch.linspace(0.5, 1.5, DIM))
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.emb(ids)) * self.scale)


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def model() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def _compile(kind: str) -> Any:
    import spmdc
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.pipeline_plan import PipelinePlan

    x, y = batch()
    mesh, plan = {"pipeline": (None, PipelinePlan.from_dict(PIPELINE)), "fsdp": ({"dp": 4}, "fsdp"),
                  "groups": (None, HeteroPlan.from_dict(GROUPS))}[kind]
    return spmdc.compile(model(), (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                         optimizer=("adamw", {"lr": LR}))


def optimizer_state(m: Any) -> dict[str, torch.Tensor]:
    """``{fqn.stat: full tensor}`` of the module's optimizer, gathered over the job (every rank calls it)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict

    _, osd = get_state_dict(m.checkpoint_view().module, m.optimizer)
    mine = {f"{fqn}.{stat}": (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().clone()
            for fqn, stats in osd["state"].items() for stat, v in stats.items()}
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    merged: dict[str, torch.Tensor] = {}
    for d in every:   # ranks holding the same value (stages sharing a tie, groups, replicas) agree bitwise
        for k, v in d.items():
            assert torch.equal(merged.setdefault(k, v), v), k
    return merged


def entries(path: str) -> dict[str, tuple[int, ...] | None]:
    """A checkpoint's entries and their shapes (``None``: not a tensor), ``spmdc`` left out."""
    from spmdc.runtime.checkpointing import read_metadata

    md = read_metadata(path)
    return {k: tuple(getattr(m, "size", ())) if hasattr(m, "size") else None
            for k, m in md.state_dict_metadata.items() if k != "spmdc"}


def interrupted_save(pm: Any, path: str) -> dict[str, Any]:
    """A second pipeline save into ``path`` stopped after the previous checkpoint was moved aside."""
    from spmdc.runtime.checkpointing import STOP_ENV, CheckpointError, located

    os.environ[STOP_ENV] = "aside:raise"
    try:
        pm.save(path, extra={"step": -1})
        error = None
    except CheckpointError as e:
        error = str(e)
    finally:
        del os.environ[STOP_ENV]
    parent, name = os.path.split(path)
    return {"error": error, "listing": sorted(n for n in os.listdir(parent) if name in n),
            "located": os.path.basename(located(path))}


def chain(tmp: str) -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        x, y = batch()
        modules = {kind: _compile(kind) for kind in ("pipeline", "fsdp", "groups")}
        out: dict[str, Any] = {"segments": [], "handoffs": [], "entries": {}}
        step, previous = 0, None
        for i, kind in enumerate(SEGMENTS):
            m = modules[kind]
            if previous is not None:
                extra = m.load(previous)
                out["handoffs"].append({"extra": extra, "loaded": optimizer_state(m)})
            losses = [float(m.step(x, y)) for _ in range(2)]
            step += 2
            seg = {"kind": kind, "losses": losses, "state": m.full_state_dict(), "saved": optimizer_state(m)}
            out["segments"].append(seg)
            if i == len(SEGMENTS) - 1:
                break
            previous = f"{tmp}/{kind}{step}"
            m.save(previous, extra={"step": step})
            out["entries"][kind] = entries(previous)
            if kind == "pipeline" and step == 6:   # a stopped save keeps the step-6 checkpoint loadable
                out["interrupted"] = interrupted_save(m, previous)
        if dist.get_rank() != 0:   # rank 0's view suffices (every rank gathered the same)
            for seg in out["segments"]:
                seg.pop("state"), seg.pop("saved")
            for h in out["handoffs"]:
                h.pop("loaded")
        return out
    finally:
        dist.destroy_process_group()
