"""Rank side of test_pipeline.py: pipelines over device groups on 2 and 4 gloo ranks."""

from __future__ import annotations

from typing import Any

import torch

STEPS = 3
GPT2_STAGES = [["wte", "wpe", "h.0"], ["h.1", "ln_f", "lm_head"]]


def stage(ranks: list[int], modules: list[str] | None = None, mesh: str | None = None, plan: str = "dp") -> dict:
    d: dict[str, Any] = {"ranks": ranks, "mesh": mesh or f"dp={len(ranks)}", "plan": plan}
    if modules is not None:
        d["modules"] = modules
    return d


# name -> (workload, plan dict, batch, optimizer); each case runs under both schedules
TWO_RANKS = {
    "gpt2-tiny pp2": ("gpt2-tiny", {"microbatches": 4, "stages": [stage([0], GPT2_STAGES[0]),
                                                                  stage([1], GPT2_STAGES[1])]},
                      8, ("adamw", {"lr": 0.01})),
    "llama-tiny pp2": ("llama-tiny", {"microbatches": 4, "stages": [stage([0]), stage([1])]}, 8, ("sgd", {"lr": 0.1})),
}
FOUR_RANKS = {
    "gpt2-tiny pp2xtp2": ("gpt2-tiny", {"microbatches": 4, "stages": [stage([0, 1], None, "tp=2", "megatron"),
                                                                      stage([2, 3], None, "tp=2", "megatron")]},
                          8, ("sgd", {"lr": 0.1})),
    "llama-tiny pp2xtp2": ("llama-tiny", {"microbatches": 4, "stages": [stage([0, 1], None, "tp=2", "megatron"),
                                                                        stage([2, 3], None, "tp=2", "megatron")]},
                           8, ("sgd", {"lr": 0.1})),
    # three heterogeneous stages: tp=2, one rank, one rank (the middle one holds hidden states)
    "gpt2-tiny pp3 hetero": ("gpt2-tiny", {"microbatches": 4, "stages": [
        stage([0, 1], ["wte", "wpe"], "tp=2", "megatron"), stage([2], ["h.0"]),
        stage([3], ["h.1", "ln_f", "lm_head"])]}, 8, ("sgd", {"lr": 0.1})),
}
SCHEDULES = ("gpipe", "1f1b")


def run_cases(cases: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    import spmdc
    from spmdc.dialects.pipe import RecvOp, SendOp
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.pipeline import PipelinePlan

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        for name, (workload, plan, batch, opt) in cases.items():
            torch.manual_seed(0)
            w = load_workload(workload, batch=batch)
            pm = spmdc.compile(w.model, tuple(w.inputs), mesh=None, plan=PipelinePlan.from_dict(plan), train=True,
                               loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs), optimizer=opt)
            start = pm.full_state_dict()
            for sched in SCHEDULES:
                pm.set_schedule(sched)
                pm.load_full_state(start, optimizer=opt)
                pm.comm.stats.counts.clear()
                losses = [float(pm.step(*w.inputs, *w.loss_inputs)) for _ in range(STEPS)]
                func = pm._rank_function(pm.rank)
                ops = list(func.body.ops)
                out[f"{name} {sched}"] = {
                    "losses": losses, "state": pm.full_state_dict(), "stage": pm.stage,
                    "sends": dict(pm.comm.stats.counts).get("send", 0) // STEPS,
                    "recvs": dict(pm.comm.stats.counts).get("recv", 0) // STEPS,
                    "ir_sends": sum(len(op.peers) for op in ops if isinstance(op, SendOp)),
                    "ir_recvs": sum(len(op.peers) for op in ops if isinstance(op, RecvOp)),
                    "ran": [label for label, _, _ in pm.last_timeline],
                    "ir_compute": [("FB" if op.name == "pipe.forward_backward" else op.name[5].upper())
                                   + str(op.mb) for op in ops if op.name in ("pipe.forward", "pipe.backward",
                                                                             "pipe.forward_backward")],
                    "peak": pm.peak_stash_bytes, "n_stages": pm.n_stages, "ir": pm.schedule_ir}
                pm.peak_stash_bytes = 0
        return out
    finally:
        dist.destroy_process_group()
