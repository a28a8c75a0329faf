"""Rank side of test_switch.py: switching plans at run time, against a run loaded from a
checkpoint written at the same step (the new module itself, its state then loaded from the
checkpoint: the same program, so any difference is the state the switch moved)."""

from __future__ import annotations

from typing import Any

import torch

BEFORE, AFTER = 2, 2
OPT = ("adamw", {"lr": 0.01})
PP2_TP2 = {"name": "pp2-tp2", "microbatches": 4, "stages": [
    {"ranks": [0, 1], "mesh": "tp=2", "plan": "megatron"}, {"ranks": [2, 3], "mesh": "tp=2", "plan": "megatron"}]}
# name -> (workload, batch, (old mesh, old plan), (new mesh, new plan or pipeline dict), new ranks, lost ranks)
FOUR = {
    "fsdp4 -> megatron4": ("gpt2-tiny", 8, ("dp=4", "fsdp"), ("tp=4", "megatron"), None, ()),
    "dp2xtp2 -> pp2xtp2": ("llama-tiny", 8, ("dp=2,tp=2", "fsdp+tp"), (None, PP2_TP2), None, ()),
}
# the 6-rank cases move an MLP (uneven shards: 32 rows over 6 and over 3 ranks, into 4): what they test is
# which ranks send which slices; gpt2-tiny's many tensors (tied embeddings included) switch on 4 ranks above
SIX = {
    # a planned shrink: ranks 2 and 5 hand over their shards and leave
    "fsdp6 -> fsdp4": ("mlp", 12, ("dp=6", "fsdp"), ("dp=4", "fsdp"), [0, 1, 3, 4], ()),
    # a failure: ranks 4 and 5 are lost; every slice comes from a surviving replica
    "hsdp 2x3 -> fsdp4, 4 and 5 lost": ("mlp", 12, ("rep=2,dp=3", "hsdp"), ("dp=4", "fsdp"), [0, 1, 2, 3], (4, 5)),
}


def _compile(w: Any, mesh: Any, plan: Any) -> Any:
    import spmdc

    return spmdc.compile(w.model, tuple(w.inputs), mesh=mesh, plan=plan, train=True, loss_fn=w.loss_fn,
                         loss_inputs=tuple(w.loss_inputs), optimizer=OPT)


def run_cases(cases: dict[str, Any], ckpt_root: str) -> dict[str, Any]:
    import torch.distributed as dist

    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.pipeline_plan import PipelinePlan

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        for k, (name, (workload, batch, (m0, p0), (m1, p1), ranks, lost)) in enumerate(cases.items()):
            torch.manual_seed(0)
            w = load_workload(workload, batch=batch)
            cm = _compile(w, m0, p0)
            before = [float(cm.step(*w.inputs, *w.loss_inputs)) for _ in range(BEFORE)]
            path = f"{ckpt_root}/case{k}"
            cm.save(path)
            plan = PipelinePlan.from_dict(p1) if isinstance(p1, dict) else p1
            if name == "fsdp6 -> fsdp4":   # refused: under fsdp the shards of lost ranks exist nowhere else
                try:
                    cm.switch("fsdp", mesh="dp=4", ranks=[0, 1, 2, 3], lost=(4, 5))
                    out["refused"] = None
                except NotImplementedError as e:
                    out["refused"] = str(e)
            new = cm.switch(plan, mesh=m1, ranks=ranks, lost=lost)
            res: dict[str, Any] = {"before": before, "left": new is None}
            if new is not None:
                res["after"] = [float(new.step(*w.inputs, *w.loss_inputs)) for _ in range(AFTER)]
                rep = new.switch_report
                res["report"] = (rep.messages, rep.bytes_sent, rep.bytes_total, rep.tensors)
                # the reference: the same program, its state loaded from the checkpoint of the switch step
                new.load(path)
                res["reference"] = [float(new.step(*w.inputs, *w.loss_inputs)) for _ in range(AFTER)]
            else:
                res["report"] = None
            out[name] = res
            dist.barrier()
        return out
    finally:
        dist.destroy_process_group()
