"""Compiling once per job and sharing the result with every rank of a torch.distributed job.

The global program is compiled on one rank and broadcast (:func:`compile_shared`); so is each
*role*'s program (:func:`compile_rank_shared`): ranks whose per-rank programs are the same
(:func:`spmdc.passes.partition_roles.program_roles`: the same local shapes, nothing of their
coordinates written in) run one program, which the role's lowest rank partitions and sends. A
4096-rank fsdp+tp job on even shapes compiles one rank program, not 4096. The compiling rank looks
in the compile cache first (:mod:`spmdc.compiler.compile_cache`); the broadcast is the same either way.

    prog = compile_rank_shared(step, at, "torch", None, ranks=[(i, i) for i in range(world)])
    sharing.compiled, sharing.received          # this process's rank programs: partitioned / sent to it
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass
class SharingStats:
    """Rank programs this process partitioned (stages 06-08) or received from its role's compiling rank."""

    compiled: int = 0
    received: int = 0
    roles: int = 0          # roles of the last program shared

    def reset(self) -> None:
        self.compiled = self.received = self.roles = 0


sharing = SharingStats()
MAX_SHARED_ROLES = 16   # more roles of several ranks each: every rank compiles its own (a broadcast each)


def compile_rank_shared(step: Any, at: int, target: str, dump: Any, *, ranks: list[tuple[int, int]],
                        group: Any = None) -> Any:
    """Rank ``at``'s RankProgram (``at``: its index on ``step.mesh``), its stages 06-08 shared within
    its role. ``ranks``: ``(index on step.mesh, job rank)`` of every rank running ``step`` (the mesh,
    a device group's members on its virtual mesh, a pipeline stage's), ``group``: their process group.

    Each role's lowest rank partitions the program and broadcasts it (its IR's flat form and text)
    to the ranks; its role's ranks take it and generate its code (the codegen cache keeps one copy
    per machine). A role failure fails every rank with its error. Every rank compiles its own
    instead with ``share_programs=False``, an IR dump of the per-rank stages (each rank's IR is
    written), one rank, or more than ``MAX_SHARED_ROLES`` roles of several ranks (as many broadcasts)."""
    import torch.distributed as dist

    from spmdc.compiler.compile_cache import entry_modules, rank_entry
    from spmdc.compiler.driver import rank_codegen, rank_stages
    from spmdc.ir.parser import parse_module
    from spmdc.passes.partition_roles import program_roles

    opts = step.options
    alone = len(ranks) < 2 or not (dist.is_available() and dist.is_initialized())
    if alone or not opts.share_programs or (dump is not None and dump.ir_dir is not None):
        sharing.compiled += 1
        return rank_codegen(rank_stages(step, at, target, dump))
    parsed = parse_module(step.global_ir, "<global>")
    job_rank = dict(ranks)
    roles = program_roles(parsed, step.mesh, [i for i, _ in ranks])
    shared = [r for r in roles if len(r) > 1]
    sharing.roles = len(roles)
    if len(shared) > MAX_SHARED_ROLES:
        shared = []
    c = None
    for role in shared:   # (every rank takes part in every broadcast, in the same order)
        box: list[Any] = [None]
        if role[0] == at:
            try:
                c = rank_stages(step, at, target, dump, parsed=parsed)
                box[0] = rank_entry(c)
            except Exception as e:  # tell the role's ranks instead of leaving them waiting
                box[0] = e
            sharing.compiled += 1
        dist.broadcast_object_list(box, src=job_rank[role[0]], group=group)
        if isinstance(box[0], BaseException):
            raise box[0]
        if at in role and role[0] != at:
            entry = box[0]
            c = rank_stages_from(step, at, target, dump, entry, entry_modules)
            sharing.received += 1
    if c is None:   # a role of one: this rank's own program
        sharing.compiled += 1
        c = rank_stages(step, at, target, dump, parsed=parsed)
    return rank_codegen(c, at)


def rank_stages_from(step: Any, at: int, target: str, dump: Any, entry: dict[str, Any], load: Any) -> Any:
    """A Compilation at rank ``at`` whose stages 06-08 are the received ``entry`` (its role's program);
    an entry whose text would not read back as itself (``{"store": False}``) is compiled here."""
    from spmdc.compiler.compilation import Compilation
    from spmdc.compiler.driver import rank_stages

    if not entry.get("store", True):
        return rank_stages(step, at, target, dump)
    c = Compilation.of_step(step, at, target, dump, last="pipeline-schedule")
    c.target = target or step.options.resolved_target()
    c.module, c.unfused = load(entry, at, "<the role's program>")
    return c
