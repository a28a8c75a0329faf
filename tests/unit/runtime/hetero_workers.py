"""Rank side of test_hetero.py: heterogeneous data parallelism on 6 gloo ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

PLAN = {"name": "hetero-dp", "groups": [
    {"name": "fast", "ranks": [0, 1, 2, 3], "mesh": "tp=4", "plan": "megatron", "share": 2},
    {"name": "slow", "ranks": [4, 5], "mesh": "tp=2", "plan": "megatron", "share": 1}]}
FSDP = {"name": "hetero-fsdp", "groups": [
    {"name": "big", "ranks": [0, 1, 2, 3], "mesh": "dp=4", "plan": "fsdp", "share": 2},
    {"name": "small", "ranks": [4, 5], "mesh": "dp=2", "plan": "fsdp", "share": 1}]}
WORKLOADS = ("gpt2-tiny", "llama-tiny")
# llama-tiny under heterogeneous fsdp against one device: "llama-tiny fsdp accum" below (AdamW, 2 micro-batches)
CASES = {name: PLAN for name in WORKLOADS} | {"gpt2-tiny fsdp": FSDP}
CASES |= {"contrastive": PLAN, "mlp": PLAN, "hf-gpt2": PLAN}
CONTRASTIVE = f"{__file__}:contrastive"
HF_GPT2 = str(Path(__file__).resolve().parents[2] / "models" / "hf_tiny.py") + ":gpt2"   # dropout 0.1, Conv1D


def spec(name: str) -> str:
    """The workload spec of a case."""
    return {"contrastive": CONTRASTIVE, "hf-gpt2": HF_GPT2}.get(name, name.split()[0])
BATCH, STEPS, LR = 6, 3, 0.1
# grad_accum=2 under device groups (AdamW): micro-batches of 6 rows, each split 4 + 2 across the groups
ACCUM = {"gpt2-tiny accum": PLAN, "llama-tiny fsdp accum": FSDP}
ACCUM_BATCH, ACCUM_LR = 12, 1e-3


def hetero_six() -> dict[str, Any]:
    import torch.distributed as dist

    from spmdc.api.entry import CompiledModule
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.device_groups import HeteroPlan

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out: dict[str, Any] = {}
    try:
        for name, plan in CASES.items():
            torch.manual_seed(0)
            w = load_workload(spec(name), batch=BATCH)
            cm = CompiledModule(w.model, tuple(w.inputs), mesh=None, plan=HeteroPlan.from_dict(plan), train=True,
                                loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs), optimizer=("sgd", {"lr": LR}),
                                example_kwargs=w.kwargs)
            cm.comm.stats.counts.clear()
            cm.comm.stats.bytes.clear()
            torch.manual_seed(1)
            losses = [float(cm.step(*w.inputs, *w.loss_inputs, **w.kwargs)) for _ in range(STEPS)]
            prog = cm.programs["train"]
            state = cm.full_state_dict()   # collective within the group: every rank calls it
            out[name] = {"losses": losses, "state": state if rank in (0, 4) else None,
                         "issued": dict(cm.comm.stats.counts), "comm_ops": prog.comm_ops,
                         "bytes": dict(cm.comm.stats.bytes),
                         "bsr_messages": [op.message_pairs for op in prog.module.walk() if op.name == "comm.bsr"],
                         "local_numel": sum(p.to_local().numel() for p in cm.parameters()),
                         "holder_sets": sorted(cm.comm.subgroups), "grp": cm.comm.coord("grp"),
                         "virtual_rank": cm.rank}
        for name, plan in ACCUM.items():
            out[name] = accumulated(name, plan, rank)
        return out
    finally:
        dist.destroy_process_group()


def accumulated(name: str, plan: dict[str, Any], rank: int) -> dict[str, Any]:
    """STEPS AdamW steps with grad_accum=2 under device groups: losses, the state on one rank per
    group, the split all-reduces issued and those of one micro-batch's program."""
    from spmdc.api.entry import CompiledModule
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.device_groups import HeteroPlan

    torch.manual_seed(0)
    w = load_workload(name.split()[0], batch=ACCUM_BATCH)
    cm = CompiledModule(w.model, tuple(w.inputs), mesh=None, plan=HeteroPlan.from_dict(plan), train=True,
                        loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs), optimizer=("adamw", {"lr": ACCUM_LR}),
                        example_kwargs=w.kwargs, grad_accum=2)
    cm.comm.stats.counts.clear()
    torch.manual_seed(1)
    losses = [float(cm.step(*w.inputs, *w.loss_inputs)) for _ in range(STEPS)]
    state = cm.full_state_dict()
    return {"losses": losses, "state": state if rank in (0, 4) else None, "issued": dict(cm.comm.stats.counts),
            "micro_ops": cm.programs["train"].comm_ops.get("comm.split_all_reduce", 0)}


class Contrastive(torch.nn.Module):
    """CLIP-style scores of every sample against the whole batch: the softmax runs over the batch,
    so the groups' embeddings cross the groups (batched send/recv)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.enc(x)
        return z @ z.T


def contrastive(batch: int = BATCH) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    x = torch.randn(batch, 16)
    return Contrastive(), ((x,), (torch.arange(batch),)), torch.nn.functional.cross_entropy
