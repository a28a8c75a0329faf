"""``pipeline-schedule``: each rank's pipeline program, sends and receives in order.

Input: a pipeline module (:mod:`spmdc.dialects.pipe`): the stage meshes (``shard.mesh`` with
``devices``; stage ``k`` is the ``k``-th mesh a ``pipe.boundary`` names, in declaration order) and
the boundary values. For every rank the pass appends ``func.func @rank<r>``: its stage's compute
order (:func:`spmdc.sharding.pipeline_plan.stage_actions` for ``schedule`` and ``microbatches``), each
forward preceded by the receives of the stage's inputs and followed by the sends of its outputs,
each backward preceded by the receives of its outputs' gradients and followed by the sends of its
inputs' gradients. The ranks at the other end come from the finest-slice table between the two
layouts (:func:`spmdc.sharding.slices.bsr_plan`): a rank sends only what a receiver lacks, a
receiver of a partial value gets one message per term. A value several later stages read is
declared once per consumer (``pipe.boundary`` ops with the same ``id``, one ``to`` mesh each): its
producer's ``pipe.send`` goes to the ranks of every consumer, and the receive of its gradient
before the producer's backward waits for every consumer's message, the pieces summed on arrival
(the gradient of a value read twice is the sum of the two)::

    // spmdc-opt --pipeline-schedule="schedule=gpipe microbatches=2"
    func.func @rank2() attributes {spmdc.rank = 2, spmdc.schedule = "gpipe", spmdc.stage = 1} {
      pipe.recv {from = [0, 1], mb = 0, value = 0}
      pipe.forward_backward {mb = 0, stage = 1}
      pipe.send {grad, mb = 0, to = [0, 1], value = 0}
      ...
      pipe.step
      func.return
    }

Interleaved 1F1B (``schedule=interleaved1f1b``): ``P·v`` stage meshes on ``P`` device groups,
stage ``k`` on the ranks of stage ``k % P``; each rank's function runs its group's stages in
:func:`~spmdc.sharding.pipeline_plan.interleaved_actions` order, its messages carrying their
stage too (``pipe.send {mb = 0, stage = 2, to = [1], value = 2}``), the function its stages
(``spmdc.stages = [0, 2]``).

Errors: a boundary between meshes that are not device groups of disjoint ranks (or, interleaved,
the same ranks), a boundary inside one device group, stages that share ranks otherwise or under
another schedule, micro-batches not a multiple of the groups (interleaved), a stage that
runs on no mesh, an unknown schedule, a value declared twice for one consumer or with another
producer, shape or gradient layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.attrs import RANK_ATTR, SCHEDULE_ATTR, STAGE_ATTR, STAGES_ATTR
from spmdc.dialects.func import FuncOp, ReturnOp
from spmdc.dialects.pipe import (
    BackwardOp,
    BoundaryOp,
    ForwardBackwardOp,
    ForwardOp,
    RecvOp,
    SendOp,
    StepOp,
)
from spmdc.dialects.shard import MeshOp
from spmdc.ir.attributes import ArrayAttr, IntegerAttr, StringAttr, UnitAttr
from spmdc.ir.core import Operation
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.pipeline_plan import INTERLEAVED, SCHEDULES, interleaved_actions, schedule_name, stage_actions
from spmdc.sharding.slices import BsrPlan, MeshSpec, bsr_plan


@dataclass
class PipelineLayout:
    """What a pipeline module declares: stage meshes in order, boundaries, and their tables."""

    meshes: list[MeshOp]
    boundaries: list[BoundaryOp]
    plans: dict[tuple[int, int, bool], BsrPlan]     # (value, consumer stage, grad) -> the table it moves by

    def moves(self, value: int, grad: bool) -> list[BsrPlan]:
        """The tables ``value`` (or its gradient) moves by: one per consumer stage, in stage order."""
        return [p for (v, _, g), p in sorted(self.plans.items(), key=lambda kv: kv[0][1]) if v == value and g == grad]

    def stages_of(self, rank: int) -> list[int]:
        """The stages ``rank`` runs (several under interleaved 1F1B), in order."""
        return [k for k, m in enumerate(self.meshes) if rank in m.devices]

    def stage_of_mesh(self, name: str) -> int:
        return [m.sym_name for m in self.meshes].index(name)

    def producer(self, b: BoundaryOp) -> int:
        return self.stage_of_mesh(b.attributes["from"].mesh)  # type: ignore[attr-defined]

    def consumer(self, b: BoundaryOp) -> int:
        return self.stage_of_mesh(b.attributes["to"].mesh)  # type: ignore[attr-defined]


def pipeline_layout(module: Operation) -> PipelineLayout:
    """Read the stage meshes and boundaries of a pipeline module and compute each move's table."""
    all_meshes = {op.sym_name: op for op in module.body.ops if isinstance(op, MeshOp)}
    boundaries = [op for op in module.body.ops if isinstance(op, BoundaryOp)]
    used: set[str] = set()
    for b in boundaries:
        for key in ("from", "to", "grad_from", "grad_to"):
            a = b.attributes.get(key)
            if a is None:
                continue
            if a.mesh not in all_meshes:  # type: ignore[attr-defined]
                raise b.emit_error(f"'{key}' names unknown mesh '@{a.mesh}'")  # type: ignore[attr-defined]
            used.add(a.mesh)  # type: ignore[attr-defined]
    meshes = [m for m in all_meshes.values() if m.sym_name in used]
    seen: dict[int, MeshOp] = {}
    for m in meshes:
        for d in m.devices:
            if d in seen and list(seen[d].devices) != list(m.devices):
                raise m.emit_error(f"stage mesh @{m.sym_name} shares rank {d} with @{seen[d].sym_name}: stages run "
                                   "on disjoint device groups (or, interleaved, on the same group)")
            seen.setdefault(d, m)
    specs = {m.sym_name: MeshSpec(tuple(m.axis_names), tuple(m.shape), tuple(m.devices)) for m in meshes}
    out = PipelineLayout(meshes, boundaries, {})
    first: dict[int, BoundaryOp] = {}
    for b in boundaries:
        if b.attributes["grad_from" if b.differentiable else "from"] is None:
            continue
        _same_value(first.setdefault(b.id, b), b, out)
        pairs = [(False, "from", "to")] + ([(True, "grad_from", "grad_to")] if b.differentiable else [])
        for grad, src, dst in pairs:
            try:
                out.plans[(b.id, out.consumer(b), grad)] = bsr_plan(b.shape, b.attributes[src],
                                                                    b.attributes[dst], specs)
            except (ValueError, NotImplementedError) as e:
                raise b.emit_error(f"cannot move {'the gradient of ' if grad else ''}value {b.id}: {e}") from None
        if list(out.meshes[out.producer(b)].devices) == list(out.meshes[out.consumer(b)].devices):
            raise b.emit_error(f"value {b.id} goes from stage {out.producer(b)} to stage {out.consumer(b)} on the "
                               "same device group: interleaved stages pass values only to another group")
        if out.producer(b) >= out.consumer(b):
            raise b.emit_error(f"value {b.id} goes from stage {out.producer(b)} to stage {out.consumer(b)}: a "
                               "boundary flows to a later stage")
        if b.differentiable and (b.attributes["grad_from"].mesh != b.attributes["to"].mesh  # type: ignore[attr-defined]
                                 or b.attributes["grad_to"].mesh != b.attributes["from"].mesh):  # type: ignore[attr-defined]
            raise b.emit_error("a gradient flows back from the consumer's mesh to the producer's")
    return out


def _same_value(first: BoundaryOp, b: BoundaryOp, layout: PipelineLayout) -> None:
    """Refuse a second declaration of ``first``'s value that is not the same value going to
    another consumer: same producer layout, shape and gradient layout, a new consumer stage."""
    if b is first:
        return
    if layout.consumer(b) == layout.consumer(first):
        raise b.emit_error(f"value {b.id} is declared twice for stage {layout.consumer(b)}")
    for key in ("from", "shape", "grad_to"):
        if str(b.attributes.get(key)) != str(first.attributes.get(key)):
            raise b.emit_error(f"value {b.id} is declared with another '{key}' for stage {layout.consumer(b)} "
                               f"({b.attributes.get(key)}) than for stage {layout.consumer(first)} "
                               f"({first.attributes.get(key)}): one value, one producer layout")


def _peers(plans: list[BsrPlan], rank: int, sending: bool) -> list[int]:
    if sending:
        return sorted({d for plan in plans for (s, d) in plan.sends if s == rank and d != rank})
    return sorted({s for plan in plans for (s, d) in plan.sends if d == rank and s != rank})


def rank_actions(layout: PipelineLayout, rank: int, schedule: str, microbatches: int) -> list[tuple[str, int, int]]:
    """``(kind, stage, mb)`` of the rank's compute ops in order: its one stage's
    :func:`~spmdc.sharding.pipeline_plan.stage_actions`, or under interleaved 1F1B its group's
    :func:`~spmdc.sharding.pipeline_plan.interleaved_actions` over its stages."""
    mine = layout.stages_of(rank)
    n = len(layout.meshes)
    if schedule != INTERLEAVED:
        return [(kind, mine[0], mb) for kind, mb in stage_actions(schedule, n, microbatches, mine[0])]
    groups = n // len(mine)
    return interleaved_actions(groups, len(mine), microbatches, mine[0])


def rank_schedule(layout: PipelineLayout, rank: int, schedule: str, microbatches: int) -> FuncOp:
    """``func.func @rank<rank>``: the rank's schedule (see the module doc). A rank holding several
    stages (interleaved) names each message's stage too (``stage = k`` on ``pipe.send``/``recv``)."""
    mine = layout.stages_of(rank)
    func = FuncOp.build(f"rank{rank}", [], [])
    func.set_attr(RANK_ATTR, IntegerAttr(rank))
    func.set_attr(STAGE_ATTR, IntegerAttr(mine[0]))
    if len(mine) > 1:
        func.set_attr(STAGES_ATTR, ArrayAttr([IntegerAttr(k) for k in mine]))
    func.set_attr(SCHEDULE_ATTR, StringAttr(schedule))
    body = func.body

    def message(cls: type, b: BoundaryOp, mb: int, grad: bool, stage: int) -> None:
        # (a value's output is sent to, its gradient received from, every consumer stage at once)
        plans = layout.moves(b.id, grad) if layout.producer(b) == stage else [layout.plans[(b.id, stage, grad)]]
        peers = _peers(plans, rank, cls is SendOp)
        if peers:
            attrs = {"value": IntegerAttr(b.id), "mb": IntegerAttr(mb), cls.peer_key: [int(p) for p in peers]}
            if grad:
                attrs["grad"] = UnitAttr()
            if len(mine) > 1:
                attrs["stage"] = IntegerAttr(stage)
            body.append(cls.create(attributes=attrs, result_types=[]))

    for kind, stage, mb in rank_actions(layout, rank, schedule, microbatches):
        ins = [b for b in layout.boundaries if layout.consumer(b) == stage]
        outs = [b for b in layout.boundaries if layout.producer(b) == stage]
        outs = [b for i, b in enumerate(outs) if all(o.id != b.id for o in outs[:i])]   # a value once, for all
        where = {"stage": IntegerAttr(stage), "mb": IntegerAttr(mb)}
        if kind in ("F", "FB"):
            for b in ins:
                message(RecvOp, b, mb, False, stage)
            body.append((ForwardOp if kind == "F" else ForwardBackwardOp).create(attributes=where, result_types=[]))
            if kind == "F":
                for b in outs:
                    message(SendOp, b, mb, False, stage)
        else:
            for b in outs:
                if b.differentiable:
                    message(RecvOp, b, mb, True, stage)
            body.append(BackwardOp.create(attributes=where, result_types=[]))
        if kind in ("B", "FB"):
            for b in ins:
                if b.differentiable:
                    message(SendOp, b, mb, True, stage)
    body.append(StepOp.create(result_types=[]))
    body.append(ReturnOp.create(result_types=[]))
    return func


@dataclass
class PipelineSchedule(ModulePass):
    """Append every rank's schedule to a pipeline module (see the module doc)."""

    name: ClassVar[str] = "pipeline-schedule"
    schedule: str = "1f1b"
    microbatches: int = 1

    def run(self, module: Operation) -> None:
        self.schedule = schedule_name(self.schedule)
        boundaries = [op for op in module.body.ops if isinstance(op, BoundaryOp)]
        if not boundaries:
            return
        if self.schedule not in SCHEDULES:
            raise boundaries[0].emit_error(f"unknown pipeline schedule '{self.schedule}' "
                                           f"(schedules: {', '.join(SCHEDULES)})")
        if self.microbatches < 1:
            raise boundaries[0].emit_error(f"microbatches must be >= 1, got {self.microbatches}")
        layout = pipeline_layout(module)
        if len(layout.meshes) < 2:
            raise boundaries[0].emit_error("a pipeline needs at least two stage meshes")
        for k in range(len(layout.meshes)):
            if k and not any(layout.consumer(b) == k for b in layout.boundaries):
                raise layout.meshes[k].emit_error(f"stage {k} (@{layout.meshes[k].sym_name}) receives no value "
                                                  "from an earlier stage")
        _check_groups(layout, self.schedule, self.microbatches, boundaries[0])
        done: set[int] = set()
        for m in layout.meshes:
            for r in m.devices:
                if r not in done:
                    done.add(r)
                    module.body.append(rank_schedule(layout, r, self.schedule, self.microbatches))


def _check_groups(layout: PipelineLayout, schedule: str, microbatches: int, at: Operation) -> None:
    """Stages on shared device groups only as interleaved 1F1B lays them: ``P·v`` stage meshes,
    stage ``k`` on the ranks of stage ``k % P``; ``microbatches`` a multiple of ``P``."""
    n = len(layout.meshes)
    groups = len({tuple(m.devices) for m in layout.meshes})
    if schedule != INTERLEAVED:
        if groups != n:
            raise at.emit_error(f"{n} stage meshes on {groups} device groups: several stages per rank need "
                                f"schedule={INTERLEAVED}")
        return
    for k, m in enumerate(layout.meshes):
        if n % groups or list(m.devices) != list(layout.meshes[k % groups].devices):
            raise at.emit_error(f"schedule {INTERLEAVED}: stage {k} (@{m.sym_name}) must run on the ranks of stage "
                                f"{k % groups} (stage k on device group k % {groups}, each group {n // groups or 1} "
                                "stages)")
    if microbatches % groups:
        raise at.emit_error(f"schedule {INTERLEAVED}: {microbatches} micro-batches is not a multiple of the "
                            f"{groups} device groups")


PASS = PipelineSchedule

__all__ = ["PipelineLayout", "PipelineSchedule", "pipeline_layout", "rank_actions", "rank_schedule"]
