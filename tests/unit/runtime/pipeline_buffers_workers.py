"""Rank side of ``test_pipeline_buffers.py``: BatchNorm statistics and ``inputs="local"`` in a
pipeline, on 4 gloo ranks (one launch)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

LR, STEPS, MICRO, ACCUM, BATCH = 0.1, 2, 2, 2, 16
DP2 = {"stages": [{"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp", "modules": ["conv", "bn"]},
                  {"ranks": [2, 3], "mesh": "dp=2", "plan": "fsdp", "modules": ["fc", "bn1", "head"]}]}
DDP = {"stages": [{"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp", "modules": ["conv", "bn"]},
                  {"ranks": [2, 3], "mesh": "dp=2", "plan": "dp", "modules": ["fc", "bn1", "head"]}]}
UNEVEN = {"stages": [{"ranks": [0], "mesh": "dp=1", "plan": "fsdp", "modules": ["conv", "bn"]},
                     {"ranks": [1, 2, 3], "mesh": "dp=3", "plan": "fsdp", "modules": ["fc", "bn1", "head"]}]}


class Net(nn.Module):
    """A tiny CNN: conv, BatchNorm2d, a linear layer, BatchNorm1d, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 8)
        self.bn1 = nn.BatchNorm1d(8, momentum=0.3)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn(self.conv(x))).flatten(1)
        return self.head(F.relu(self.bn1(self.fc(h))))


def net() -> Net:
    torch.manual_seed(0)
    return Net()


def batches(n: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 2, 4, 4, generator=g) * 2 + 1, torch.randn(BATCH, 3, generator=g)) for _ in range(n)]


def sampled(replicas: int, rank: int, n: int = BATCH) -> list[int]:
    """The rows a ``DistributedSampler`` (no shuffling) gives replica ``rank`` of ``replicas``."""
    from torch.utils.data import DistributedSampler

    return list(DistributedSampler(range(n), num_replicas=replicas, rank=rank, shuffle=False))


def assembled(replicas: int, n: int = BATCH) -> list[int]:
    """The global batch's rows as the pieces of replicas 0, 1, ... make it."""
    return [i for r in range(replicas) for i in sampled(replicas, r, n)]


def one_device(micro: int = MICRO, accum: int = ACCUM, rows: list[int] | None = None) -> dict[str, Any]:
    """The reference: one device running each step's micro-batches one after another (every
    micro-batch's loss / (micro * accum) backward), then one SGD step; losses and the final state.
    ``rows``: the batch's rows in this order (the global batch local pieces assemble)."""
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in batches():
        if rows is not None:
            x, y = x[rows], y[rows]
        opt.zero_grad()
        total = 0.0
        for xs, ys in zip(x.chunk(micro * accum), y.chunk(micro * accum)):
            loss = F.mse_loss(model(xs), ys)
            (loss / (micro * accum)).backward()
            total += loss.detach()
        opt.step()
        losses.append(total / (micro * accum))
    return {"losses": torch.stack(losses), "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def _pipeline(layout: dict, **kw: Any) -> Any:
    import spmdc
    from spmdc.sharding.pipeline_plan import PipelinePlan

    x, y = batches(1)[0]
    kw = {"microbatches": MICRO, "grad_accum": ACCUM, **kw}
    ex = (x, y) if kw.get("inputs") != "local" else (x[: BATCH // 2], y[: BATCH // 2])
    return spmdc.compile(net(), ((ex[0],), (ex[1],)), mesh=None, plan=PipelinePlan.from_dict(layout), train=True,
                         loss_fn=F.mse_loss, optimizer=("sgd", {"lr": LR}), **kw)


def _bn_case(layout: dict, ckpt: str | None) -> dict[str, Any]:
    import torch.distributed as dist

    cm = _pipeline(layout)
    losses = [cm.step(x, y).detach() for x, y in batches()]
    res: dict[str, Any] = {"losses": torch.stack(losses), "state": cm.full_state_dict()}
    if ckpt is not None:   # a checkpoint after training holds the updated statistics: a fresh module loads them
        cm.save(ckpt)
        dist.barrier()
        fresh = _pipeline(layout)
        res["fresh"] = fresh.full_state_dict()
        fresh.load(ckpt, model_only=True)   # (an SGD optimizer without state does not load: see the report)
        res["loaded"] = fresh.full_state_dict()
    return res


def _bn_one_mesh() -> dict[str, Any]:
    """One mesh (fsdp, dp=4): the same steps on the whole batch."""
    import spmdc

    x, y = batches(1)[0]
    cm = spmdc.compile(net(), (x,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=F.mse_loss, loss_inputs=(y,),
                       optimizer=("sgd", {"lr": LR}))
    losses = [cm.step(x, y).detach() for x, y in batches()]
    return {"losses": torch.stack(losses), "state": cm.full_state_dict()}


def _local_case(layout: dict) -> dict[str, Any]:
    """inputs='local': each rank passes its DistributedSampler piece of every batch."""
    import spmdc

    cm = _pipeline(layout, inputs="local")
    replicas, rank = spmdc.sampler_args(cm)
    losses = []
    for x, y in batches():
        idx = sampled(replicas, rank)
        losses.append(cm.step(x[idx], y[idx]).detach())
    return {"sampler": (replicas, rank), "losses": torch.stack(losses), "state": cm.full_state_dict(),
            "gathers": cm.pipeline._local.gathers}


HETERO = {"groups": [{"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp", "share": 2},
                     {"ranks": [2, 3], "mesh": "tp=2", "plan": "megatron", "share": 1}]}
HBATCH = 12


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return MLP()


def hetero_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(HBATCH, 6, generator=g), torch.randn(HBATCH, 3, generator=g)) for _ in range(STEPS)]


def hetero_one_device(rows: list[int]) -> dict[str, Any]:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in hetero_batches():
        opt.zero_grad()
        loss = F.mse_loss(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return {"losses": torch.stack(losses), "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def _hetero_local_case() -> dict[str, Any]:
    """Device groups (dp=2 fsdp with share 2, tp=2 megatron with share 1), inputs='local'."""
    import spmdc
    from spmdc.sharding.device_groups import HeteroPlan

    plan = HeteroPlan.from_dict(HETERO)
    x0, y0 = hetero_batches()[0]
    import torch.distributed as dist

    replicas = 3   # what the sampler recipe gives: group 0's dp=2, group 1's one replica
    rank = {0: 0, 1: 1, 2: 2, 3: 2}[dist.get_rank()]
    idx = sampled(replicas, rank, HBATCH)
    cm = spmdc.compile(mlp(), (x0[idx],), mesh=None, plan=plan, train=True, loss_fn=F.mse_loss,
                       loss_inputs=(y0[idx],), optimizer=("sgd", {"lr": LR}), inputs="local")
    res: dict[str, Any] = {"sampler": spmdc.sampler_args(cm)}
    res["losses"] = torch.stack([cm.step(x[idx], y[idx]).detach() for x, y in hetero_batches()])
    res["state"] = cm.full_state_dict()
    res["gathers"] = cm._local_batches.gathers
    bad = idx if dist.get_rank() != 3 else sampled(replicas, 1, HBATCH)   # rank 3 reads replica 1's rows
    fresh = spmdc.compile(mlp(), (x0[idx],), mesh=None, plan=plan, train=True, loss_fn=F.mse_loss,
                          loss_inputs=(y0[idx],), optimizer=("sgd", {"lr": LR}), inputs="local")
    try:
        fresh.step(hetero_batches()[1][0][bad], hetero_batches()[1][1][bad])
        res["mismatch"] = None
    except ValueError as e:
        res["mismatch"] = str(e)
    return res


def _refused(layout: dict, **kw: Any) -> str | None:
    try:
        _pipeline(layout, **kw)
    except (ValueError, NotImplementedError) as e:
        return str(e)
    return None


def four(ckpt: str) -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        out["bn_dp2"] = _bn_case(DP2, ckpt)
        out["bn_ddp"] = _bn_case(DDP, None)
        out["bn_fsdp"] = _bn_one_mesh()
        out["local_dp2"] = _local_case(DP2)
        out["refused_uneven"] = _refused(UNEVEN, inputs="local")
        out["hetero_local"] = _hetero_local_case()
    finally:
        dist.destroy_process_group()
    return out
