"""Heterogeneous plans (Hetu v2's HSPMD): device groups, each with its own mesh and plan.

    plan = HeteroPlan.from_dict({
        "name": "hetero-dp",
        "groups": [
            {"ranks": [0, 1, 2, 3], "mesh": "tp=4", "plan": "megatron", "share": 2},
            {"ranks": [4, 5],       "mesh": "tp=2", "plan": "megatron", "share": 1},
        ]})

Heterogeneous data parallelism: every group holds the whole model (laid out by its own plan on
its own mesh: ``dup`` across the groups) and takes a share of the batch (inputs split along dim 0
in the ratios of ``share``: ``#shard.union<split(0, [2, 1]), ...>``); gradients come out as
cross-group partial sums and are reduced by split all-reduce (:mod:`spmdc.dialects.comm.split`).

How it compiles: group ``g``'s program is the ordinary single-device program laid out on a
*virtual* mesh ``["grp" = G, <group axes>]`` whose first axis stands for the groups. A union
layout is, seen from one group, a plain layout on that mesh: ``split(d, ratios)`` is
``RS(d, sizes)`` on ``grp``, ``dup`` is ``R``, ``partial(op)`` is ``P(op)``. Sharding propagation
runs per group with the ordinary rules, so the relation is carried through every op (a batch split
stays split; a contraction over it gives ``P`` on ``grp``), and the only moves on ``grp`` left after
lowering are cross-group reductions, which :mod:`spmdc.passes.cross_group` turns into
``comm.split_all_reduce`` over the groups' real ranks. Each rank runs its group's program at its
coordinate on the virtual mesh (``grp`` = its group).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spmdc.dialects.shard import RaggedShard, Replicate
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Places, Plan, PlanError, check_keys

GROUP_AXIS = "grp"
GROUP_KEYS = ("ranks", "mesh", "plan", "share", "name")


@dataclass(frozen=True)
class Group:
    """One device group: its job ranks (row-major over ``mesh``), its own plan, its batch share."""

    name: str
    ranks: tuple[int, ...]
    mesh: Mesh
    plan: Any            # a preset name or a Plan refining one
    share: int = 1


@dataclass
class HeteroPlan:
    """Device groups with their own meshes and plans, the batch split across them by ``share``."""

    groups: list[Group]
    name: str = "hetero"
    batch: int | None = None   # the global batch the plan is written for (``spmdc run`` builds the workload so)

    @property
    def world(self) -> int:
        return sum(len(g.ranks) for g in self.groups)

    def group_of(self, rank: int) -> int:
        for i, g in enumerate(self.groups):
            if rank in g.ranks:
                return i
        raise ValueError(f"rank {rank} is in no group of plan '{self.name}' (groups: "
                         + ", ".join(f"{g.name} {list(g.ranks)}" for g in self.groups) + ")")

    def virtual_mesh(self, g: int) -> Mesh:
        """Group ``g``'s program mesh: ``grp`` first, then the group's own axes."""
        return Mesh([(GROUP_AXIS, len(self.groups)), *self.groups[g].mesh.axes])

    def virtual_rank(self, g: int, rank: int) -> int:
        """The job rank's index on group ``g``'s virtual mesh (row-major, ``grp`` = g)."""
        return g * self.groups[g].mesh.size + self.groups[g].ranks.index(rank)

    def split_sizes(self, size: int, what: str) -> tuple[int, ...]:
        """Each group's rows of a batch dim of ``size``, in the ratios of the shares (exactly)."""
        shares = [g.share for g in self.groups]
        total = sum(shares)
        if size % total:
            raise PlanError(f"plan '{self.name}': {what} has {size} rows, which do not split "
                            f"{':'.join(map(str, shares))} across the groups (the shares' sum {total} must divide "
                            f"the batch; set 'batch' in the plan or pass --batch)")
        return tuple(size // total * s for s in shares)

    def for_group(self, g: int) -> GroupPlan:
        return GroupPlan(self, g)

    # -- files -------------------------------------------------------------------------------
    @staticmethod
    def is_hetero(d: Any) -> bool:
        return isinstance(d, Mapping) and "groups" in d

    @staticmethod
    def from_dict(d: Mapping[str, Any], places: Places | None = None, list_key: str = "groups") -> HeteroPlan:
        """Device groups from a plan mapping; every key is checked (the plan's, each group's, a
        group plan's), an unknown one refused with its place (see :class:`~spmdc.sharding.plan.Places`).
        ``list_key``: where the groups were written (``stages`` for a pipeline plan's)."""
        places = places or Places()
        check_keys(d, ("groups", "name", "batch"), places, (), "a heterogeneous plan")
        raw = d.get("groups")
        if not isinstance(raw, list) or len(raw) < 2:
            raise PlanError("heterogeneous plan: 'groups' must list at least two device groups "
                            "(one group is an ordinary plan)")
        groups = []
        seen: dict[int, str] = {}
        for i, gd in enumerate(raw):
            where = f"heterogeneous plan: group #{i}"
            if not isinstance(gd, Mapping):
                raise PlanError(f"{where}: expected a mapping with {', '.join(GROUP_KEYS[:4])}")
            check_keys(gd, GROUP_KEYS, places, (list_key, i), f"group #{i} of a heterogeneous plan")
            name = str(gd.get("name", f"g{i}"))
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name == "mesh":
                raise PlanError(f"{where}: name '{name}' must be an identifier other than 'mesh' (it names the "
                                "group's mesh in the IR: @name)")
            ranks = gd.get("ranks")
            if not isinstance(ranks, list) or not ranks or not all(isinstance(r, int) and r >= 0 for r in ranks):
                raise PlanError(f"{where} ({name}): 'ranks' must be a non-empty list of job ranks, got {ranks!r}")
            for r in ranks:
                if r in seen:
                    raise PlanError(f"{where} ({name}): rank {r} is also in group '{seen[r]}'; groups must be "
                                    "disjoint")
                seen[r] = name
            try:
                mesh = Mesh.of(gd.get("mesh") or {"dp": len(ranks)})
            except (ValueError, TypeError) as e:
                raise PlanError(f"{where} ({name}): mesh: {e}") from None
            if GROUP_AXIS in mesh.axis_names:
                raise PlanError(f"{where} ({name}): mesh axis '{GROUP_AXIS}' is reserved for the groups themselves")
            if mesh.size != len(ranks):
                raise PlanError(f"{where} ({name}): mesh {mesh} has {mesh.size} devices but the group has "
                                f"{len(ranks)} ranks")
            plan = gd.get("plan", "dp" if mesh.axis_names == ("dp",) else None)
            if isinstance(plan, Mapping):
                plan = Plan.from_dict(plan, places.at(list_key, i, "plan"))
                if plan.preset is None:
                    raise PlanError(f"{where} ({name}): a group's plan is a preset or refines one ('preset: ...'); "
                                    "per-parameter layouts inside groups are not supported yet")
            elif not isinstance(plan, str):
                raise PlanError(f"{where} ({name}): 'plan' must name a preset (dp, fsdp, megatron, ...), got {plan!r}")
            share = gd.get("share", 1)
            if not isinstance(share, int) or isinstance(share, bool) or share < 1:
                raise PlanError(f"{where} ({name}): 'share' must be a positive integer (its part of the batch), "
                                f"got {share!r}")
            groups.append(Group(name, tuple(ranks), mesh, plan, share))
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise PlanError(f"heterogeneous plan: group name '{next(n for n in names if names.count(n) > 1)}' "
                            "is used twice")
        every = sorted(seen)
        if every != list(range(len(every))):
            missing = sorted(set(range(max(every) + 1)) - set(every))
            raise PlanError(f"heterogeneous plan: the groups must cover ranks 0..{len(every) - 1} exactly; "
                            f"rank {missing[0]} is in no group")
        batch = d.get("batch")
        if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
            raise PlanError(f"heterogeneous plan: 'batch' must be a positive integer, got {batch!r}")
        return HeteroPlan(groups, str(d.get("name", "hetero")), batch)

    def check_presets(self) -> None:
        """Each group's preset exists and fits its mesh (before any rank starts)."""
        from spmdc.sharding.plan import preset

        for g in self.groups:
            base = g.plan.preset if isinstance(g.plan, Plan) else g.plan
            try:
                preset(base, g.mesh, {})
            except PlanError as e:
                raise PlanError(f"group '{g.name}': {e}") from None

    def describe(self) -> str:
        return "; ".join(f"{g.name}: ranks {g.ranks[0]}-{g.ranks[-1]} {g.mesh} {getattr(g.plan, 'name', g.plan)} "
                         f"share {g.share}" for g in self.groups)


@dataclass
class GroupPlan:
    """Group ``index``'s plan on its virtual mesh: its preset (replicated on ``grp``), every
    batched input ``RS(0, sizes)`` on ``grp`` (its share of the batch)."""

    hetero: HeteroPlan
    index: int

    @property
    def name(self) -> str:
        g = self.hetero.groups[self.index]
        return f"{self.hetero.name}[{g.name}: {getattr(g.plan, 'name', g.plan)}]"

    @property
    def base(self) -> Any:
        return self.hetero.groups[self.index].plan

    def extend(self, resolved: Plan, input_shapes: Sequence[tuple[int, ...]], names: Sequence[str]) -> Plan:
        """``resolved`` (the group's preset on the virtual mesh) with the batch split across groups.
        A placement on one of the group's own axes of size 1 (``fsdp`` on ``dp=1``) is ``R``: it
        cuts nothing, and as ``S`` it would make the group's program differ from the other groups'
        (a batch ``[RS(0), S(0)]`` on ``dp=1`` is gathered where ``[RS(0), R]`` is not)."""
        unit = {a for a, n in self.hetero.groups[self.index].mesh.axes if n == 1}
        inputs = []
        for i, shape in enumerate(input_shapes):
            spec = resolved.inputs[i] if i < len(resolved.inputs) else {}
            if not isinstance(spec, Mapping):
                raise PlanError(f"group plan '{self.name}': input layouts must be per axis")
            spec = _unit_replicated(spec, unit)
            if len(shape) >= 1:
                what = f"input #{i}" + (f" ({names[i]})" if i < len(names) else "")
                spec[GROUP_AXIS] = RaggedShard(0, self.hetero.split_sizes(shape[0], what))
            else:
                spec[GROUP_AXIS] = Replicate()
            inputs.append(spec)
        params = {k: _unit_replicated(v, unit) for k, v in resolved.params.items()}
        return dataclasses.replace(resolved, params=params, inputs=inputs, outputs=[], name=self.name)


def _unit_replicated(spec: Any, unit: set[str]) -> Any:
    """A per-axis layout (``{axis: placement}``, or a ParamLayout of two) with ``R`` on the axes
    ``unit`` (size 1); any other form as it is.

        >>> _unit_replicated({"dp": Shard(0), "tp": Shard(1)}, {"dp"})
        {'dp': Replicate(), 'tp': Shard(1)}
    """
    from spmdc.sharding.plan import ParamLayout

    if isinstance(spec, ParamLayout):
        return ParamLayout(_unit_replicated(spec.storage, unit), _unit_replicated(spec.compute, unit))
    if isinstance(spec, Mapping):
        return {a: Replicate() if a in unit else p for a, p in spec.items()}
    return spec

