"""Choosing how an op runs on each mesh axis, from its factor rule and a cost model.

On one mesh axis an op runs in one *strategy*: one factor of its rule sharded
over the axis (operands and results then carry ``S(dim)`` where the factor appears,
``P(kind)`` for a sharded reduction factor), every value replicated, or a Partial
pass-through allowed by the rule's linearity. The cheapest strategy wins: the sum,
over values whose layout is already known, of the cost of redistributing them to
what the strategy needs; ties go to fewer redistributions, then to declaration order
(replicated first). Sharding propagation and redistribution insertion both call
:func:`choose`, so they agree by construction.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spmdc.dialects.attrs import GROUP_INDEX_ATTR
from spmdc.dialects.shard import Partial, Placement, RaggedShard, Replicate, StridedShard, shard_dim, strided
from spmdc.dialects.shard.rules import OpShardingRule, replicated_rule
from spmdc.ir.core import Operation
from spmdc.ir.types import TensorType
from spmdc.sharding.cost import INF, AxisCost, placement_change_cost

Layout = tuple[Placement, ...]  # one placement per mesh axis


def rule_for(op: Operation) -> OpShardingRule:
    """The rule ``op`` declares beside its class (``op.sharding_rule()``); ops that declare
    none (collectives, calls, regions) run replicated — always correct, never fast."""
    declared = getattr(op, "sharding_rule", None)
    if declared is not None:
        return declared()
    return replicated_rule([v.type for v in op.operands], [r.type for r in op.results])


@dataclass(frozen=True)
class AxisStrategy:
    operands: tuple[Placement, ...]
    results: tuple[Placement, ...]
    label: str
    factor: int | None = None
    parts: int = 1   # > 1: the factor is sharded strided (every dim mapped to it SS(dim, parts))
    units: tuple[int, ...] = ()   # the factor is sharded ragged (every dim mapped to it RS(dim, units))


Hint = tuple[int, Placement]   # (factor, the SS / RS placement some value holds on a dim of it)


def strided_hints(rule: OpShardingRule, axis: int, layouts: Sequence[Layout | None],
                  is_result: bool) -> set[Hint]:
    """``(factor, placement)`` for each ``SS``/``RS`` the given layouts hold on ``axis`` on a
    dim mapped (not viewed) to a factor: the op may run with that factor sharded that way."""
    out = set()
    groups = rule.results if is_result else rule.operands
    for j, (dims, lay) in enumerate(zip(groups, layouts)):
        p = lay[axis] if lay is not None and axis < len(lay) else None
        if isinstance(p, (StridedShard, RaggedShard)) and p.dim < len(dims) and dims[p.dim] is not None:
            k = rule.scale_of(is_result, j, p.dim)
            if isinstance(p, RaggedShard) and k > 1:   # units of the factor, not of this (merged) dim
                if any(u % k for u in p.units):
                    continue
                p = RaggedShard(p.dim, tuple(u // k for u in p.units))
            out.add((dims[p.dim], p))
    return out


def axis_strategies(rule: OpShardingRule, axis_size: int, hints: set[Hint] | frozenset[Hint] = frozenset(),
                    small: bool = False, piece_sizes: dict[int, int] | None = None) -> list[AxisStrategy]:
    """The strategies of ``rule`` on one mesh axis of ``axis_size``: replicated, each factor
    sharded (dims viewed strided get ``SS``), each hinted ``(factor, parts)`` sharded strided
    (``SS`` wherever the factor appears), and the Partial pass-throughs. Factors smaller than
    the axis (some ranks would hold nothing) are left out unless ``small``; ``piece_sizes``: the
    size of the ragged piece an earlier axis left of a factor (its size here)."""
    n_in, n_out = len(rule.operands), len(rule.results)
    R = Replicate()
    out = [AxisStrategy((R,) * n_in, (R,) * n_out, "replicate")]
    if axis_size == 1:
        return out
    viewed = {f for _, _, _, f, _ in rule.views}
    candidates: list[tuple[int, Placement | None]] = [(f, None) for f in range(rule.num_factors)]
    candidates += sorted(hints, key=lambda h: (h[0], str(h[1])))
    for f, how in candidates:
        size = rule.factor_sizes[f] if not piece_sizes or f not in piece_sizes else piece_sizes[f]
        parts = how.parts if isinstance(how, StridedShard) else 1
        units = how.units if isinstance(how, RaggedShard) else ()
        if how is not None and f in viewed:
            continue
        if parts > 1 and size % parts:
            continue
        if units and (len(units) != axis_size or sum(units) != size):
            continue
        if f in rule.blocked or (size < axis_size * parts and not small and not units) or \
                (f in rule.even_only and size % (axis_size * parts) and not units):
            continue
        kind = rule.reduction_kind(f)
        if kind == "avg" and (size % axis_size or units):
            continue   # averaging the pieces' means is the mean only for equal pieces

        def placement(dims: tuple[int | None, ...], is_result: bool, j: int) -> Placement | None:
            if f in dims:
                if units:   # a merged dim holds scale rows per unit of the factor
                    d = dims.index(f)
                    k = rule.scale_of(is_result, j, d)
                    return RaggedShard(d, tuple(u * k for u in units))
                return strided(dims.index(f), parts)
            view = rule.view_of(is_result, j, f)
            return StridedShard(*view) if view is not None else None

        ins = tuple(placement(dims, False, j)
                    or (Partial(kind) if kind is not None and j in rule.reduce_partial_operands else R)
                    for j, dims in enumerate(rule.operands))
        outs = []
        for j, dims in enumerate(rule.results):
            got = placement(dims, True, j)
            outs.append(got if got is not None else Partial(kind) if kind is not None else R)
        label = f"factor {f}" + (f" strided {parts}" if parts > 1 else f" ragged {list(units)}" if units else "")
        out.append(AxisStrategy(ins, tuple(outs), label, f, parts, units))
    for kind in sorted(rule.partial_results):
        out.append(AxisStrategy((R,) * n_in, (Partial(kind),) * n_out, f"partial {kind} result"))
    for kind in sorted(rule.partial_kinds):
        P = Partial(kind)
        if rule.partial_all and n_in:
            out.append(AxisStrategy((P,) * n_in, (P,) * n_out, f"partial-all {kind}"))
        for i in rule.partial_one:
            ins = tuple(P if j == i else R for j in range(n_in))
            out.append(AxisStrategy(ins, (P,) * n_out, f"partial {kind} via #{i}"))
        if rule.partial_group:
            ins = tuple(P if j in rule.partial_group else R for j in range(n_in))
            out.append(AxisStrategy(ins, (P,) * n_out, f"partial {kind} via {list(rule.partial_group)}"))
    return out


def _bytes_on_axis(ty: object, layout: Layout | None, axis: int, mesh_shape: Sequence[int]) -> float:
    if not isinstance(ty, TensorType):
        return 0.0
    b = float(ty.num_bytes)
    if layout is not None:
        for k, p in enumerate(layout):
            if k != axis and shard_dim(p) is not None:
                b /= mesh_shape[k]
    return b


PINNED_PENALTY = 1e9
FANOUT_FACTOR = 1.5


def is_pinned(v: object) -> bool:
    """Values made by ``shard.annotate`` keep their layout unless no strategy can use it."""
    op = v.defining_op() if hasattr(v, "defining_op") else None
    return op is not None and op.name == "shard.annotate"


@dataclass(frozen=True)
class Choice:
    operands: tuple[Layout, ...]
    results: tuple[Layout, ...]
    cost: float
    changes: int = 0  # known values that must be redistributed
    ambiguous: bool = False  # several free strategies disagree on the unknown values

    @property
    def is_free(self) -> bool:
        return self.cost == 0 and self.changes == 0


def choose(op: Operation, rule: OpShardingRule, mesh_shape: Sequence[int],
           operand_layouts: Sequence[Layout | None], result_layouts: Sequence[Layout | None],
           costs: Sequence[AxisCost] | None = None, exact_results: bool = False,
           partial_ok: Callable[[object, Placement], bool] | None = None,
           ragged: Sequence[tuple[int, tuple[int, ...], int]] = ()) -> Choice:
    """Best layouts for ``op``'s operands and results given what is known.

    ``None`` entries are unknown and cost nothing. With ``exact_results`` the known
    result layouts are requirements (strategies producing anything else are skipped).
    ``ragged``: ``(axis, units, coord)`` splits the program's arguments hold (a batch split
    unevenly across device groups): every factor of size ``sum(units)`` may be sharded so on that
    axis, whether or not a neighbour already holds it; ``coord`` is the coordinate the program
    runs at on that axis (its device group; -1: any), whose piece later axes must divide.
    Raises when some mesh axis has no strategy; :func:`choose_or_fallback` never does.
    """
    choice, axis = _solve(op, rule, mesh_shape, operand_layouts, result_layouts, costs, exact_results,
                          partial_ok, ragged)
    if choice is None:
        raise op.emit_error(f"no sharding strategy on mesh axis #{axis} produces the required result layout")
    return choice


def choose_or_fallback(op: Operation, rule: OpShardingRule, mesh_shape: Sequence[int],
                       operand_layouts: Sequence[Layout | None], result_layouts: Sequence[Layout | None],
                       exact_results: bool = False,
                       partial_ok: Callable[[object, Placement], bool] | None = None,
                       ragged: Sequence[tuple[int, tuple[int, ...], int]] = ()) -> tuple[Choice, bool]:
    """:func:`choose`, and ``(choice, False)`` when it finds a strategy. Where no strategy yields
    the known result layouts, ``(fallback, True)``: the cheapest strategy counting the change of
    its results to the known ones (a redistribution after the op), or, where a known result is a
    ``Partial`` no strategy makes (no collective creates one), the cheapest ignoring those results.
    The caller redistributes what the fallback yields to what is required, or keeps it."""
    no_partial = [None if lay is not None and any(isinstance(p, Partial) for p in lay) else lay
                  for lay in result_layouts]
    attempts = [(result_layouts, True)] if exact_results else []
    attempts += [(result_layouts, False), (no_partial, False), ([None] * len(result_layouts), False)]
    for k, (outs, exact) in enumerate(attempts):
        choice, _ = _solve(op, rule, mesh_shape, operand_layouts, outs, None, exact, partial_ok, ragged)
        if choice is not None:
            return choice, k > 0
    return choose(op, rule, mesh_shape, operand_layouts, attempts[-1][0], partial_ok=partial_ok, ragged=ragged), True


class ShardingFallbackWarning(Warning):
    """An op ran in another strategy than its result layouts ask for (no strategy yields them):
    correct, with a redistribution after it (:func:`choose_or_fallback`)."""


@dataclass(frozen=True)
class ResultChange:
    """One result of a fallback: the layout its strategy yields and the one required; ``moved``:
    bytes each rank sends to redistribute it (None: not redistributable, the result keeps ``got``)."""

    index: int
    got: Layout
    want: Layout
    moved: float | None


def warn_fallback(op: Operation, changes: Sequence[ResultChange]) -> None:
    """One line for ``op``'s site: its name, location, the result layouts changed, the bytes moved."""
    def fmt(lay: Layout) -> str:
        return "[" + ", ".join(map(str, lay)) + "]"

    what = ", ".join(f"result #{c.index} {fmt(c.got)} -> {fmt(c.want)}" if c.moved is not None
                     else f"result #{c.index} kept {fmt(c.got)} (no collective makes {fmt(c.want)})"
                     for c in changes)
    moved = sum(c.moved or 0.0 for c in changes)
    warnings.warn(f"'{op.name}' op at {op.location}: no sharding strategy produces the required result layout; "
                  f"computed in the best available strategy and redistributed after it ({what}): "
                  f"{moved:.0f} extra bytes moved per rank", ShardingFallbackWarning, stacklevel=3)


def _solve(op: Operation, rule: OpShardingRule, mesh_shape: Sequence[int],
           operand_layouts: Sequence[Layout | None], result_layouts: Sequence[Layout | None],
           costs: Sequence[AxisCost] | None, exact_results: bool,
           partial_ok: Callable[[object, Placement], bool] | None,
           ragged: Sequence[tuple[int, tuple[int, ...], int]]) -> tuple[Choice | None, int]:
    """:func:`choose`'s search: ``(choice, -1)``, or ``(None, axis)`` for the first mesh axis
    on which no strategy meets the requirements."""
    costs = costs or [AxisCost() for _ in mesh_shape]
    in_types = [v.type for v in op.operands]
    out_types = [r.type for r in op.results]
    per_axis: list[AxisStrategy] = []
    total = 0.0
    total_changes = 0
    ambiguous = False
    split: dict[int, int] = {}  # factor -> product of the axis sizes sharding it so far
    unknown = [i for i, x in enumerate(operand_layouts) if x is None]
    unknown_r = [i for i, x in enumerate(result_layouts) if x is None]
    exclusive: set[int] = set()   # factors that a strided layout reserves for one axis
    pieces: dict[int, tuple[int, ...]] = {}   # factor -> the ragged units an earlier axis cut it in
    coords = {0: _group_index(op)}   # a device group's program runs at grp (axis 0) = its group
    coords.update({ax: c for ax, _, c in ragged if c >= 0})
    for a, n in enumerate(mesh_shape):
        best: tuple[float, int, int] | None = None
        best_s: AxisStrategy | None = None
        free: set[tuple] = set()
        hints = strided_hints(rule, a, operand_layouts, False) | strided_hints(rule, a, result_layouts, True)
        ragged_units = {(ax, units) for ax, units, _ in ragged}
        # the split itself, and scaled for a factor that merges it with minor dims ([b*t] of [b, t])
        hints |= {(f, RaggedShard(0, tuple(u * (size // sum(units)) for u in units)))
                  for ax, units, _ in ragged if ax == a
                  for f, size in enumerate(rule.factor_sizes) if size and size % sum(units) == 0}
        for idx, s in enumerate(axis_strategies(rule, n, hints, piece_sizes=_piece_sizes(pieces, coords))):
            if s.factor is not None and n > 1 and not _fits(rule, s, n, split, exclusive, pieces=pieces,
                                                            coord=coords.get(_piece_axis(pieces, s.factor))):
                continue
            cost, changes = 0.0, 0
            for v, ty, have, want in zip(op.operands, in_types, operand_layouts, s.operands):
                if have is None:
                    # only a producer makes a value Partial (``partial_ok`` asks it)
                    if isinstance(want, Partial) and not (partial_ok is not None and partial_ok(v, want)):
                        cost = INF
                        break
                    continue
                # (a Partial its producer makes from nothing, a zero constant, costs nothing to share)
                shared_partial = isinstance(have[a], Partial) and len(v.uses) > 1 and \
                    not (partial_ok is not None and partial_ok(v, have[a]))
                if have[a] != want:
                    cost += placement_change_cost(have[a], want, _bytes_on_axis(ty, have, a, mesh_shape), n, costs[a])
                    if is_pinned(v):
                        cost += PINNED_PENALTY
                    changes += 1
                if shared_partial and not isinstance(want, Replicate):
                    # A Partial with several users is reduced once, to Replicate, and shared:
                    # keeping it pending (or scattering it) per branch means one reduction
                    # per branch, so price those above a single all-reduce.
                    cost += FANOUT_FACTOR * costs[a].all_reduce(_bytes_on_axis(ty, have, a, mesh_shape), n)
            for ty, have, got in zip(out_types, result_layouts, s.results):
                if have is None:
                    continue
                if have[a] != got:
                    if exact_results:
                        cost = INF
                        break
                    cost += placement_change_cost(got, have[a], _bytes_on_axis(ty, have, a, mesh_shape), n, costs[a])
                    changes += 1
            # ties: a split of the inputs' (ragged across device groups) before anything else, so
            # that values nobody constrains (a chain of ops on constants) stay split, not replicated
            key = (cost, changes, -1 if s.units and (a, s.units) in ragged_units else idx)
            if cost == 0 and changes == 0:
                free.add((tuple(s.operands[i] for i in unknown), tuple(s.results[i] for i in unknown_r)))
            if cost < INF and (best is None or key < best):
                best, best_s = key, s
        if best_s is None:
            return None, a
        per_axis.append(best_s)
        total += best[0]  # type: ignore[index]
        total_changes += best[1]  # type: ignore[index]
        ambiguous |= len(free) > 1
        _record(rule, best_s, n, split, exclusive, pieces, a)
    operands = tuple(tuple(s.operands[i] for s in per_axis) for i in range(len(in_types)))
    results = tuple(tuple(s.results[i] for s in per_axis) for i in range(len(out_types)))
    return Choice(operands, results, total, total_changes, ambiguous), -1


def runs_locally(rule: OpShardingRule, mesh_shape: Sequence[int], operand_layouts: Sequence[Sequence[Placement]],
                 result_layouts: Sequence[Sequence[Placement]]) -> bool:
    """Whether the op can compute exactly ``result_layouts`` from exactly ``operand_layouts``
    with no redistribution: on every mesh axis some strategy of ``rule`` takes and gives them."""
    split: dict[int, int] = {}
    exclusive: set[int] = set()
    pieces: dict[int, tuple[int, ...]] = {}
    for a, n in enumerate(mesh_shape):
        match = None
        hints = strided_hints(rule, a, operand_layouts, False) | strided_hints(rule, a, result_layouts, True)
        for s in axis_strategies(rule, n, hints, small=True, piece_sizes=_piece_sizes(pieces, {})):
            if s.factor is not None and n > 1 and not _fits(rule, s, n, split, exclusive, small=True, pieces=pieces):
                continue
            if all(lay[a] == want for lay, want in zip(operand_layouts, s.operands)) and \
                    all(lay[a] == got for lay, got in zip(result_layouts, s.results)):
                match = s
                break
        if match is None:
            return False
        _record(rule, match, n, split, exclusive, pieces, a)
    return True


def _group_index(op: Operation) -> int:
    """The ``spmdc.group_index`` of the function holding ``op`` (-1: not a device group's)."""
    p = op.parent_op()
    while p is not None and GROUP_INDEX_ATTR not in p.attributes:
        p = p.parent_op()
    return int(p.attributes[GROUP_INDEX_ATTR].value) if p is not None else -1  # type: ignore[attr-defined]


def _piece_sizes(pieces: dict[int, tuple[int, ...]], coords: dict[int, int]) -> dict[int, int]:
    """Factor → the size of its ragged piece here: at the real coordinate when known, else the
    largest (a later axis chunks each piece; :func:`_fits` checks every piece)."""
    out = {}
    for f, (axis, units) in pieces.items():   # type: ignore[misc]
        c = coords.get(axis, -1)
        out[f] = units[c] if c is not None and c >= 0 else max(units)
    return out


def _piece_axis(pieces: dict[int, tuple[int, ...]], f: int) -> int | None:
    return pieces[f][0] if f in pieces else None   # type: ignore[return-value]


def _fits(rule: OpShardingRule, s: AxisStrategy, n: int, split: dict[int, int], exclusive: set[int],
          small: bool = False, pieces: dict | None = None, coord: int | None = None) -> bool:
    """Whether factor ``s.factor`` can be sharded over ``n`` more ranks after the axes before.
    A factor an earlier axis cut ragged (``pieces``) may be chunked again, evenly, within each
    piece: the piece of the real coordinate ``coord`` when known (a device group's program: the
    other groups' coordinates are not run here), else every piece (``small``: some piece)."""
    f = s.factor
    assert f is not None
    if pieces and f in pieces:
        if s.parts > 1 or s.units:
            return False
        units = pieces[f][1]
        if coord is not None and coord >= 0:
            units = (units[coord],)
        ok = [not ((n > u and not small) or (f in rule.even_only and u % n)) for u in units if u]
        return any(ok) if small else all(ok)
    if f in exclusive or ((s.parts > 1 or s.units) and f in split):
        return False
    parts = split.get(f, 1) * n
    size = rule.factor_sizes[f]
    return not ((parts * s.parts > size and not small and not s.units) or (f in rule.even_only and size % parts))


def _record(rule: OpShardingRule, s: AxisStrategy, n: int, split: dict[int, int], exclusive: set[int],
            pieces: dict | None = None, axis: int = -1) -> None:
    if s.factor is None or n <= 1:
        return
    split[s.factor] = split.get(s.factor, 1) * n
    if s.units and pieces is not None and s.factor not in pieces:
        pieces[s.factor] = (axis, s.units)   # later axes may chunk each piece (RS then S)
    elif s.parts > 1 or s.units:
        exclusive.add(s.factor)
    exclusive.update(rule.exclusive(s.factor))
