"""Pipeline plans (Hetu v2 / GPipe / 1F1B): stages by module, each on its own device group.

    plan = PipelinePlan.from_dict({
        "name": "pp2-tp2",
        "schedule": "1f1b", "microbatches": 4,
        "stages": [
            {"modules": ["wte", "wpe", "h.0"], "ranks": [0, 1], "mesh": "tp=2", "plan": "megatron"},
            {"modules": ["h.1", "ln_f", "lm_head"], "ranks": [2], "mesh": "dp=1", "plan": "dp"},
        ]})

Each stage is a device group (ranks, mesh and plan as in a heterogeneous plan's ``groups``:
:mod:`spmdc.sharding.device_groups`, stages may differ) that runs the model's ops inside its
``modules`` (see :mod:`spmdc.frontend.stages` for the patterns; without ``modules`` on any stage,
the model's repeated blocks are cut evenly). The batch is cut into ``microbatches`` along dim 0;
``schedule`` orders each stage's forwards and backwards:

* ``gpipe``: every forward, then every backward (all micro-batches' inputs stashed at once);
* ``1f1b``: stage ``s`` of ``S`` runs ``S - s - 1`` forwards, then alternates one forward and one
  backward, then drains: at most ``S - s`` micro-batches in flight per stage.
* ``interleaved1f1b`` (``Interleaved1F1B``, alias ``interleaved``; Megatron's virtual pipeline stages):
  the model is cut into ``P·v`` stages for ``P`` device groups, ``virtual_stages=v`` per group
  (default 2); group ``k`` holds stages ``k, k+P, k+2P, ...`` and runs them in the order of
  :func:`interleaved_actions` (1F1B over the group's stages, micro-batches in rounds of ``P``):
  the bubble shrinks by about ``v`` at ``v`` times the messages. ``microbatches`` must be a
  multiple of ``P``; the stages are cut automatically (no ``modules``)::

      PipelinePlan.from_mesh("pp=2", "dp", schedule="interleaved", virtual_stages=2)   # 4 stages
      # stage0, stage2 on rank 0; stage1, stage3 on rank 1

:func:`stage_actions` gives one stage's compute order; :mod:`spmdc.passes.pipeline_schedule` turns it
into each rank's program with its sends and receives.

A mesh with a ``pp`` axis and a one-mesh preset is a pipeline too (:meth:`PipelinePlan.from_mesh`,
:func:`split_pp_axis`): stage ``k`` is the ranks whose ``pp`` coordinate is ``k`` (row-major over the
axes as written, as ``init_device_mesh`` numbers them), each stage the preset on the other axes::

    PipelinePlan.from_mesh("pp=2,dp=2,tp=2", "fsdp+tp")   # stage0: ranks 0-3, stage1: ranks 4-7, dp=2,tp=2
    PipelinePlan.from_mesh("dp=2,pp=2,tp=2", "fsdp+tp")   # stage0: ranks 0,1,4,5, stage1: ranks 2,3,6,7
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spmdc.sharding.device_groups import HeteroPlan
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Places, PlanError, check_keys, preset

SCHEDULES = ("gpipe", "1f1b", "interleaved1f1b")
INTERLEAVED = "interleaved1f1b"
SCHEDULE_ALIASES = {"interleaved": INTERLEAVED}   # (torch.distributed.pipelining: Interleaved1F1B)
DEFAULT_VIRTUAL_STAGES = 2
PP_AXIS = "pp"   # the mesh axis whose coordinates are pipeline stages (from_mesh)
PLAN_KEYS = ("stages", "name", "schedule", "microbatches", "batch", "virtual_stages")
STAGE_KEYS = ("modules", "ranks", "mesh", "plan", "name")


@dataclass(frozen=True)
class StageSpec:
    """One stage: its modules (None: cut automatically), ranks, mesh and plan."""

    name: str
    modules: tuple[str, ...] | None
    ranks: tuple[int, ...]
    mesh: Mesh
    plan: Any


@dataclass
class PipelinePlan:
    stages: list[StageSpec]
    name: str = "pipeline"
    schedule: str = "1f1b"
    microbatches: int = 1
    batch: int | None = None
    mesh: Mesh | None = None   # the mesh with a ``pp`` axis the stages were cut from (from_mesh), else None
    virtual_stages: int = 1    # stages per device group (interleaved1f1b): stage k on group k % groups

    @property
    def groups(self) -> int:
        """The number of device groups ``P`` (``len(stages) // virtual_stages``)."""
        return len(self.stages) // self.virtual_stages

    @property
    def world(self) -> int:
        return len({r for s in self.stages for r in s.ranks})

    def stage_of(self, rank: int) -> int:
        """The first stage ``rank`` runs (its group's index)."""
        return self.stages_of(rank)[0]

    def stages_of(self, rank: int) -> list[int]:
        """Every stage ``rank`` runs: one, or ``virtual_stages`` under an interleaved schedule."""
        out = [i for i, s in enumerate(self.stages) if rank in s.ranks]
        if not out:
            raise ValueError(f"rank {rank} is in no stage of pipeline plan '{self.name}'")
        return out

    @staticmethod
    def is_pipeline(d: Any) -> bool:
        return isinstance(d, Mapping) and "stages" in d

    @staticmethod
    def from_dict(d: Mapping[str, Any], places: Places | None = None) -> PipelinePlan:
        """A pipeline plan from its mapping; every key (the plan's, each stage's, a stage plan's)
        is checked, an unknown one refused with its place and near match."""
        places = places or Places()
        check_keys(d, PLAN_KEYS, places, (), "a pipeline plan")
        raw = d.get("stages")
        if not isinstance(raw, list) or len(raw) < 2:
            raise PlanError("pipeline plan: 'stages' must list at least two stages")
        groups, modules = [], []
        for i, sd in enumerate(raw):
            if not isinstance(sd, Mapping):
                raise PlanError(f"pipeline plan: stage #{i}: expected a mapping with {', '.join(STAGE_KEYS[:4])}")
            check_keys(sd, STAGE_KEYS, places, ("stages", i), f"stage #{i} of a pipeline plan")
            mods = sd.get("modules")
            if mods is not None:
                if isinstance(mods, str):
                    mods = mods.split()
                if not isinstance(mods, list) or not mods or not all(isinstance(m, str) for m in mods):
                    raise PlanError(f"pipeline plan: stage #{i}: 'modules' must be a non-empty list of module paths "
                                    f"or patterns (h.0-h.3, h.*), got {sd.get('modules')!r}")
            modules.append(tuple(mods) if mods is not None else None)
            g = {k: v for k, v in sd.items() if k != "modules"}
            g.setdefault("name", f"stage{i}")
            groups.append(g)
        if any(m is None for m in modules) and not all(m is None for m in modules):
            k = modules.index(None)
            raise PlanError(f"pipeline plan: stage #{k} has no 'modules' but others do: name every stage's modules, "
                            "or none (the repeated blocks are then cut evenly)")
        try:
            h = HeteroPlan.from_dict({"groups": groups}, places, list_key="stages")
        except PlanError as e:
            raise PlanError(str(e).replace("heterogeneous plan: group", "pipeline plan: stage")
                            .replace("heterogeneous plan", "pipeline plan").replace("groups", "stages")
                            .replace("in group", "in stage").replace("the group has", "the stage has")) from None
        schedule = schedule_name(d.get("schedule", "1f1b"))
        if schedule not in SCHEDULES:
            near = difflib.get_close_matches(schedule, SCHEDULES, n=1)
            raise PlanError(f"pipeline plan: unknown schedule '{schedule}' (schedules: {', '.join(SCHEDULES)})"
                            + (f"; did you mean '{near[0]}'?" if near else ""))
        v = d.get("virtual_stages")
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise PlanError(f"pipeline plan: 'virtual_stages' must be a positive integer, got {v!r}")
        if v is not None and v > 1 and schedule != INTERLEAVED:
            raise PlanError(f"pipeline plan: virtual_stages={v} is for schedule '{INTERLEAVED}' (interleaved), "
                            f"not '{schedule}'")
        if schedule == INTERLEAVED and modules[0] is not None:
            raise PlanError("pipeline plan: schedule 'interleaved1f1b' cuts the repeated blocks into stages×"
                            "virtual_stages stages itself: list each device group's ranks without 'modules'")
        mb = d.get("microbatches", len(raw))
        if not isinstance(mb, int) or isinstance(mb, bool) or mb < 1:
            raise PlanError(f"pipeline plan: 'microbatches' must be a positive integer, got {mb!r}")
        batch = d.get("batch")
        if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
            raise PlanError(f"pipeline plan: 'batch' must be a positive integer, got {batch!r}")
        stages = [StageSpec(g.name, m, g.ranks, g.mesh, g.plan) for g, m in zip(h.groups, modules)]
        out = PipelinePlan(stages, str(d.get("name", "pipeline")), "1f1b", mb, batch)
        return out.with_schedule(schedule, None, v)

    def with_schedule(self, schedule: str | None = None, microbatches: int | None = None,
                      virtual_stages: int | None = None) -> PipelinePlan:
        """This plan with the schedule or micro-batch count replaced (``--pp-schedule``, ``--microbatches``).
        To or from ``interleaved1f1b`` the automatically cut stages are cut again: ``groups ×
        virtual_stages`` stages (default :data:`DEFAULT_VIRTUAL_STAGES`), stage ``k`` on group ``k % groups``."""
        d = {"stages": [], "name": self.name, "schedule": schedule_name(schedule or self.schedule),
             "microbatches": microbatches if microbatches is not None else self.microbatches}
        out = dataclasses.replace(self, stages=list(self.stages))
        if virtual_stages is not None and virtual_stages > 1 and d["schedule"] != INTERLEAVED:
            raise PlanError(f"virtual_stages={virtual_stages} is for schedule '{INTERLEAVED}' (interleaved), "
                            f"not '{d['schedule']}'")
        if d["schedule"] in SCHEDULES:
            v = (virtual_stages or (self.virtual_stages if self.virtual_stages > 1 else DEFAULT_VIRTUAL_STAGES)
                 if d["schedule"] == INTERLEAVED else 1)
            if v != self.virtual_stages:
                if self.stages[0].modules is not None:
                    raise PlanError(f"pipeline plan '{self.name}': schedule '{d['schedule']}' with {v} stages per "
                                    "device group cuts the stages itself, but this plan names each stage's modules")
                groups = self.stages[:self.groups]
                out.stages = [dataclasses.replace(groups[k % len(groups)], name=groups[k % len(groups)].name
                                                  + (f".v{k // len(groups)}" if k >= len(groups) else ""))
                              for k in range(len(groups) * v)]
                out.virtual_stages = v
        if d["schedule"] not in SCHEDULES:
            near = difflib.get_close_matches(str(d["schedule"]), SCHEDULES, n=1)
            raise PlanError(f"unknown pipeline schedule '{d['schedule']}' (schedules: {', '.join(SCHEDULES)})"
                            + (f"; did you mean '{near[0]}'?" if near else ""))
        mb = d["microbatches"]
        if not isinstance(mb, int) or isinstance(mb, bool) or mb < 1:
            raise PlanError(f"microbatches must be a positive integer, got {mb!r}")
        if d["schedule"] == INTERLEAVED and mb % out.groups:
            raise PlanError(f"pipeline plan '{self.name}': schedule '{INTERLEAVED}' runs micro-batches in rounds of "
                            f"the {out.groups} device groups; {mb} micro-batches is not a multiple of {out.groups}")
        out.schedule, out.microbatches = str(d["schedule"]), int(mb)
        return out

    @staticmethod
    def from_mesh(mesh: Any, plan: Any, *, schedule: str | None = None,
                  microbatches: int | None = None, virtual_stages: int | None = None) -> PipelinePlan:
        """Stages over the ``pp`` axis of ``mesh`` (a Mesh, ``"pp=2,dp=2,tp=2"`` or a mapping), each
        stage ``plan`` (a preset, or a :class:`~spmdc.sharding.plan.Plan` refining one) on the other
        axes, its modules cut automatically (the repeated blocks evenly). Stage ``k``: the ranks whose
        ``pp`` coordinate is ``k``, row-major over the axes as written (``pp`` may be anywhere);
        ``pp`` alone: each stage one rank, mesh ``dp=1``. ``schedule`` defaults to 1f1b,
        ``microbatches`` to the number of stages (torchtitan's default); ``schedule="interleaved"``:
        ``pp × virtual_stages`` stages (default 2 per rank group), stage ``k`` on the ranks of
        ``pp`` coordinate ``k % pp``. Refused: a ``pp`` axis
        missing or of size 1 (one stage: :func:`split_pp_axis` keeps the one-mesh plan), a plan with
        its own stages or device groups, a plan of per-parameter layouts."""
        mesh = Mesh.of(mesh)
        if PP_AXIS not in mesh.axis_names:
            raise PlanError(f"mesh {mesh} has no '{PP_AXIS}' axis to cut into pipeline stages")
        n = mesh.axis_size(PP_AXIS)
        if n < 2:
            raise PlanError(f"mesh {mesh}: a '{PP_AXIS}' axis of size 1 is one stage, not a pipeline; use plan "
                            f"'{_plan_name(plan)}' on the mesh itself")
        _check_stage_plan(mesh, plan)
        stage_mesh = Mesh([(a, k) for a, k in mesh.axes if a != PP_AXIS] or [("dp", 1)])
        try:
            preset(getattr(plan, "preset", None) or plan, stage_mesh, {})
        except PlanError as e:
            raise PlanError(f"mesh {mesh}: each pipeline stage runs plan '{_plan_name(plan)}' on the other axes, "
                            f"{stage_mesh}: {e}") from None
        ranks: list[list[int]] = [[] for _ in range(n)]
        for r in range(mesh.size):
            ranks[mesh.coords(r)[PP_AXIS]].append(r)
        stages = [StageSpec(f"stage{k}", None, tuple(rs), stage_mesh, plan) for k, rs in enumerate(ranks)]
        out = PipelinePlan(stages, f"{_plan_name(plan)} in {n} pp stages", "1f1b", n, None, mesh)
        return out.with_schedule(schedule, microbatches, virtual_stages)

    def check_presets(self) -> None:
        from spmdc.sharding.plan import preset

        for s in self.stages:
            base = getattr(s.plan, "preset", None) or s.plan
            try:
                preset(base, s.mesh, {})
            except PlanError as e:
                raise PlanError(f"stage '{s.name}': {e}") from None

    def check_batch(self, shapes: Sequence[tuple[int, ...]], what: str = "input") -> None:
        """Every micro-batch of the inputs of ``shapes`` gives every rank of every stage a piece of
        the same rows: the micro-batches divide dim 0, and each stage's preset splits a micro-batch's
        rows evenly over the axes it shards the batch over (``dp``, ``rep``); an empty or uneven
        piece is refused here, before anything compiles."""
        for i, shape in enumerate(shapes):
            if not shape or shape[0] % self.microbatches:
                raise PlanError(f"pipeline plan '{self.name}': {self.microbatches} micro-batches split every "
                                f"{what} along dim 0, but {what} #{i} has shape {tuple(shape)}")
        for s in self.stages:
            layouts = preset(getattr(s.plan, "preset", None) or s.plan, s.mesh, {}, [len(x) for x in shapes]).inputs
            for i, (shape, lay) in enumerate(zip(shapes, layouts)):
                axes = [a for a, pl in (lay.items() if isinstance(lay, Mapping) else ())
                        if getattr(pl, "dim", None) == 0 and type(pl).__name__ == "Shard"]
                pieces = 1
                for a in axes:
                    pieces *= s.mesh.axis_size(a)
                rows = shape[0] // self.microbatches
                if rows % pieces:
                    raise PlanError(f"pipeline plan '{self.name}': stage '{s.name}' ({s.mesh}, "
                                    f"{_plan_name(s.plan)}) splits the batch over {'×'.join(axes)} in {pieces} "
                                    f"pieces, but each of the {self.microbatches} micro-batches of {what} #{i} "
                                    f"(shape {tuple(shape)}) has {rows} row{'s' if rows != 1 else ''}; give a batch "
                                    f"that {self.microbatches * pieces} divides, or fewer micro-batches")

    def describe(self) -> str:
        return (f"{self.schedule}, {self.microbatches} micro-batches; "
                + (f"{self.virtual_stages} stages per device group; " if self.virtual_stages > 1 else "")
                + "; ".join(f"{s.name}: ranks {list(s.ranks)} {s.mesh} {getattr(s.plan, 'name', s.plan)}"
                            + (f" [{' '.join(s.modules)}]" if s.modules else "") for s in self.stages))


def split_pp_axis(mesh: Any, plan: Any, *, schedule: str | None = None,
                  microbatches: int | None = None, virtual_stages: int | None = None) -> tuple[Any, Any]:
    """What ``mesh`` and ``plan`` mean together: ``(None, PipelinePlan.from_mesh(...))`` when the mesh
    has a ``pp`` axis of size 2 or more; else ``(mesh, plan)`` as given (no ``pp`` axis, or one of
    size 1: one stage, the one-mesh plan; a size-1 axis is used by no layout, which is allowed)."""
    if mesh is None:
        return mesh, plan
    m = Mesh.of(mesh)
    if PP_AXIS not in m.axis_names or m.axis_size(PP_AXIS) < 2:
        return mesh, plan
    return None, PipelinePlan.from_mesh(m, plan, schedule=schedule, microbatches=microbatches,
                                        virtual_stages=virtual_stages)


def schedule_name(name: Any) -> str:
    """A schedule's canonical name: lower case, ``interleaved`` / ``Interleaved1F1B`` -> ``interleaved1f1b``."""
    low = str(name).lower()
    return SCHEDULE_ALIASES.get(low, low)


def _plan_name(plan: Any) -> str:
    return str(getattr(plan, "name", plan))


def _check_stage_plan(mesh: Mesh, plan: Any) -> None:
    """A plan the stages of a ``pp`` axis can each take: a preset, or a plan refining one."""
    from spmdc.sharding.plan import Plan

    if isinstance(plan, PipelinePlan):
        raise PlanError(f"mesh {mesh} has a '{PP_AXIS}' axis and plan '{plan.name}' has its own stages "
                        f"({len(plan.stages)} stages with their own meshes): the {PP_AXIS} axis would cut stages "
                        f"a second time; drop the '{PP_AXIS}' axis (and the mesh) or use a one-mesh preset")
    if isinstance(plan, HeteroPlan):
        raise PlanError(f"mesh {mesh}: a '{PP_AXIS}' axis with plan '{plan.name}' of device groups is not "
                        f"supported: the stages a {PP_AXIS} axis cuts each take a one-mesh preset (write a "
                        "pipeline plan file with 'stages' for stages that differ)")
    if isinstance(plan, Plan):
        if plan.preset is None:
            raise PlanError(f"mesh {mesh}: plan '{plan.name}' lays out parameters by name; the stages a "
                            f"'{PP_AXIS}' axis cuts take a preset or a plan refining one ('preset: fsdp+tp')")
        return
    if not isinstance(plan, str) or not plan:
        raise PlanError(f"mesh {mesh}: the stages a '{PP_AXIS}' axis cuts take a preset name (dp, fsdp, hsdp, "
                        f"megatron, fsdp+tp, ...) or a Plan refining one, got {plan!r}")


def stage_actions(schedule: str, n_stages: int, microbatches: int, stage: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s compute order: ``("F", mb)``, ``("B", mb)``; the last stage runs
    ``("FB", mb)`` (its backward follows its forward at once in either schedule)::

        stage_actions("1f1b", 2, 4, 0) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1),
                                           ("F", 3), ("B", 2), ("B", 3)]
    """
    m = microbatches
    if stage == n_stages - 1:
        return [("FB", i) for i in range(m)]
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"unknown pipeline schedule '{schedule}' ({', '.join(SCHEDULES)}; "
                         f"{INTERLEAVED}: interleaved_actions)")
    warmup = min(n_stages - stage - 1, m)
    out = [("F", i) for i in range(warmup)]
    f, b = warmup, 0
    while f < m:
        out.append(("F", f))
        f += 1
        out.append(("B", b))
        b += 1
    out += [("B", i) for i in range(b, m)]
    return out


def interleaved_actions(groups: int, virtual: int, microbatches: int, group: int) -> list[tuple[str, int, int]]:
    """Device group ``group``'s compute order under interleaved 1F1B: ``(kind, stage, mb)``, its
    stages ``group + c·groups`` for chunks ``c < virtual``; the last stage's forward is its
    ``("FB", stage, mb)`` (its backward follows at once)::

        interleaved_actions(2, 2, 4, 1)[:4] == [("F", 1, 0), ("F", 1, 1), ("FB", 3, 0), ("FB", 3, 1)]

    Derivation. Micro-batches go in rounds of ``P = groups``: the ``i``-th forward of a group runs
    chunk ``(i // P) % v`` on micro-batch ``(i // (P·v))·P + i % P`` (a round of ``P`` micro-batches
    through chunk 0, then the same round through chunk 1, ...), the ``i``-th backward the same
    with the chunks reversed (the last chunk first). Group ``k``'s first backward needs the
    first round through every chunk of every later group: it runs ``(v - 1)·P`` forwards for the
    chunks before its last, plus ``2·(P - 1 - k)`` while the round crosses the later groups and
    the gradient comes back (a forward and a backward per group), then alternates one forward
    and one backward, then drains. ``microbatches`` must be a multiple of ``groups``."""
    p, v, m = groups, virtual, microbatches
    if m % p:
        raise ValueError(f"interleaved 1F1B: {m} micro-batches is not a multiple of the {p} device groups")
    total = m * v

    def forward(i: int) -> tuple[int, int]:
        return (i // p) % v, (i // (p * v)) * p + i % p

    def backward(i: int) -> tuple[int, int]:
        chunk, mb = forward(i)
        return v - 1 - chunk, mb

    warmup = min((p - 1 - group) * 2 + (v - 1) * p, total)
    order = [("F", *forward(i)) for i in range(warmup)]
    for j in range(total - warmup):
        order += [("F", *forward(warmup + j)), ("B", *backward(j))]
    order += [("B", *backward(j)) for j in range(total - warmup, total)]
    last = p * v - 1
    out: list[tuple[str, int, int]] = []
    for kind, chunk, mb in order:
        stage = group + chunk * p
        if stage == last:   # (its forward and backward are one program; the backward is paired with it)
            if kind == "F":
                out.append(("FB", stage, mb))
            continue
        out.append((kind, stage, mb))
    return out


def in_flight(actions: Sequence[tuple[str, int]]) -> int:
    """The most micro-batches a stage holds between their forward and backward."""
    live, most = 0, 0
    for kind, _ in actions:
        if kind == "F":
            live += 1
            most = max(most, live)
        elif kind == "B":
            live -= 1
    return most


__all__ = ["DEFAULT_VIRTUAL_STAGES", "INTERLEAVED", "PP_AXIS", "SCHEDULES", "PipelinePlan", "StageSpec", "in_flight",
           "interleaved_actions", "schedule_name", "split_pp_axis", "stage_actions"]
