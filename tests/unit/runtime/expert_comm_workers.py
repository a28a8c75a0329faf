"""Rank side of test_expert_comm.py: every rank dispatches its own tokens and combines them back
through the real all_to_all (gloo), for several capacities."""

from __future__ import annotations

from typing import Any


def dispatch_and_combine(ids: Any, x: Any, w: Any, experts: int, top_k: int, caps: list[int]) -> list[dict]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.dialects.expert_helpers import expert_counts, expert_route
    from spmdc.runtime.collectives import Collectives

    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        comm = Collectives(init_device_mesh("cpu", (world,), mesh_dim_names=("ep",)))
        per = ids.shape[0] // world
        mine = ids[rank * per:(rank + 1) * per]
        xs, ws = x.chunk(world)[rank], w[rank * per:(rank + 1) * per]
        out = []
        for cap in caps:
            counts = comm_counts = expert_counts(mine, experts, 1)
            gathered = [counts.clone() for _ in range(world)]
            dist.all_gather(gathered, comm_counts)
            import torch

            counts = torch.cat(gathered)
            dest, _, _ = expert_route(mine, counts, world, cap, per, rank)
            rows, wrows = comm.expert_dispatch([xs, ws], dest, counts, "ep", [top_k, 1], cap, count_load=True)
            back, tok = comm.expert_combine([rows, rows], dest, counts, "ep", [1, top_k])
            out.append({"rows": rows, "wrows": wrows, "back": back, "tok": tok, "dest": dest,
                        "load": dict(comm.stats.expert_rows), "dropped": dict(comm.stats.expert_dropped)})
            comm.stats.expert_rows.clear()
            comm.stats.expert_dropped.clear()
        return out
    finally:
        dist.destroy_process_group()
