"""Rank side of ``test_auto_compile_ranks.py``: ``spmdc.compile(..., plan="auto")`` on 4 gloo ranks."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F

LR = 0.01


class MLP(torch.nn.Module):
    """Two linears named as the megatron preset's column and row layers (fc1, fc2)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def mlp() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return MLP(), torch.randn(8, 8), torch.randn(8, 4)


def own_loop(mesh: Any = None) -> dict[str, Any]:
    """FSDP2's way: compile, the user's AdamW over ``cm.parameters()``, their loss, ``loss.backward()``;
    the parameters after 3 steps beside eager PyTorch's."""
    import spmdc

    model, x, y = mlp()
    ref = copy.deepcopy(model)
    cm = spmdc.compile(model, (x,), mesh=mesh, plan="auto", train=True, loss_fn=F.mse_loss, loss_inputs=(y,),
                       optimizer="adamw")
    def step() -> torch.Tensor:
        loss = F.mse_loss(cm(x, full=True), y)
        loss.backward()
        return loss
    got = beside_eager(cm, ref, step, x, y, torch.optim.AdamW)
    return {"label": cm.auto_plan.label(), "plan_file": cm.auto_plan.plan_file(), **got}


def beside_eager(cm: Any, ref: torch.nn.Module, step: Any, x: torch.Tensor, y: torch.Tensor,
                 opt_class: Any) -> dict[str, Any]:
    """Three steps of the user's ``step()`` and ``opt_class`` on ``cm`` beside the same on eager ``ref``
    (the whole batch): both runs' losses and the largest parameter difference after them."""
    opt, ropt = opt_class(cm.parameters(), lr=LR), opt_class(ref.parameters(), lr=LR)
    losses, ref_losses = [], []
    for _ in range(3):
        losses.append(float(step().detach()))
        opt.step()
        opt.zero_grad()
        rl = F.mse_loss(ref(x), y)
        rl.backward()
        ropt.step()
        ropt.zero_grad()
        ref_losses.append(float(rl.detach()))
    mine = cm.full_state_dict()
    err = max((mine[k].detach() - v.detach()).abs().max().item() for k, v in ref.state_dict().items())
    return {"losses": losses, "ref_losses": ref_losses, "max_param_diff": err}


def local_pieces() -> dict[str, Any]:
    """``inputs="local"``: each rank passes its DistributedSampler piece (over the job, cut before the
    choice), no optimizer given (priced as AdamW), the user's SGD; losses and parameters beside eager
    PyTorch on the whole batch."""
    import torch.distributed as dist

    import spmdc

    model, x, y = mlp()
    ref = copy.deepcopy(model)
    rank, n = dist.get_rank(), dist.get_world_size()
    xs, ys = x.chunk(n)[rank], y.chunk(n)[rank]
    cm = spmdc.compile(model, (xs,), plan="auto", train=True, loss_fn=F.mse_loss, loss_inputs=(ys,), inputs="local")
    got = beside_eager(cm, ref, lambda: cm.backward(xs, ys), x, y, torch.optim.SGD)
    return {"label": cm.auto_plan.label(), "sampler": spmdc.sampler_args(cm), **got}


def pipeline_steps() -> dict[str, Any]:
    """gpt2-tiny searched on the mesh pp=2,dp=2 (a pipeline chosen), two SGD steps by ``cm.step``."""
    import spmdc
    from spmdc.frontend.workloads import load_workload

    w = load_workload("gpt2-tiny", batch=8)
    torch.manual_seed(0)
    cm = spmdc.compile(w.model, tuple(w.inputs), mesh="pp=2,dp=2", plan="auto", train=True, loss_fn=w.loss_fn,
                       loss_inputs=tuple(w.loss_inputs), optimizer=("sgd", {"lr": 0.05}))
    losses = [float(cm.step(*w.inputs, *w.loss_inputs)) for _ in range(2)]
    return {"label": cm.auto_plan.label(), "kind": cm.kind, "losses": losses}


def refused(**kw: Any) -> str:
    """The error ``plan="auto"`` raises on this rank with ``kw``."""
    import spmdc

    model, x, y = mlp()
    try:
        spmdc.compile(model, (x,), plan="auto", train=True, loss_fn=F.mse_loss, loss_inputs=(y,), **kw)
    except ValueError as e:
        return str(e)
    return "not refused"


def run() -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        return {"any": own_loop(), "tp": own_loop("tp=4"), "pipeline": pipeline_steps(),
                "bad_mesh": refused(mesh="dp=8"), "cap": refused(memory_cap=1),
                "fixed": refused(microbatches=2), "eager": refused(execution="eager"),
                "axis": refused(mesh="dq=4"), "local": local_pieces(),
                "local_tp": refused(mesh="dp=2,tp=2", inputs="local")}
    finally:
        dist.destroy_process_group()
