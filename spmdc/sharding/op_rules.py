"""The sharding rule of every ``tensor`` op, declared once, in one table.

``RULES[op_name](op)`` returns the op's :class:`OpShardingRule`. Ops that derive
from the generic elementwise bases get the elementwise rule; an op with neither an
entry nor a base rule runs replicated (always correct, never fast).

    tensor.matmul   ([m, k], [k, n]) -> ([m, n])   k: reduction(sum); P(sum) passes through one operand
    tensor.add      ([i, j], [i, j]) -> ([i, j])   P(sum) + P(sum) -> P(sum)
    tensor.mul      ([i, j], [j])    -> ([i, j])   P(sum) * R -> P(sum)
    tensor.sum      ([i, j]) -> ([i])              j: reduction(sum)
    tensor.max      ([i, j]) -> ([i])              j: reduction(max)
    tensor.mean     ([i, j]) -> ([i])              j: reduction(avg), even sizes only
"""

from __future__ import annotations

from typing import Callable

from spmdc.ir.attributes import ArrayAttr, BoolAttr, DenseAttr, IntegerAttr
from spmdc.ir.core import Operation
from spmdc.ir.types import TensorType
from spmdc.dialects.shard import rules as R
from spmdc.dialects.shard.rules import OpShardingRule

RuleFn = Callable[[Operation], OpShardingRule]


def _types(op: Operation) -> tuple[list[TensorType], TensorType]:
    return [v.type for v in op.operands], op.results[0].type  # type: ignore[return-value]


def _elementwise(partial_all: bool = False, partial_one: tuple[int, ...] = ()) -> RuleFn:
    def rule(op: Operation) -> OpShardingRule:
        ins, out = _types(op)
        return R.elementwise_rule(ins, out, partial_all=partial_all, partial_one=partial_one)
    return rule


def _ints(op: Operation, key: str) -> list[int]:
    a = op.attributes.get(key)
    return [x.value for x in a] if isinstance(a, ArrayAttr) else []  # type: ignore[attr-defined]


def _int(op: Operation, key: str, default: int = 0) -> int:
    a = op.attributes.get(key)
    return a.value if isinstance(a, IntegerAttr) else default


def _keepdim(op: Operation) -> bool:
    a = op.attributes.get("keepdim")
    return bool(a.value) if isinstance(a, BoolAttr) else False


def _reduce(kind: str | None, partial: frozenset[str]) -> RuleFn:
    def rule(op: Operation) -> OpShardingRule:
        t = op.operands[0].type
        r = R.reduction_rule(t, _ints(op, "dims"), _keepdim(op), kind, partial)  # type: ignore[arg-type]
        if kind == "avg":
            dims = set(_ints(op, "dims"))
            evens = frozenset(f for d, f in enumerate(r.operands[0]) if d in dims and f is not None)
            r = OpShardingRule(r.operands, r.results, r.factor_sizes, r.reductions, r.blocked,
                               r.even_only | evens, r.partial_all, r.partial_one, r.partial_kinds)
        return r
    return rule


def _dim_blocked(key: str = "dim", partial_one: tuple[int, ...] = ()) -> RuleFn:
    """Elementwise over all dims except attribute ``key``'s dim, which needs replication."""
    def rule(op: Operation) -> OpShardingRule:
        ins, out = _types(op)
        base = R.elementwise_rule([t for t in ins if t.rank == out.rank], out)
        d = _int(op, key)
        fs = base.results[0]
        blocked = frozenset({fs[d]}) if 0 <= d < len(fs) and fs[d] is not None else frozenset()
        operands = tuple(base.operands[0] for _ in ins) if len(base.operands) == 1 else base.operands
        if len(operands) != len(ins):
            return R.replicated_rule(ins, [r.type for r in op.results])
        return OpShardingRule(operands, tuple(fs for _ in op.results), base.factor_sizes,
                              blocked=blocked, partial_one=partial_one)
    return rule


def _aligned(blocked_dims: Callable[[Operation], set[int]]) -> RuleFn:
    """Operands of the result's rank map dim-for-dim (where sizes agree) to the result's
    factors; lower-rank operands broadcast from the right; ``blocked_dims`` stay whole."""
    def rule(op: Operation) -> OpShardingRule:
        out = op.results[0].type
        b = R.RuleBuilder()
        res = [b.factor(s) for s in out.shape]  # type: ignore[attr-defined]
        blocked = {res[d] for d in blocked_dims(op) if 0 <= d < len(res)}
        ops = []
        for v in op.operands:
            t = v.type
            off = out.rank - t.rank  # type: ignore[attr-defined]
            dims: list[int | None] = []
            for i, size in enumerate(t.shape):  # type: ignore[attr-defined]
                j = off + i
                if 0 <= j < out.rank and size == out.shape[j]:  # type: ignore[attr-defined]
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
    return rule


def _embedding(op: Operation) -> OpShardingRule:
    """``table[V, D]``, ``ids[...]`` -> ``[..., D]``: ids dims and D are parallel; V stays whole."""
    table, ids = op.operands[0].type, op.operands[1].type
    b = R.RuleBuilder()
    fid = [b.factor(s) for s in ids.shape]  # type: ignore[attr-defined]
    v, d = b.factor(table.shape[0]), b.factor(table.shape[1])  # type: ignore[attr-defined]
    return b.build([[v, d], fid], [fid + [d]], blocked=frozenset({v}))


def _attr_dims(*keys: str) -> Callable[[Operation], set[int]]:
    def dims(op: Operation) -> set[int]:
        out: set[int] = set()
        for k in keys:
            a = op.attributes.get(k)
            if isinstance(a, IntegerAttr):
                out.add(a.value)
            elif isinstance(a, ArrayAttr):
                out.update(x.value for x in a)  # type: ignore[attr-defined]
        return out
    return dims


def _padded_dims(op: Operation) -> set[int]:
    low, high = _ints(op, "low"), _ints(op, "high")
    return {d for d, (lo, hi) in enumerate(zip(low, high)) if lo or hi}


def _matmul(op: Operation) -> OpShardingRule:
    a, b = op.operands[0].type, op.operands[1].type
    return R.matmul_rule(a, b, op.results[0].type)  # type: ignore[arg-type]


def _permute(op: Operation) -> OpShardingRule:
    return R.permute_rule(op.operands[0].type, _ints(op, "perm"))  # type: ignore[arg-type]


def _reshape(op: Operation) -> OpShardingRule:
    return R.reshape_rule(op.operands[0].type, op.results[0].type)  # type: ignore[arg-type]


def _broadcast(op: Operation) -> OpShardingRule:
    return R.broadcast_rule(op.operands[0].type, op.results[0].type)  # type: ignore[arg-type]


def _constant(op: Operation) -> OpShardingRule:
    """A splat is the same on every rank, so any layout is free; other constants stay whole."""
    t = op.results[0].type
    v = op.attributes.get("value")
    b = R.RuleBuilder()
    fs = [b.factor(s) for s in t.shape]  # type: ignore[attr-defined]
    splat = isinstance(v, DenseAttr) and len(v.values) == 1
    zero = splat and v.values[0] == 0  # type: ignore[union-attr]
    return b.build([], [fs], blocked=frozenset() if splat else frozenset(fs),
                   partial_results=frozenset({"sum"}) if zero else frozenset())


def _index_put(op: Operation) -> OpShardingRule:
    """``index_put(x, i0.., values)`` over the first k dims of x: those stay whole; trailing dims
    are parallel. With ``accumulate`` the index (batch) dims are a sum: sharding them scatters
    each rank's part and leaves the result ``P(sum)`` (x must then be ``P(sum)``, e.g. zeros)."""
    x = op.operands[0].type
    idx = [v.type for v in op.operands[1:-1]]
    vals = op.operands[-1].type
    k = len(idx)
    b = R.RuleBuilder()
    fx = [b.factor(s) for s in x.shape]  # type: ignore[attr-defined]
    blocked = set(fx[:k])
    bshape: tuple[int, ...] = ()
    for t in idx:
        bshape = tuple(max(a, c) for a, c in zip((1,) * (len(t.shape) - len(bshape)) + bshape,  # type: ignore[attr-defined]
                                                  (1,) * (len(bshape) - len(t.shape)) + tuple(t.shape)))  # type: ignore[attr-defined]
    g = [b.factor(s) for s in bshape]
    accumulate = bool(op.attr_value("accumulate", False))
    if not accumulate:
        blocked.update(g)

    def align(shape: tuple[int, ...], full: list[int], sizes: tuple[int, ...]) -> list[int | None]:
        off = len(full) - len(shape)
        return [None if (s == 1 and sizes[off + i] != 1) else full[off + i] for i, s in enumerate(shape)]

    target = g + fx[k:]
    tsizes = bshape + tuple(x.shape[k:])  # type: ignore[attr-defined]
    operands = [fx] + [align(tuple(t.shape), g, bshape) for t in idx] + [align(tuple(vals.shape), target, tsizes)]  # type: ignore[attr-defined]
    return b.build(operands, [fx], blocked=frozenset(blocked),
                   reductions=tuple((f, "sum") for f in g) if accumulate else (),
                   reduce_partial_operands=(0,),
                   # accumulate is linear in (x, values) together: sum_r (x_r + scatter(v_r)) = x + scatter(v)
                   partial_group=(0, len(op.operands) - 1) if accumulate else ())


RULES: dict[str, RuleFn] = {
    "tensor.add": _elementwise(partial_all=True),
    "tensor.sub": _elementwise(partial_all=True),
    "tensor.mul": _elementwise(partial_one=(0, 1)),
    "tensor.div": _elementwise(partial_one=(0,)),
    "tensor.neg": _elementwise(partial_one=(0,)),
    "tensor.cast": _elementwise(partial_one=(0,)),
    "tensor.matmul": _matmul,
    "tensor.sum": _reduce("sum", frozenset({"sum"})),
    "tensor.max": _reduce("max", frozenset({"max"})),
    "tensor.mean": _reduce("avg", frozenset({"sum"})),
    "tensor.permute": _permute,
    "tensor.reshape": _reshape,
    "tensor.broadcast": _broadcast,
    "tensor.constant": _constant,
    "tensor.softmax": _dim_blocked("dim"),
    "tensor.log_softmax": _dim_blocked("dim"),
    "tensor.cumsum": _dim_blocked("dim"),
    "tensor.concat": _dim_blocked("dim", partial_one=()),
    "tensor.var": _reduce(None, frozenset()),
    "tensor.select": _elementwise(),
    "tensor.compare": _elementwise(),
    "tensor.slice": _aligned(_attr_dims("dim")),
    "tensor.insert_slice": _aligned(_attr_dims("dim")),
    "tensor.reverse": _aligned(_attr_dims("dims")),
    "tensor.pad": _aligned(_padded_dims),
    "tensor.gather": _aligned(_attr_dims("dim")),
    "tensor.scatter": _aligned(_attr_dims("dim")),
    "tensor.embedding": _embedding,
    "tensor.index_put": _index_put,
}


def rule_for(op: Operation) -> OpShardingRule:
    """The op's rule: the table, then the elementwise bases, else replicated."""
    fn = RULES.get(op.name)
    if fn is not None:
        return fn(op)
    from spmdc.dialects.tensor.elementwise import BinaryOp, UnaryOp

    if isinstance(op, (BinaryOp, UnaryOp)) and len(op.results) == 1:
        return _elementwise()(op)
    return R.replicated_rule([v.type for v in op.operands], [r.type for r in op.results])
