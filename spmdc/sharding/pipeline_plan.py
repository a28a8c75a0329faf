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

:func:`stage_actions` gives one stage's compute order; :mod:`spmdc.passes.pipeline_schedule` turns it
into each rank's program with its sends and receives.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spmdc.sharding.device_groups import HeteroPlan
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Places, PlanError, check_keys

SCHEDULES = ("gpipe", "1f1b")
PLAN_KEYS = ("stages", "name", "schedule", "microbatches", "batch")
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

    @property
    def world(self) -> int:
        return sum(len(s.ranks) for s in self.stages)

    def stage_of(self, rank: int) -> int:
        for i, s in enumerate(self.stages):
            if rank in s.ranks:
                return i
        raise ValueError(f"rank {rank} is in no stage of pipeline plan '{self.name}'")

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
        schedule = str(d.get("schedule", "1f1b")).lower()
        if schedule not in SCHEDULES:
            near = difflib.get_close_matches(schedule, SCHEDULES, n=1)
            raise PlanError(f"pipeline plan: unknown schedule '{schedule}' (schedules: {', '.join(SCHEDULES)})"
                            + (f"; did you mean '{near[0]}'?" if near else ""))
        mb = d.get("microbatches", len(raw))
        if not isinstance(mb, int) or isinstance(mb, bool) or mb < 1:
            raise PlanError(f"pipeline plan: 'microbatches' must be a positive integer, got {mb!r}")
        batch = d.get("batch")
        if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
            raise PlanError(f"pipeline plan: 'batch' must be a positive integer, got {batch!r}")
        stages = [StageSpec(g.name, m, g.ranks, g.mesh, g.plan) for g, m in zip(h.groups, modules)]
        return PipelinePlan(stages, str(d.get("name", "pipeline")), schedule, mb, batch)

    def with_schedule(self, schedule: str | None = None, microbatches: int | None = None) -> PipelinePlan:
        """This plan with the schedule or micro-batch count replaced (``--pp-schedule``, ``--microbatches``)."""
        d = {"stages": [], "name": self.name, "schedule": schedule or self.schedule,
             "microbatches": microbatches if microbatches is not None else self.microbatches}
        out = PipelinePlan(list(self.stages), self.name, self.schedule, self.microbatches, self.batch)
        if d["schedule"] not in SCHEDULES:
            near = difflib.get_close_matches(str(d["schedule"]), SCHEDULES, n=1)
            raise PlanError(f"unknown pipeline schedule '{d['schedule']}' (schedules: {', '.join(SCHEDULES)})"
                            + (f"; did you mean '{near[0]}'?" if near else ""))
        mb = d["microbatches"]
        if not isinstance(mb, int) or isinstance(mb, bool) or mb < 1:
            raise PlanError(f"microbatches must be a positive integer, got {mb!r}")
        out.schedule, out.microbatches = str(d["schedule"]), int(mb)
        return out

    def check_presets(self) -> None:
        from spmdc.sharding.plan import preset

        for s in self.stages:
            base = getattr(s.plan, "preset", None) or s.plan
            try:
                preset(base, s.mesh, {})
            except PlanError as e:
                raise PlanError(f"stage '{s.name}': {e}") from None

    def describe(self) -> str:
        return (f"{self.schedule}, {self.microbatches} micro-batches; "
                + "; ".join(f"{s.name}: ranks {list(s.ranks)} {s.mesh} {getattr(s.plan, 'name', s.plan)}"
                            + (f" [{' '.join(s.modules)}]" if s.modules else "") for s in self.stages))


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
        raise ValueError(f"unknown pipeline schedule '{schedule}' ({', '.join(SCHEDULES)})")
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


__all__ = ["SCHEDULES", "PipelinePlan", "StageSpec", "in_flight", "stage_actions"]
