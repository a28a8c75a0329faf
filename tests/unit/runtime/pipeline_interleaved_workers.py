"""Rank side of test_pipeline_interleaved.py: interleaved 1F1B (2 stages per rank) on 2 gloo ranks."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

STEPS = 2
BATCH = 8
MICRO = 4
OPT = ("adamw", {"lr": 0.01})
# gpt2 trains with SGD: AdamW normalizes each element's step, so rounding-sized gradient differences (4
# micro-batches summed vs one batch) become steps of ~2e-5 on near-zero gradients; one device alone, full
# batch vs 4 accumulated micro-batches, differs so too (h.3.mlp.c_proj.weight by 1.7e-5 after 2 steps)
SGD = ("sgd", {"lr": 0.1})


class Tiny(nn.Module):
    """Four tanh(Linear) layers: the repeated blocks the interleaved plan cuts into 4 stages."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out - y) ** 2).mean()


def tiny() -> tuple[nn.Module, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], Any]:
    torch.manual_seed(0)
    model = Tiny()
    return model, (torch.randn(BATCH, 16),), (torch.randn(BATCH, 16),), mse


def gpt2() -> tuple[nn.Module, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], Any]:
    from spmdc.examples.gpt2_tiny import factory

    model, ((tokens,), (targets,)), loss = factory(batch=BATCH, n_layer=4)
    return model, (tokens,), (targets,), loss


PLAN = {"schedule": "interleaved", "virtual_stages": 2, "microbatches": MICRO,
        "stages": [{"ranks": [0], "mesh": "dp=1", "plan": "dp"}, {"ranks": [1], "mesh": "dp=1", "plan": "dp"}]}
# name -> (model factory, optimizer, compile keywords)
CASES: dict[str, tuple[str, tuple, dict[str, Any]]] = {
    "tiny plan": ("tiny", OPT, {"mesh": None, "plan": "PLAN"}),
    "tiny mesh": ("tiny", OPT, {"mesh": "pp=2", "plan": "dp", "pp_schedule": "interleaved", "microbatches": MICRO}),
    # tied wte/lm_head: stage 0 (rank 0) and stage 3 (rank 1) share a parameter
    "gpt2 4 layers mesh": ("gpt2", SGD, {"mesh": "pp=2", "plan": "dp", "pp_schedule": "Interleaved1F1B",
                                         "microbatches": MICRO}),
}


def run_case(factory: str, opt: tuple, kw: dict[str, Any]) -> dict[str, Any]:
    import spmdc
    from spmdc.dialects.pipe import SendOp
    from spmdc.sharding.pipeline_plan import PipelinePlan

    model, inputs, loss_inputs, loss_fn = globals()[factory]()
    kw = dict(kw)
    if kw["plan"] == "PLAN":
        kw["plan"] = PipelinePlan.from_dict(PLAN)
    pm = spmdc.compile(model, inputs, train=True, loss_fn=loss_fn, loss_inputs=loss_inputs, optimizer=opt, **kw)
    pm.comm.stats.counts.clear()
    losses, sends = [], []
    for _ in range(STEPS):
        losses.append(float(pm.step(*inputs, *loss_inputs)))
        sends.append(pm.pipeline.last_messages)
    ex = pm.pipeline
    ops = list(ex._rank_function(ex.rank).body.ops)
    return {"losses": losses, "state": pm.full_state_dict(), "sends": sends,
            "ir_sends": sum(len(op.peers) for op in ops if isinstance(op, SendOp)),
            "send_counts": pm.comm.stats.counts.get("send", 0) / STEPS,
            "stages": list(ex.my_stages), "n_stages": ex.n_stages, "schedule": ex.plan.schedule,
            "params": sorted(n for n, _ in pm.named_parameters()),
            "order": [(op.name, op.stage, op.mb) for op in ops if op.name in ("pipe.forward", "pipe.backward",
                                                                           "pipe.forward_backward")],
            "timeline": [label for label, _, _ in ex.last_timeline]}


def run_cases(cases: dict[str, Any]) -> dict[str, Any]:
    from rank_checks import run_cases_in_gloo

    return run_cases_in_gloo(run_case, cases)


def factory(batch: int = BATCH) -> tuple[nn.Module, tuple, Any]:
    """The tiny model as an ``spmdc run`` workload (``path.py:factory``): ``(model, ((x,), (y,)), loss)``."""
    torch.manual_seed(0)
    return Tiny(), ((torch.randn(batch, 16),), (torch.randn(batch, 16),)), mse
