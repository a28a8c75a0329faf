"""Rank side of ``test_device_groups.py``: two compiled modules on disjoint device groups of one
6-rank gloo job (HSPMD's groups, each running its own plan)."""

from __future__ import annotations

from typing import Any

import torch

GROUPS = {"a": ([0, 1, 2, 3], ("tp",), "megatron", 4), "b": ([4, 5], ("dp",), "fsdp", 2)}   # ranks, axes, plan, batch


def job(batch: int):
    from spmdc.examples.gpt2_tiny import factory

    torch.manual_seed(0)
    return factory(batch=batch)


def groups_six(tmp: str) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    import spmdc

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out: dict[str, Any] = {}
    try:
        # every rank builds every group's DeviceMesh (creating process groups is collective)
        meshes = {k: DeviceMesh("cpu", torch.tensor(ranks), mesh_dim_names=axes)
                  for k, (ranks, axes, _, _) in GROUPS.items()}
        name = next(k for k, (ranks, *_) in GROUPS.items() if rank in ranks)
        ranks, _, plan, batch = GROUPS[name]
        model, ((x,), (y,)), loss = job(batch)
        kw = dict(mesh=meshes[name], plan=plan, train=True, loss_fn=loss, loss_inputs=(y,),
                  optimizer=("sgd", {"lr": 0.1}), clip_grad_norm=0.5)
        torch.manual_seed(1)
        cm = spmdc.compile(model, (x,), **kw)
        losses = [float(cm.step(x, y)) for _ in range(2)]
        cm.save(f"{tmp}/{name}")
        losses.append(float(cm.step(x, y)))
        out = {"group": name, "losses": losses, "state": cm.full_state_dict(), "mesh_rank": cm.rank}
        again = spmdc.compile(model, (x,), **kw)
        again.load(f"{tmp}/{name}")
        out["resumed"] = float(again.step(x, y))
        try:
            spmdc.compile(model, (x,), mesh=meshes["a" if name == "b" else "b"], plan="fsdp", train=True,
                          loss_fn=loss, loss_inputs=(y,))
            out["refused"] = None
        except ValueError as e:
            out["refused"] = str(e)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return out
