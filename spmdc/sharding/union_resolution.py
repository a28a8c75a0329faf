"""Choosing how to move a value between two union layouts (Hetu v2's three cases), by cost.

    r = resolve((12, 6), src, dst, meshes)      # Resolution(kind="split-all-reduce", cost_us=..., ...)

* ``per-group``: both layouts relate the same groups the same way (``split`` with the same ratios,
  ``dup``, or one plain mesh): each group redistributes its own piece with its ordinary
  collectives (:func:`~spmdc.sharding.planner.plan_redistribution`); the groups run in parallel,
  so the cost is the slowest group's.
* ``split-all-reduce``: a cross-group ``partial(sum)`` to ``dup`` over the same groups and the
  same per-group layouts: each finest slice all-reduced over its holders
  (:mod:`spmdc.runtime.split_collectives`); cost: the busiest rank's sum over its all-reduces.
* ``bsr``: anything else, and always a candidate: batched send/recv from the slice table
  (:mod:`spmdc.runtime.bsr`), Partial sources included; cost: the busiest rank's messages
  (α each) and the bytes it sends and receives (β).

The cheapest applicable candidate wins; ``Resolution.candidates`` lists every applicable one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spmdc.dialects.shard import CrossPartial, Dup, Partial, ShardingAttr, Split
from spmdc.dialects.shard.union import UnionShardingAttr
from spmdc.sharding.cost import BASE_US, AxisCost
from spmdc.sharding.planner import redistribution_cost
from spmdc.sharding.slices import MeshSpec, box_numel, bsr_plan, pieces, split_all_reduce_plan


@dataclass
class Resolution:
    kind: str
    cost_us: float
    detail: str
    candidates: dict[str, float] = field(default_factory=dict)


def resolve(shape: Any, src: Any, dst: Any, meshes: dict[str, MeshSpec], itemsize: int = 4,
            cost: AxisCost | None = None) -> Resolution:
    """The cheapest way from ``src`` to ``dst`` (see the module doc)."""
    shape = tuple(int(s) for s in shape)
    cost = cost or AxisCost()
    found: dict[str, tuple[float, str]] = {}
    per_group = _per_group(shape, src, dst, meshes, itemsize, cost)
    if per_group is not None:
        found["per-group"] = per_group
    if _is_split_all_reduce(src, dst):
        plan = split_all_reduce_plan(shape, src, meshes)
        busy: dict[int, float] = {}
        for ranks, cells in plan.reductions.items():
            t = cost.all_reduce(sum(box_numel(c) for c in cells) * itemsize, len(ranks))
            for r in ranks:
                busy[r] = busy.get(r, 0.0) + t
        found["split-all-reduce"] = (max(busy.values(), default=0.0),
                                     f"{plan.collectives} all-reduces over subgroups")
    try:
        plan = bsr_plan(shape, src, dst, meshes)
    except (ValueError, NotImplementedError):
        plan = None
    if plan is not None:
        per_rank: dict[int, float] = {}
        for (s, d), cells in plan.sends.items():
            if s == d:
                continue
            t = BASE_US + cost.latency_us + sum(box_numel(c) for c, _, _ in cells) * itemsize / 1e9 \
                / cost.bandwidth_gbps * 1e6
            per_rank[s] = per_rank.get(s, 0.0) + t
            per_rank[d] = per_rank.get(d, 0.0) + t
        found["bsr"] = (max(per_rank.values(), default=0.0), f"{plan.messages} messages")
    if not found:
        raise ValueError(f"no way to move a {list(shape)} value from {src} to {dst}")
    kind = min(found, key=lambda k: (found[k][0], list(found).index(k)))
    return Resolution(kind, found[kind][0], found[kind][1], {k: v[0] for k, v in found.items()})


def _members(layout: Any) -> tuple[Any, tuple[ShardingAttr, ...]]:
    if isinstance(layout, UnionShardingAttr):
        return layout.relation, layout.members
    return Dup(), (layout,)


def _per_group(shape: tuple[int, ...], src: Any, dst: Any, meshes: dict[str, MeshSpec], itemsize: int,
               cost: AxisCost) -> tuple[float, str] | None:
    rel_s, ms = _members(src)
    rel_d, md = _members(dst)
    if rel_s != rel_d or [m.mesh for m in ms] != [m.mesh for m in md] or isinstance(rel_s, CrossPartial):
        return None
    shapes = [shape] * len(ms)
    if isinstance(rel_s, Split):
        d = rel_s.dim
        shapes = [shape[:d] + (s,) + shape[d + 1:] for s in rel_s.sizes(shape[d])]
    slowest = 0.0
    for a, b, part in zip(ms, md, shapes):
        mesh = meshes[a.mesh]
        nbytes = itemsize
        for n in part:
            nbytes *= n
        try:
            slowest = max(slowest, redistribution_cost(a.placements, b.placements, len(part), nbytes, mesh.shape,
                                                       [cost] * len(mesh.shape)))
        except ValueError:
            return None
    return slowest, f"each of {len(ms)} group(s) redistributes its own piece"


def _is_split_all_reduce(src: Any, dst: Any) -> bool:
    if not (isinstance(src, UnionShardingAttr) and isinstance(dst, UnionShardingAttr)):
        return False
    if src.relation != CrossPartial("sum") or not isinstance(dst.relation, Dup):
        return False
    return src.members == dst.members and not any(isinstance(p, Partial) for m in src.members for p in m.placements)


__all__ = ["Resolution", "pieces", "resolve"]
