"""Rank workers for test_simple_fsdp.py (module level: launched ranks import them by name)."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


def _fsdp2(model: nn.Module, dmesh: Any, precision: bool) -> nn.Module:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw = {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)} \
        if precision else {}
    for block in list(getattr(model, "h", [])):
        fully_shard(block, mesh=dmesh, **kw)
    fully_shard(model, mesh=dmesh, **kw)
    return model


def _linear_run(steps: int, precision: bool) -> dict[str, Any]:
    """Linear(8, 8), MSE, Adam lr 1e-4, ``steps`` steps: spmdc fsdp and FSDP2 side by side."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import spmdc

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    ref = copy.deepcopy(model)
    dmesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    cm = spmdc.compile(model, (x,), mesh=dmesh, plan="fsdp", train=True, loss_fn=F.mse_loss, loss_inputs=(y,),
                       optimizer=("adam", {"lr": 1e-4}), mixed_precision="bf16" if precision else None)
    ref = _fsdp2(ref, dmesh, precision)
    opt = torch.optim.Adam(ref.parameters(), lr=1e-4)
    xl, yl = x.chunk(world)[rank], y.chunk(world)[rank]
    ours, theirs = [], []
    cm.comm.stats.counts.clear()
    cm.comm.stats.bytes.clear()
    for _ in range(steps):
        ours.append(float(cm.step(x, y)))
        opt.zero_grad()
        loss = F.mse_loss(ref(xl), yl)
        loss.backward()
        opt.step()
        loss = loss.detach().float()
        dist.all_reduce(loss)
        theirs.append(float(loss) / world)
    return {"spmdc": ours, "fsdp2": theirs,
            "params": {n: p.detach().full_tensor() for n, p in cm.named_parameters()},
            "fsdp2_params": {n: p.detach().full_tensor() for n, p in ref.named_parameters()},
            "bytes": dict(cm.comm.stats.bytes), "counts": dict(cm.comm.stats.counts)}


def gpt2_job(n_layer: int = 2):
    from spmdc.examples import gpt2_tiny

    return gpt2_tiny.factory(batch=8, seq=16, vocab_size=64, block_size=16, d_model=32, n_head=4, n_layer=n_layer)


def _launches(plan: str, mesh: Any, dmesh: Any) -> dict[str, Any]:
    """One gpt2-tiny training step under ``plan``: spmdc's collectives per step, its losses and
    state after 2 SGD steps (vs one device in the test), and for fsdp FSDP2's launches."""
    import torch.distributed as dist
    from torch.distributed.tensor.debug import CommDebugMode

    import spmdc

    model, ((x,), (y,)), loss_fn = gpt2_job()
    ref = copy.deepcopy(model)
    cm = spmdc.compile(model, (x,), mesh=dmesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                       optimizer=("sgd", {"lr": 0.1}))
    cm.comm.stats.counts.clear()
    cm.comm.stats.bytes.clear()
    cm.comm.stats.order = []
    losses = [float(cm.step(x, y))]
    out: dict[str, Any] = {"counts": dict(cm.comm.stats.counts), "order": list(cm.comm.stats.order)}
    cm.comm.stats.order = None
    losses.append(float(cm.step(x, y)))
    out["losses"] = losses
    out["state"] = {n: p.detach().full_tensor() for n, p in cm.named_parameters()}
    out["ir"] = cm.programs["train"].module
    if plan == "fsdp":
        world, rank = dist.get_world_size(), dist.get_rank()
        ref = _fsdp2(ref, dmesh, False)
        cdm = CommDebugMode()
        with cdm:
            loss_fn(ref(x.chunk(world)[rank]), y.chunk(world)[rank]).backward()
        out["fsdp2_launches"] = sum(cdm.get_comm_counts().values())
    from spmdc.ir.printer import print_module

    out["ir"] = print_module(out["ir"])
    return out


def simple_fsdp_four() -> dict[str, Any]:
    """4 ranks: FSDP2 numerics (fp32 and bf16), launch counts, scheduled programs, HSDP, DDP."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.sharding.mesh import Mesh

    dist.init_process_group("gloo")
    try:
        out: dict[str, Any] = {}
        out["linear"] = _linear_run(20, False)
        out["linear_bf16"] = _linear_run(20, True)
        out["fsdp"] = _launches("fsdp", Mesh({"dp": 4}), init_device_mesh("cpu", (4,), mesh_dim_names=("dp",)))
        out["hsdp"] = _launches("hsdp", Mesh({"rep": 2, "dp": 2}),
                                init_device_mesh("cpu", (2, 2), mesh_dim_names=("rep", "dp")))
        out["dp"] = _launches("dp", Mesh({"dp": 4}), init_device_mesh("cpu", (4,), mesh_dim_names=("dp",)))
        return out
    finally:
        dist.destroy_process_group()
