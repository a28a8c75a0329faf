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
    # (llama-tiny on pp=2 x tp=2 megatron stages against one device: test_pipeline_features.py's
    # "llama-tiny all fp32"; llama-tiny under both schedules: "llama-tiny pp2" above)
    # three heterogeneous stages: tp=2, one rank, one rank (the middle one holds hidden states; the
    # tp=2 stage holds a block, which megatron shards: embeddings alone would leave tp unused, refused)
    "gpt2-tiny pp3 hetero": ("gpt2-tiny", {"microbatches": 4, "stages": [
        stage([0, 1], ["wte", "wpe", "h.0"], "tp=2", "megatron"), stage([2], ["h.1"]),
        stage([3], ["ln_f", "lm_head"])]}, 8, ("sgd", {"lr": 0.1})),
}
SCHEDULES = ("gpipe", "1f1b")


class Contrastive(torch.nn.Module):
    """Scores of every sample against the whole batch: micro-batches would change the loss."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.enc = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(p), torch.nn.Linear(32, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.enc(x)
        return z @ z.T


def refusals() -> dict[str, str]:
    """What a pipeline refuses, by name, on every rank (no hang)."""
    import spmdc
    from spmdc.sharding.pipeline_plan import PipelinePlan

    def loss(scores: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:   # InfoNCE over the batch
        return ((torch.logsumexp(scores, -1) - scores.diagonal()) * weight).mean()

    plan = PipelinePlan.from_dict({"microbatches": 2, "stages": [{"ranks": [0], "modules": ["enc.0"]},
                                                                 {"ranks": [1], "modules": ["enc.1", "enc.2"]}]})
    out = {}
    # (with dropout on, a batch-coupled loss is still refused for that reason, the masks aside)
    for name, p in (("batch-coupled loss", 0.0), ("batch-coupled loss with dropout", 0.1)):
        torch.manual_seed(0)
        x, y = torch.randn(8, 16), torch.ones(8)
        try:
            spmdc.compile(Contrastive(p), ((x,), (y,)), mesh=None, plan=plan, train=True, loss_fn=loss,
                          optimizer="sgd")
            out[name] = ""
        except (ValueError, NotImplementedError) as e:
            out[name] = str(e)
    return out


def run_cases(cases: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    import spmdc
    from spmdc.dialects.pipe import RecvOp, SendOp
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.pipeline_plan import PipelinePlan

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
                pm.load_state_dict(start)
                pm.set_optimizer(opt)
                pm.comm.stats.counts.clear()
                losses = [float(pm.step(*w.inputs, *w.loss_inputs)) for _ in range(STEPS)]
                func = pm.pipeline._rank_function(pm.pipeline.rank)
                ops = list(func.body.ops)
                out[f"{name} {sched}"] = {
                    "losses": losses, "state": pm.full_state_dict(), "stage": pm.pipeline.stage,
                    "sends": dict(pm.comm.stats.counts).get("send", 0) // STEPS,
                    "recvs": dict(pm.comm.stats.counts).get("recv", 0) // STEPS,
                    "ir_sends": sum(len(op.peers) for op in ops if isinstance(op, SendOp)),
                    "ir_recvs": sum(len(op.peers) for op in ops if isinstance(op, RecvOp)),
                    "ran": [label for label, _, _ in pm.pipeline.last_timeline],
                    "ir_compute": [("FB" if op.name == "pipe.forward_backward" else op.name[5].upper())
                                   + str(op.mb) for op in ops if op.name in ("pipe.forward", "pipe.backward",
                                                                             "pipe.forward_backward")],
                    "peak": pm.pipeline.peak_stash_bytes, "n_stages": pm.pipeline.n_stages, "ir": pm.schedule_ir}
                pm.pipeline.peak_stash_bytes = 0
        if dist.get_world_size() == 2:
            out["refused"] = refusals()
        return out
    finally:
        dist.destroy_process_group()
