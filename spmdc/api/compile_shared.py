"""Compiling once per job and sharing the result with every rank of a torch.distributed job.

The compiling rank looks in the compile cache first (:mod:`spmdc.compiler.compile_cache`): a hit
skips capture and the global passes; the broadcast is the same either way.
"""

from __future__ import annotations

from typing import Any

from spmdc.compiler import compile_global
from spmdc.compiler.compile_cache import cached_compile
from spmdc.sharding.mesh import Mesh


def compile_shared(model: Any, jobs: list[dict[str, Any]], mesh: Mesh, plan: Any, group: Any = None,
                   members: list[int] | None = None) -> list[Any]:
    """Compile each job (``compile_step`` keyword arguments) once and share it with every rank
    of the mesh (``group``/``members``: a device group's process group and ranks; default the job).

    Job ``j`` compiles on the ``j % n``-th rank (forward and training programs in parallel), and
    the CompiledStep, without its tensors, is broadcast from there; one failure fails every rank.
    """
    import torch.distributed as dist

    on = dist.is_available() and dist.is_initialized()
    members = members if members is not None else list(range(dist.get_world_size() if on else 1))
    world = len(members)
    rank = members.index(dist.get_rank()) if on else 0
    boxes: list[list[Any]] = [[None] for _ in jobs]
    for j, job in enumerate(jobs):
        if j % world == rank:
            try:
                def build(job: dict[str, Any] = job) -> Any:
                    step = compile_global(model, mesh=mesh, plan=plan, **job)
                    step.arguments = []  # every rank takes the values from its own model
                    return step
                boxes[j][0] = cached_compile(build, model, job, mesh=mesh, plan=plan)
            except Exception as e:  # tell the other ranks instead of leaving them waiting
                boxes[j][0] = e
    out = []
    for j, box in enumerate(boxes):
        if world > 1:
            dist.broadcast_object_list(box, src=members[j % world], group=group)
        if isinstance(box[0], BaseException):
            raise box[0]   # the same error (spmdc's errors survive pickling) on every rank
        out.append(box[0])
    return out


def compile_groups_shared(model: Any, jobs: list[dict[str, Any]], hplan: Any) -> list[Any]:
    """:func:`compile_shared` for a heterogeneous plan: job ``j`` compiles every group's program
    (:func:`spmdc.compiler.device_groups.compile_groups`) on job rank ``j % world``, broadcast to every
    rank; each rank keeps its group's steps."""
    import torch.distributed as dist

    from spmdc.compiler.device_groups import compile_groups

    world, rank = dist.get_world_size(), dist.get_rank()
    boxes: list[list[Any]] = [[None] for _ in jobs]
    for j, job in enumerate(jobs):
        if j % world == rank:
            try:
                def build(job: dict[str, Any] = job) -> Any:
                    steps = compile_groups(model, hplan, **job)
                    for step in steps:
                        step.arguments = []
                    return steps
                boxes[j][0] = cached_compile(build, model, job, mesh=None, plan=hplan, kind="groups")
            except Exception as e:  # tell the other ranks instead of leaving them waiting
                boxes[j][0] = e
    g = hplan.group_of(rank)
    out = []
    for j, box in enumerate(boxes):
        dist.broadcast_object_list(box, src=j % world)
        if isinstance(box[0], BaseException):
            raise box[0]
        out.append(box[0][g])
    return out
