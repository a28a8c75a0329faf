"""Redistribution planner: the cheapest sequence of collectives between two layouts.

A Dijkstra search over layouts (one placement per mesh axis). Moves, each on one
mesh axis (``all_reduce`` may take several axes at once):

    S(d) -> R      comm.all_gather        P -> R      comm.all_reduce
    R -> S(d)      comm.all_slice (free)  P -> S(d)   comm.reduce_scatter
    S(i) -> S(j)   comm.all_to_all
    SS(d,k) -> R   comm.all_gather  (parts = k)    R -> SS(d,k)  comm.all_slice (parts = k)
    P -> SS(d,k)   comm.reduce_scatter (parts = k)
    RS(d,u) -> R   comm.all_gather {sizes = u}     R -> RS(d,u)  comm.all_slice {sizes = u}
    P -> RS(d,u)   comm.reduce_scatter {sizes = u}

A dim sharded by several axes is chunked by the first, then the next, so only the
last axis sharding a dim may gather or re-split it, and a new ``S(d)`` may only be
added on an axis after every axis already sharding ``d``. A strided dim is sharded by
its axis alone, and a move to ``SS(d, k)`` is only tried for a ``k`` the target holds. A step
with ``parts = k`` works on the dim seen as ``[k, size/k]`` (lower-redistribution makes that a
reshape around the collective). Costs come from
:mod:`spmdc.sharding.cost`; ties go to fewer steps, then to a fixed move order, so
the plan is deterministic.

    plan(shape=(13,), from=[S(0)], to=[R], mesh=(4,))  ->  [all_gather(axis 0, dim 0)]
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from spmdc.dialects.shard import Partial, Placement, RaggedShard, Replicate, Shard, StridedShard, shard_dim
from spmdc.sharding.cost import AxisCost

Layout = tuple[Placement, ...]


@dataclass(frozen=True)
class Step:
    kind: str                 # all_gather | all_slice | all_reduce | reduce_scatter | all_to_all
    axes: tuple[int, ...]     # mesh axis indices
    dim: int = -1             # gathered/sliced/scattered dim, or split_dim for all_to_all
    concat_dim: int = -1      # all_to_all only
    op: str = "sum"           # reduction kind
    after: Layout = ()        # layout once this step has run
    parts: int = 1            # > 1: the dim is k equal parts, each gathered/sliced/scattered (SS)
    sizes: tuple[int, ...] = ()   # explicit per-rank sizes along dim (RS); () = torch.chunk's


def _last_sharder(layout: Layout, dim: int) -> int:
    """The last axis sharding ``dim`` (``S`` or a ragged ``RS``, which later ``S`` may chunk
    again piece by piece); -1 if none."""
    idx = -1
    for a, p in enumerate(layout):
        if isinstance(p, (Shard, RaggedShard)) and p.dim == dim:
            idx = a
    return idx


def _moves(layout: Layout, rank: int,
           targets: frozenset[tuple[int, Placement]] = frozenset()) -> list[tuple[Step, Layout]]:
    out: list[tuple[Step, Layout]] = []
    strided_dims = {p.dim for p in layout if isinstance(p, StridedShard)}
    sharded_dims = {shard_dim(p) for p in layout} - {None}

    def with_(a: int, p: Placement, lay: Layout = layout) -> Layout:
        return lay[:a] + (p,) + lay[a + 1:]

    def new_dims(a: int) -> list[int]:   # dims a new S(d) may take on axis a
        return [d for d in range(rank) if d not in strided_dims and _last_sharder(layout, d) < a]

    # SS/RS placements the target holds (an RS only on its own axis: its units are per rank there)
    new_strided = sorted({(None if isinstance(t, StridedShard) else ax, t) for ax, t in targets
                          if t.dim < rank and t.dim not in sharded_dims}, key=str)  # type: ignore[attr-defined]
    for a, p in enumerate(layout):
        if isinstance(p, Shard):
            if _last_sharder(layout, p.dim) == a:
                nl = with_(a, Replicate())
                out.append((Step("all_gather", (a,), p.dim, after=nl), nl))
                for d in new_dims(a):
                    if d != p.dim:
                        nl = with_(a, Shard(d))
                        out.append((Step("all_to_all", (a,), p.dim, d, after=nl), nl))
        elif isinstance(p, StridedShard):
            nl = with_(a, Replicate())
            out.append((Step("all_gather", (a,), p.dim, after=nl, parts=p.parts), nl))
        elif isinstance(p, RaggedShard):
            if _last_sharder(layout, p.dim) == a:   # not while a later axis chunks its pieces
                nl = with_(a, Replicate())
                out.append((Step("all_gather", (a,), p.dim, after=nl, sizes=p.units), nl))
        elif isinstance(p, Replicate):
            for d in new_dims(a):
                nl = with_(a, Shard(d))
                out.append((Step("all_slice", (a,), d, after=nl), nl))
            for ax, t in new_strided:
                if ax in (None, a):
                    nl = with_(a, t)
                    out.append((Step("all_slice", (a,), t.dim, after=nl, **_extent(t)), nl))
        elif isinstance(p, Partial):
            nl = with_(a, Replicate())
            out.append((Step("all_reduce", (a,), op=p.op, after=nl), nl))
            for d in new_dims(a):
                nl = with_(a, Shard(d))
                out.append((Step("reduce_scatter", (a,), d, op=p.op, after=nl), nl))
            for ax, t in new_strided:
                if ax in (None, a):
                    nl = with_(a, t)
                    out.append((Step("reduce_scatter", (a,), t.dim, op=p.op, after=nl, **_extent(t)), nl))
    partial_axes = [a for a, p in enumerate(layout) if isinstance(p, Partial)]
    for k in range(2, len(partial_axes) + 1):
        for group in combinations(partial_axes, k):
            kinds = {layout[a].op for a in group}  # type: ignore[attr-defined]
            if len(kinds) == 1:
                nl = layout
                for a in group:
                    nl = with_(a, Replicate(), nl)
                out.append((Step("all_reduce", tuple(group), op=kinds.pop(), after=nl), nl))
    return out


def _extent(p: Placement) -> dict:
    return {"parts": p.parts} if isinstance(p, StridedShard) else {"sizes": p.units}  # type: ignore[attr-defined]


def _step_cost(step: Step, layout: Layout, nbytes: float, mesh_shape: Sequence[int],
               costs: Sequence[AxisCost]) -> float:
    # bytes of the tensor as seen by one process group: divide by the other axes' sharding
    b = nbytes
    for k, p in enumerate(layout):
        if k not in step.axes and shard_dim(p) is not None:
            b /= mesh_shape[k]
    n = 1
    for a in step.axes:
        n *= mesh_shape[a]
    c = costs[step.axes[0]]
    if step.kind == "all_slice":
        return 0.0
    if step.kind == "all_gather":
        return c.all_gather(b, n)
    if step.kind == "reduce_scatter":
        return c.reduce_scatter(b, n)
    if step.kind == "all_reduce":
        # the runtime reduces over one axis after the other (one process group per mesh axis)
        return sum(costs[a].all_reduce(b, mesh_shape[a]) for a in step.axes)
    return c.all_to_all(b, n)


def redistribution_cost(src: Layout, dst: Layout, rank: int, nbytes: float, mesh_shape: Sequence[int],
                        costs: Sequence[AxisCost] | None = None) -> float:
    """α-β cost (µs) of :func:`plan_redistribution`'s cheapest steps from ``src`` to ``dst``."""
    costs = costs or [AxisCost() for _ in mesh_shape]
    total, lay = 0.0, tuple(src)
    for step in plan_redistribution(src, dst, rank, nbytes, mesh_shape, costs):
        total += _step_cost(step, lay, nbytes, mesh_shape, costs)
        lay = step.after
    return total


def moved_bytes(src: Layout, dst: Layout, rank: int, nbytes: float, mesh_shape: Sequence[int]) -> float:
    """Bytes each rank sends along :func:`plan_redistribution`'s steps from ``src`` to ``dst``
    (ring algorithms: ``B(n-1)/n`` for all_gather and reduce_scatter, twice that for all_reduce,
    ``B(n-1)/n²`` for all_to_all, nothing for all_slice; ``B`` as in the cost model)."""
    total, lay = 0.0, tuple(src)
    for step in plan_redistribution(src, dst, rank, nbytes, mesh_shape):
        b = nbytes
        for k, p in enumerate(lay):
            if k not in step.axes and shard_dim(p) is not None:
                b /= mesh_shape[k]
        for a in step.axes:
            n = mesh_shape[a]
            share = {"all_slice": 0.0, "all_reduce": 2 * (n - 1) / n, "all_to_all": (n - 1) / (n * n)}
            total += b * share.get(step.kind, (n - 1) / n)
        lay = step.after
    return total


def plan_redistribution(src: Layout, dst: Layout, rank: int, nbytes: float, mesh_shape: Sequence[int],
                        costs: Sequence[AxisCost] | None = None, whole_within: Sequence[int] = ()) -> list[Step]:
    """Cheapest list of steps turning ``src`` into ``dst``; raises ValueError if none exists.

    ``whole_within``: mesh axes whose steps must leave no ``Partial`` on the other axes (a device-group
    job's ``grp`` axis: a move across groups takes values that are whole within each group,
    :mod:`spmdc.passes.cross_group`); ``[P(sum), P(sum)] → [S(0), S(0)]`` on ``["grp", "dp"]`` then
    reduces within the groups first instead of reduce-scattering across them with ``dp`` still partial::

        plan_redistribution((P, P), (S0, S0), 2, 256, (2, 4), whole_within=(0,))
        # all_reduce over dp → [P(sum), R]; reduce_scatter over grp → [S(0), R]; all_slice dp
    """
    src, dst = tuple(src), tuple(dst)
    if src == dst:
        return []
    costs = costs or [AxisCost() for _ in mesh_shape]
    targets = frozenset((a, p) for a, p in enumerate(dst) if isinstance(p, (StridedShard, RaggedShard)))
    counter = 0
    heap: list[tuple[float, int, int, Layout, list[Step]]] = [(0.0, 0, 0, src, [])]
    best: dict[Layout, tuple[float, int]] = {src: (0.0, 0)}
    while heap:
        cost, nsteps, _, lay, steps = heapq.heappop(heap)
        if lay == dst:
            return steps
        if best.get(lay, (float("inf"), 0)) < (cost, nsteps):
            continue
        for step, nl in _moves(lay, rank, targets):
            if whole_within and set(step.axes) & set(whole_within) and any(
                    isinstance(p, Partial) for a, p in enumerate(nl) if a not in whole_within):
                continue
            nc = cost + _step_cost(step, lay, nbytes, mesh_shape, costs)
            key = (nc, nsteps + 1)
            if key < best.get(nl, (float("inf"), 1 << 30)):
                best[nl] = key
                counter += 1
                heapq.heappush(heap, (nc, nsteps + 1, counter, nl, steps + [step]))
    why = ""
    if any(isinstance(p, Partial) for p in dst) and src != dst:
        why = (" (no collective creates a pending reduction or changes its kind: a Partial target must come "
               "from its producer)")
    raise ValueError(f"no redistribution from [{', '.join(map(str, src))}] to [{', '.join(map(str, dst))}]{why}")
