"""Rank worker for test_redistribute_pairs.py (module level: launched ranks import it by name)."""

from __future__ import annotations

from typing import Any


def run_local(steps: list[Any]) -> list[dict[str, Any]]:
    """Every step on this rank: its local outputs (no gathering) and the collectives it issued."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.compiler import compile_rank
    from spmdc.runtime.collectives import Collectives
    from spmdc.runtime.executor import RankRunner

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    meshes: dict[tuple, Any] = {}
    out = []
    try:
        for step in steps:
            key = (step.mesh.axis_names, step.mesh.shape)
            if key not in meshes:
                meshes[key] = init_device_mesh("cpu", step.mesh.shape, mesh_dim_names=step.mesh.axis_names)
            comm = Collectives(meshes[key])
            prog = compile_rank(step, rank)
            run = RankRunner(prog, comm)
            before = dict(comm.stats.counts)
            local = run(run.local_arguments(step.arguments))
            issued = {k: v - before.get(k, 0) for k, v in comm.stats.counts.items() if v - before.get(k, 0)}
            out.append({"local": [t.clone() for t in local], "issued": issued, "comm_ops": prog.comm_ops,
                        "full": run.full_results(local)})
    finally:
        dist.destroy_process_group()
    return out
