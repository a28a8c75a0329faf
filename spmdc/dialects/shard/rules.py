"""Sharding rules as data: einsum-like factors per op, declared once per op class.

Each op declares its rule beside its class (``op.sharding_rule()``, Shardy's
``ShardingRuleOpInterface``); this module is the vocabulary those declarations use.

A rule names the *factors* of an op — the loop dimensions — and maps every operand
and result dim to one of them (or to none, for a broadcast size-1 dim)::

    tensor.matmul    ([m, k], [k, n]) -> ([m, n])     k: reduction(sum)
    tensor.add       ([i, j], [j]) -> ([i, j])
    tensor.sum dims=[1]   ([i, j]) -> ([i])            j: reduction(sum)
    tensor.softmax dim=1  ([i, j]) -> ([i, j])         j: needs replication

Sharding a factor on a mesh axis shards every dim mapped to it; a sharded
*reduction* factor leaves the result ``Partial``. Factors in ``blocked`` must stay
replicated (softmax's dim, a reshape that cannot be split evenly, global offsets).

A dim may also be a *strided view* of a factor (``views``): the dim is ``k`` equal parts laid
end to end and the factor indexes within a part — a fused ``q|k|v`` dim sliced into three, the
merged side of ``[b, t, 3*h*d] <-> [b, t, 3, h, d]``. Sharding that factor leaves the dim
``SS(dim, k)`` (strided) where the dims mapped to the factor get ``S``::

    tensor.slice [32:64] of dim 2   ([i, j, 3*k]) -> ([i, j, k])      k: SS(2, 3) <-> S(2)

Partial linearity says which ops let ``P(...)`` operands through unreduced:

* ``partial_all``: every operand ``P(sum)`` → result ``P(sum)`` (add, sub);
* ``partial_one``: operand ``i`` ``P(sum)`` and the others ``R`` → ``P(sum)``
  (mul, matmul, the numerator of div, neg, casts, reshapes, sums).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from spmdc.ir.types import TensorType

Dims = tuple[int | None, ...]


@dataclass(frozen=True)
class OpShardingRule:
    operands: tuple[Dims, ...]
    results: tuple[Dims, ...]
    factor_sizes: tuple[int, ...]
    reductions: tuple[tuple[int, str], ...] = ()   # factor → reduce kind ("sum", "max", "min", "avg")
    blocked: frozenset[int] = frozenset()
    even_only: frozenset[int] = frozenset()          # shardable only when size % axis size == 0
    partial_all: bool = False
    partial_one: tuple[int, ...] = ()
    partial_kinds: frozenset[str] = frozenset({"sum"})
    partial_group: tuple[int, ...] = ()   # these operands P(sum) together (the rest R) -> P(sum)
    reduce_partial_operands: tuple[int, ...] = ()   # operands that must be P(kind) when a reduction factor is sharded
    partial_results: frozenset[str] = frozenset()    # P kinds the op can produce from nothing (zero constants)
    # strided views: (is_result, value index, dim, factor, parts) — sharding ``factor`` makes
    # that dim ``SS(dim, parts)``
    views: tuple[tuple[bool, int, int, int, int], ...] = ()
    # scaled dims: (is_result, value index, dim, scale) — the dim is ``scale`` times its factor's
    # size (the major dim of a reshape's merged side, ``[b, t] -> [b*t]``): a ragged shard of the
    # factor in units ``u`` is ``RS(dim, u * scale)`` there
    scales: tuple[tuple[bool, int, int, int], ...] = ()

    def scale_of(self, is_result: bool, index: int, dim: int) -> int:
        """How many times its factor's size dim ``dim`` of operand/result ``index`` is (1 mostly)."""
        for r, i, d, k in self.scales:
            if r == is_result and i == index and d == dim:
                return k
        return 1

    def view_of(self, is_result: bool, index: int, factor: int) -> tuple[int, int] | None:
        """``(dim, parts)`` where operand/result ``index`` sees ``factor`` strided; None if it does not."""
        for r, i, d, f, k in self.views:
            if r == is_result and i == index and f == factor:
                return d, k
        return None

    def exclusive(self, factor: int) -> frozenset[int]:
        """Factors that may not be sharded on a later mesh axis once ``factor`` is (a strided dim
        is sharded by one axis only): after a viewed factor, itself and the factor of the viewing
        dim; after the factor of a viewing dim, the viewed factor."""
        out: set[int] = set()
        for r, i, d, f, _ in self.views:
            main = (self.results if r else self.operands)[i][d]
            if factor == f:
                out.add(f)
                if main is not None:
                    out.add(main)
            elif factor == main:
                out.add(f)
        return frozenset(out)

    @property
    def num_factors(self) -> int:
        return len(self.factor_sizes)

    def reduction_kind(self, factor: int) -> str | None:
        for f, k in self.reductions:
            if f == factor:
                return k
        return None

    def __str__(self) -> str:
        names = [_factor_name(i) for i in range(self.num_factors)]

        def fmt(groups: tuple[Dims, ...]) -> str:
            return ", ".join("[" + ", ".join("1" if f is None else names[f] for f in g) + "]" for g in groups)

        text = f"({fmt(self.operands)}) -> ({fmt(self.results)})"
        extras = [f"{names[f]}: reduction({k})" for f, k in self.reductions]
        extras += [f"{names[f]}: needs replication" for f in sorted(self.blocked)]
        return text + ("  " + ", ".join(extras) if extras else "")


def _factor_name(i: int) -> str:
    letters = "ijklmnopqrstuvwxyzabcdefgh"
    return letters[i] if i < len(letters) else f"f{i}"


@dataclass
class RuleBuilder:
    """Helper to declare factors: ``f = b.factor(size)``; then lists of factor ids per dim."""

    sizes: list[int] = field(default_factory=list)

    def factor(self, size: int) -> int:
        self.sizes.append(size)
        return len(self.sizes) - 1

    def build(self, operands: Sequence[Sequence[int | None]], results: Sequence[Sequence[int | None]],
              **kw: object) -> OpShardingRule:
        return OpShardingRule(tuple(tuple(o) for o in operands), tuple(tuple(r) for r in results),
                              tuple(self.sizes), **kw)  # type: ignore[arg-type]


def replicated_rule(operand_types: Sequence[object], result_types: Sequence[object]) -> OpShardingRule:
    """Every dim of every value in its own blocked factor: the op runs replicated."""
    b = RuleBuilder()
    ops = [[b.factor(s) for s in t.shape] if isinstance(t, TensorType) else [] for t in operand_types]
    res = [[b.factor(s) for s in t.shape] if isinstance(t, TensorType) else [] for t in result_types]
    return b.build(ops, res, blocked=frozenset(range(len(b.sizes))))


def elementwise_rule(operand_types: Sequence[TensorType], result_type: TensorType,
                     partial_all: bool = False, partial_one: tuple[int, ...] = ()) -> OpShardingRule:
    """Result dims are factors; operand dims align from the right; size-1 broadcast dims map to none."""
    b = RuleBuilder()
    res = [b.factor(s) for s in result_type.shape]
    ops = []
    for t in operand_types:
        off = result_type.rank - t.rank
        ops.append([None if (s == 1 and result_type.shape[off + i] != 1) else res[off + i]
                    for i, s in enumerate(t.shape)])
    return b.build(ops, [res], partial_all=partial_all, partial_one=partial_one)


def reduction_rule(t: TensorType, dims: Sequence[int], keepdim: bool, kind: str | None,
                   partial_kinds: frozenset[str] = frozenset({"sum"})) -> OpShardingRule:
    """Reduced dims become reduction factors of ``kind`` (blocked when ``kind`` is None)."""
    b = RuleBuilder()
    fs = [b.factor(s) for s in t.shape]
    res = [(None if keepdim else -1) if i in dims else f for i, f in enumerate(fs)]
    res_dims = [d for d in res if d != -1]
    reduced = [fs[d] for d in dims]
    if kind is None:
        return b.build([fs], [res_dims], blocked=frozenset(reduced), partial_one=(0,), partial_kinds=partial_kinds)
    return b.build([fs], [res_dims], reductions=tuple((f, kind) for f in reduced), partial_one=(0,),
                   partial_kinds=partial_kinds)


def matmul_rule(a: TensorType, bt: TensorType, out: TensorType) -> OpShardingRule:
    """``[..., m, k] x [..., k, n] -> [..., m, n]`` with broadcast batch dims; k sums."""
    b = RuleBuilder()
    batch = [b.factor(s) for s in out.shape[:-2]]
    m, k, n = b.factor(out.shape[-2]), b.factor(a.shape[-1]), b.factor(out.shape[-1])

    def batch_dims(t: TensorType) -> list[int | None]:
        nb = t.rank - 2
        off = len(batch) - nb
        return [None if (s == 1 and out.shape[off + i] != 1) else batch[off + i] for i, s in enumerate(t.shape[:-2])]

    return b.build([batch_dims(a) + [m, k], batch_dims(bt) + [k, n]], [batch + [m, n]],
                   reductions=((k, "sum"),), partial_one=(0, 1))


def permute_rule(t: TensorType, perm: Sequence[int]) -> OpShardingRule:
    b = RuleBuilder()
    fs = [b.factor(s) for s in t.shape]
    return b.build([fs], [[fs[p] for p in perm]], partial_one=(0,))


def reshape_rule(src: TensorType, dst: TensorType) -> OpShardingRule:
    """Group dims whose products match; within a group only the major dim may be sharded,
    and only when its size divides evenly through the group. Everything else is blocked."""
    b = RuleBuilder()
    src_dims: list[int | None] = [None] * src.rank
    dst_dims: list[int | None] = [None] * dst.rank
    blocked: set[int] = set()
    even: set[int] = set()
    views: list[tuple[bool, int, int, int, int]] = []
    scales: list[tuple[bool, int, int, int]] = []
    i = j = 0
    while i < src.rank or j < dst.rank:
        gi, gj = [i], [j]
        if i >= src.rank or j >= dst.rank:
            break  # only unit dims are left
        if src.shape[i] == 1 or dst.shape[j] == 1:   # unit dims carry no factor
            if src.shape[i] == 1:
                i += 1
            if dst.shape[j] == 1:
                j += 1
            continue
        ps, pd = src.shape[i], dst.shape[j]
        while ps != pd:
            if ps < pd:
                i += 1
                gi.append(i)
                ps *= src.shape[i]
            else:
                j += 1
                gj.append(j)
                pd *= dst.shape[j]
        if len(gi) == 1 and len(gj) == 1:
            f = b.factor(ps)
            src_dims[gi[0]] = dst_dims[gj[0]] = f
        else:
            # A merge [a, b] -> [a*b] or a split [a*b] -> [a, b]: the major dim can be
            # sharded when it splits evenly; minor dims must stay whole.
            major = b.factor(min(src.shape[gi[0]], dst.shape[gj[0]]))
            if len(gi) > 1 and len(gj) > 1:
                blocked.add(major)
            else:
                even.add(major)
                size = b.sizes[major]
                if src.shape[gi[0]] != size:
                    scales.append((False, 0, gi[0], src.shape[gi[0]] // size))
                if dst.shape[gj[0]] != size:
                    scales.append((True, 0, gj[0], dst.shape[gj[0]] // size))
            src_dims[gi[0]] = dst_dims[gj[0]] = major
            for k in gi[1:]:
                src_dims[k] = _ones(b, src.shape[k], blocked)
            for k in gj[1:]:
                dst_dims[k] = _ones(b, dst.shape[k], blocked)
            # [.., k*h*d, ..] <-> [.., k, h, d, ..]: the split side's second dim (h) may be
            # sharded; the merged dim then holds k parts of h*d, each split: SS(dim, k).
            if (len(gi) == 1) != (len(gj) == 1):
                merged_is_src = len(gi) == 1
                split, split_shape = (gj, dst.shape) if merged_is_src else (gi, src.shape)
                outer, second = split_shape[split[0]], split[1]
                if outer > 1 and split_shape[second] > 1:
                    f = (dst_dims if merged_is_src else src_dims)[second]
                    assert f is not None
                    blocked.discard(f)
                    if any(split_shape[k] != 1 for k in split[2:]):
                        even.add(f)   # chunks of h*d are chunks of h only when n divides h
                    views.append((not merged_is_src, 0, gi[0] if merged_is_src else gj[0], f, outer))
        i, j = gi[-1] + 1, gj[-1] + 1
    return b.build([src_dims], [dst_dims], blocked=frozenset(blocked), even_only=frozenset(even - blocked),
                   partial_one=(0,), views=tuple(views), scales=tuple(scales))


def _ones(b: RuleBuilder, size: int, blocked: set[int]) -> int:
    f = b.factor(size)
    blocked.add(f)
    return f


def broadcast_rule(src: TensorType, dst: TensorType) -> OpShardingRule:
    b = RuleBuilder()
    res = [b.factor(s) for s in dst.shape]
    off = dst.rank - src.rank
    ops = [None if (s == 1 and dst.shape[off + i] != 1) else res[off + i] for i, s in enumerate(src.shape)]
    return b.build([ops], [res], partial_one=(0,))


def dim_blocked_rule(operand_types: Sequence[TensorType], result_types: Sequence[TensorType], dim: int,
                     partial_one: tuple[int, ...] = ()) -> OpShardingRule:
    """Elementwise over every dim except ``dim``, which needs replication (softmax, cumsum, concat)."""
    out = result_types[0]
    base = elementwise_rule([t for t in operand_types if t.rank == out.rank], out)
    fs = base.results[0]
    blocked = frozenset({fs[dim]}) if 0 <= dim < len(fs) and fs[dim] is not None else frozenset()
    operands = tuple(base.operands[0] for _ in operand_types) if len(base.operands) == 1 else base.operands
    if len(operands) != len(operand_types):
        return replicated_rule(operand_types, result_types)
    return OpShardingRule(operands, tuple(fs for _ in result_types), base.factor_sizes, blocked=blocked,
                          partial_one=partial_one)


def aligned_rule(operand_types: Sequence[TensorType], result_type: TensorType,
                 blocked_dims: set[int]) -> OpShardingRule:
    """Operands of the result's rank map dim-for-dim (where sizes agree) to the result's
    factors; lower-rank operands broadcast from the right; ``blocked_dims`` of the result
    and every dim whose sizes differ stay whole (slices, pads, gathers, scatters)."""
    b = RuleBuilder()
    res = [b.factor(s) for s in result_type.shape]
    blocked = {res[d] for d in blocked_dims if 0 <= d < len(res)}
    ops = []
    for t in operand_types:
        off = result_type.rank - t.rank
        dims: list[int | None] = []
        for i, size in enumerate(t.shape):
            j = off + i
            if 0 <= j < result_type.rank and size == result_type.shape[j]:
                dims.append(res[j])
            elif size == 1:
                dims.append(None)
            else:
                f = b.factor(size)
                blocked.add(f)
                if 0 <= j < len(res):
                    blocked.add(res[j])
                dims.append(f)
        ops.append(dims)
    return b.build(ops, [res], blocked=frozenset(blocked))
