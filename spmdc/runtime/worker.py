"""Rank entry points for :func:`spmdc.runtime.launcher.launch` (importable, picklable).

    results = launch(run_steps, nproc=4, args=([step_a, step_b],))

Every rank runs every compiled step in order (steps must use meshes of ``nproc`` ranks)
and returns, per step, the full results and the collectives it issued. ``executor``
("codegen" or "interpret") and ``target`` ("torch" or "triton") are passed to
:func:`spmdc.runtime.engine.run_on_rank`.
"""

from __future__ import annotations

import os
from typing import Any


def run_steps(steps: list[Any], executor: str = "codegen", target: str = "torch") -> list[dict[str, Any]]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.runtime.collectives import Collectives
    from spmdc.runtime.engine import run_on_rank

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fail_on = os.environ.get("SPMDC_TEST_FAIL_RANK")
    if fail_on is not None and int(fail_on) == rank:
        raise RuntimeError(f"injected failure on rank {rank} (SPMDC_TEST_FAIL_RANK)")
    meshes: dict[tuple, Any] = {}
    out = []
    try:
        for step in steps:
            key = (step.mesh.axis_names, step.mesh.shape)
            if key not in meshes:
                meshes[key] = init_device_mesh("cpu", step.mesh.shape, mesh_dim_names=step.mesh.axis_names)
            comm = Collectives(meshes[key])
            out.append(run_on_rank(step, rank, comm, executor, target=target))
    finally:
        dist.destroy_process_group()
    return out
