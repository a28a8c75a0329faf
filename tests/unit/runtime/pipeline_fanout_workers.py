"""Rank side of test_pipeline_fanout.py: boundary values several later stages read, on 4 gloo ranks."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

STEPS = 3
BATCH = 8
SCHEDULES = ("gpipe", "1f1b")
OPT = ("adamw", {"lr": 0.01})


class SkipBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.mix = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x)) + self.mix(skip)


class SkipNet(nn.Module):
    """A skip connection across stages: the embedding's output is read by both blocks."""

    def __init__(self, d_in: int = 16, d: int = 32, d_out: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList([SkipBlock(d), SkipBlock(d)])
        self.head = nn.Linear(d, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = torch.relu(self.embed(x))
        h = self.blocks[0](h0, h0)
        h = self.blocks[1](h, h0)
        return self.head(h)


def skipnet(batch: int = BATCH) -> tuple[nn.Module, tuple, Any]:
    """``(model, ((x,), (y,)), mse)`` with seed 0."""
    torch.manual_seed(0)
    model = SkipNet()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, 16, generator=g), torch.randn(batch, 4, generator=g)
    return model, ((x,), (y,)), torch.nn.functional.mse_loss


def stage(ranks: list[int], mesh: str, plan: str, modules: list[str] | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"ranks": ranks, "mesh": mesh, "plan": plan}
    if modules is not None:
        d["modules"] = modules
    return d


def three_stages(mesh: str, plan: str, modules: list[list[str]] | None = None) -> dict[str, Any]:
    """Stage 0 on ``mesh`` under ``plan`` (ranks 0-1), stages 1 and 2 on one rank each."""
    m = modules or [None, None, None]
    return {"microbatches": 2, "stages": [stage([0, 1], mesh, plan, m[0]), stage([2], "dp=1", "dp", m[1]),
                                          stage([3], "dp=1", "dp", m[2])]}


# name -> (workload, plan): the skip connection's h0 goes from stage 0 (fsdp on dp=2: cut over the batch) to
# stages 1 and 2 with its gradient; llama-tiny with 3 layers, one per stage (stage 0 megatron on tp=2): the
# rotary tables (cos, sin) computed in stage 0 are read by every later stage
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "skipnet pp3": ("skipnet", three_stages("dp=2", "fsdp", [["embed"], ["blocks.0"], ["blocks.1", "head"]])),
    "llama-tiny pp3": ("llama-tiny", three_stages("tp=2", "megatron")),
}


def workload(name: str) -> tuple[nn.Module, tuple, tuple, Any]:
    """``(model, inputs, loss inputs, loss_fn)`` built with seed 0."""
    if name == "skipnet":
        model, (ins, lins), loss = skipnet()
        return model, ins, lins, loss
    from spmdc.frontend.workloads import load_workload

    torch.manual_seed(0)
    w = load_workload(name, batch=BATCH, n_layer=3)
    return w.model, tuple(w.inputs), tuple(w.loss_inputs), w.loss_fn


def run_case(name: str, spec: str, plan: dict[str, Any]) -> dict[str, Any]:
    """Both schedules from the same initial state: losses, parameters, messages."""
    import spmdc
    from spmdc.dialects.pipe import RecvOp, SendOp
    from spmdc.sharding.pipeline_plan import PipelinePlan

    model, ins, lins, loss_fn = workload(spec)
    pm = spmdc.compile(model, ins, mesh=None, plan=PipelinePlan.from_dict(plan), train=True, loss_fn=loss_fn,
                       loss_inputs=lins, optimizer=OPT, pp_schedule=SCHEDULES[0])
    start = pm.full_state_dict()
    values = pm.pipeline.split.values.values()
    out: dict[str, Any] = {"stage": pm.pipeline.stage, "consumers": {v.index: list(v.consumers) for v in values},
                           "producers": {v.index: v.producer for v in values},
                           "differentiable": {v.index: v.differentiable for v in values}}
    for schedule in SCHEDULES:
        if schedule != SCHEDULES[0]:
            pm.set_schedule(schedule)
            pm.load_state_dict(start)
            pm.set_optimizer(OPT)
        losses, messages = [], []
        for _ in range(STEPS):
            losses.append(float(pm.step(*ins, *lins)))
            messages.append(pm.pipeline.last_messages)
        ops = list(pm.pipeline._rank_function(pm.pipeline.rank).body.ops)
        recvs: dict[str, list[list[int]]] = {}   # "v" / "vg" (its gradient) -> each receive's source ranks
        for op in ops:
            if isinstance(op, RecvOp):
                recvs.setdefault(f"{op.value}{'g' if op.grad else ''}", []).append(list(op.peers))
        sends = [(op.value, op.grad, list(op.peers)) for op in ops if isinstance(op, SendOp)]
        out[schedule] = {"losses": losses, "state": pm.full_state_dict(), "messages": messages,
                         "ir_sends": sum(len(p) for _, _, p in sends), "sends": sends, "recvs": recvs}
    return out


# a meta model (spmdc.deferred_init) on pp=2 x tp=2, against the same model built for real
META_STEPS = 2
SGD = ("sgd", {"lr": 0.1})
PP2_TP2 = {"microbatches": 2, "stages": [stage([0, 1], "tp=2", "megatron"), stage([2, 3], "tp=2", "megatron")]}
LLAMA = (128, 32, 4, 2, 64, 2)   # llama-tiny's (vocab, d_model, heads, kv heads, hidden, layers)


def llama_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 128, (BATCH, 8), generator=g), torch.randint(0, 128, (BATCH, 8), generator=g)


def run_meta(meta: bool) -> dict[str, Any]:
    """llama-tiny built with seed 0 on the meta device (``meta``) or for real, 2 SGD steps on pp=2 x tp=2."""
    import spmdc
    from spmdc.examples.llama_tiny import Llama, lm_loss
    from spmdc.sharding.pipeline_plan import PipelinePlan

    torch.manual_seed(0)
    model = spmdc.deferred_init(Llama, *LLAMA) if meta else Llama(*LLAMA)
    x, y = llama_batch()
    pm = spmdc.compile(model, (x,), mesh=None, plan=PipelinePlan.from_dict(PP2_TP2), train=True, loss_fn=lm_loss,
                       loss_inputs=(y,), optimizer=SGD)
    init = pm.full_state_dict()
    losses = [float(pm.step(x, y)) for _ in range(META_STEPS)]
    pieces = {n: tuple(p.to_local().shape) for n, p in pm.pipeline.params.items()}
    return {"init": init, "losses": losses, "state": pm.full_state_dict(), "pieces": pieces,
            "still_meta": any(t.device.type == "meta" for t in model.parameters()), "stage": pm.pipeline.stage}


def meta_refusals() -> dict[str, str]:
    """Refused before compiling: a meta model spmdc cannot initialize (no deferred_init, no init=),
    init= on a real model."""
    import spmdc
    from spmdc.examples.llama_tiny import Llama, lm_loss
    from spmdc.sharding.pipeline_plan import PipelinePlan

    with torch.device("meta"):
        meta = Llama(*LLAMA)
    x, y = llama_batch()
    out = {}
    for name, model, init in (("no init", meta, None), ("init= on real", Llama(*LLAMA), lambda m: None)):
        try:
            spmdc.compile(model, (x,), mesh=None, plan=PipelinePlan.from_dict(PP2_TP2), train=True, loss_fn=lm_loss,
                          loss_inputs=(y,), optimizer=SGD, init=init)
            out[name] = ""
        except ValueError as e:
            out[name] = str(e)
    return out


def run_cases(cases: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        out: dict[str, Any] = {name: run_case(name, *case) for name, case in cases.items()}
        out["meta"] = {"deferred": run_meta(True), "real": run_meta(False), "refused": meta_refusals()}
        return out
    finally:
        dist.destroy_process_group()
