"""Rank side of test_switch_kinds.py: one training run switched between layout kinds (one mesh,
pipeline stages, device groups) and from strided shards, on 4 gloo ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

STEPS, LR = 2, 1e-3   # steps per segment; AdamW
PP2_TP2 = {"name": "pp2-tp2", "microbatches": 2, "stages": [
    {"ranks": [0, 1], "mesh": "tp=2", "plan": "megatron"}, {"ranks": [2, 3], "mesh": "tp=2", "plan": "megatron"}]}
GROUPS = {"name": "two-groups", "groups": [
    {"name": "mega", "ranks": [0, 1], "mesh": "tp=2", "plan": "megatron", "share": 1},
    {"name": "shard", "ranks": [2, 3], "mesh": "dp=2", "plan": "fsdp", "share": 1}]}
HF_GPT2 = str(Path(__file__).resolve().parents[2] / "models" / "hf_tiny.py") + ":gpt2"   # dropout 0.1, fused c_attn
# name -> (workload, batch, first (mesh, plan), then (mesh, plan, direct) per switch)
CHAINS: dict[str, tuple[str, int, tuple, list[tuple]]] = {
    # llama-tiny (no dropout: pipeline stages refuse random ops): fsdp -> pipeline -> groups -> fsdp;
    # pipeline -> groups through the whole tensors (direct=False: each broadcast from its stage)
    "llama fsdp>pp>groups>fsdp": ("llama-tiny", 8, ("dp=4", "fsdp"),
                                  [(None, "pp", True), (None, "groups", False), ("dp=4", "fsdp", True)]),
    # HF GPT-2 at its defaults (dropout on): megatron stores the fused c_attn strided (SS)
    "hf-gpt2 megatron>fsdp": (HF_GPT2, 4, ("tp=4", "megatron"), [("dp=4", "fsdp", True)]),
}


def _plan(name: str) -> Any:
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.pipeline_plan import PipelinePlan

    return {"pp": lambda: PipelinePlan.from_dict(PP2_TP2), "groups": lambda: HeteroPlan.from_dict(GROUPS)}.get(
        name, lambda: name)()


def run_chains() -> dict[str, Any]:
    import torch.distributed as dist

    import spmdc
    from spmdc.frontend.workloads import load_workload

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        for name, (workload, batch, (mesh, plan), switches) in CHAINS.items():
            torch.manual_seed(0)
            w = load_workload(workload, batch=batch)
            m = spmdc.compile(w.model, tuple(w.inputs), mesh=mesh, plan=plan, train=True, loss_fn=w.loss_fn,
                              loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs,
                              optimizer=("adamw", {"lr": LR}))
            torch.manual_seed(1)
            losses, reports = [], []
            for k in range(len(switches) + 1):
                if k:
                    new_mesh, new_plan, direct = switches[k - 1]
                    m = m.switch(_plan(new_plan), mesh=new_mesh, direct=direct)
                    r = m.switch_report
                    reports.append({"kind": m.kind, "messages": r.messages, "tensors": r.tensors,
                                    "streamed": r.streamed, "bytes_total": r.bytes_total})
                losses += [float(m.step(*w.inputs, *w.loss_inputs, **w.kwargs)) for _ in range(STEPS)]
            state = m.full_state_dict()
            optim = {n: {s: m.full_state_tensor(n, s) for s in ("exp_avg", "exp_avg_sq")} for n in m.state_holdings()}
            steps = {n: float(m.state_pieces(n)["step"]) for n in m.state_holdings()}
            out[name] = {"losses": losses, "reports": reports, "state": state if dist.get_rank() == 0 else None,
                         "optim": optim if dist.get_rank() == 0 else None, "steps": steps}
            dist.barrier()
        return out
    finally:
        dist.destroy_process_group()
