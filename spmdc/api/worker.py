"""Running compiled steps on launched ranks (tests and benchmarks; ``spmdc run`` uses
:class:`spmdc.api.entry.CompiledModule`).

    results = launch(run_steps, nproc=4, args=([step_a, step_b],))

Every rank runs every step in order (steps must use meshes of ``nproc`` ranks) and
returns, per step, the full results and the collectives it issued.
"""

from __future__ import annotations

from typing import Any


def run_on_rank(step: Any, rank: int, comm: Any, executor: str = "codegen", target: str = "torch") -> dict[str, Any]:
    """Compile ``step`` for ``rank``, run it on the single-device arguments' pieces, gather.

    Returns ``outputs`` (global values), ``local`` (this rank's pieces, as the program returned
    them), ``comm_ops`` (collectives in the program), ``issued`` (collectives the run issued; their
    bytes in ``issued_bytes``)
    and, for target ``triton``, ``kernel_stats``.
    """
    from spmdc.compiler import compile_rank
    from spmdc.runtime.executor import RankRunner

    prog = compile_rank(step, rank, target)
    run = RankRunner(prog, comm, executor)
    outs = run(run.local_arguments(step.arguments))
    issued = dict(comm.stats.counts)
    result = {"outputs": run.full_results(outs), "local": list(outs), "comm_ops": prog.comm_ops, "issued": issued,
              "issued_bytes": dict(comm.stats.bytes), "expert_rows": dict(comm.stats.expert_rows)}
    if prog.kernel_stats is not None:
        result["kernel_stats"] = prog.kernel_stats
    return result


def run_steps(steps: list[Any], executor: str = "codegen", target: str = "torch",
              seed: int | None = None) -> list[dict[str, Any]]:
    """A launch entry point: every step on this rank (gloo), one DeviceMesh per mesh shape.
    ``seed``: ``torch.manual_seed(seed)`` before each step (programs with random ops).
    ``SPMDC_COLLECTIVE_TIMEOUT`` (seconds), when set, bounds every collective of the job."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.runtime.collectives import Collectives, collective_timeout, timed_out

    timeout = collective_timeout()
    dist.init_process_group("gloo", **({"timeout": timedelta(seconds=timeout)} if timeout else {}))
    rank = dist.get_rank()
    meshes: dict[tuple, Any] = {}
    out = []
    try:
        for step in steps:
            key = (step.mesh.axis_names, step.mesh.shape)
            if key not in meshes:
                meshes[key] = init_device_mesh("cpu", step.mesh.shape, mesh_dim_names=step.mesh.axis_names)
            comm = Collectives(meshes[key])
            if seed is not None:
                torch.manual_seed(seed)
            out.append(run_on_rank(step, rank, comm, executor, target=target))
    finally:
        if not timed_out():   # a timed-out group's threads are stuck: the rank just exits
            dist.destroy_process_group()
    return out
