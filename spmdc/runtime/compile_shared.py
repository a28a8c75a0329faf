"""Compiling once per job and sharing the result with every rank of a torch.distributed job."""

from __future__ import annotations

from typing import Any

from spmdc.compiler import compile_global
from spmdc.sharding.mesh import Mesh


def compile_shared(model: Any, jobs: list[dict[str, Any]], mesh: Mesh, plan: Any) -> list[Any]:
    """Compile each job (``compile_step`` keyword arguments) once and share it with every rank.

    Job ``j`` compiles on rank ``j % world`` (forward and training programs in parallel), and the
    CompiledStep, without its tensors, is broadcast from there; one failure fails every rank.
    """
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    boxes: list[list[Any]] = [[None] for _ in jobs]
    for j, job in enumerate(jobs):
        if j % world == rank:
            try:
                step = compile_global(model, mesh=mesh, plan=plan, **job)
                step.arguments = []  # every rank takes the values from its own model
                boxes[j][0] = step
            except Exception as e:  # tell the other ranks instead of leaving them waiting
                boxes[j][0] = e
    out = []
    for j, box in enumerate(boxes):
        if world > 1:
            dist.broadcast_object_list(box, src=j % world)
        if isinstance(box[0], BaseException):
            raise box[0]   # the same error (spmdc's errors survive pickling) on every rank
        out.append(box[0])
    return out
