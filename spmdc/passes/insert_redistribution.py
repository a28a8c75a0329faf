"""``insert-redistribution``: make every layout change explicit as ``shard.redistribute``.

For each op, the strategy that produces its results' layouts most cheaply (the same
choice as :mod:`sharding-propagation`) says what layout each operand must have; where
the producer's layout differs, a ``shard.redistribute`` is inserted (one per value and
target layout, shared by all users). ``shard.annotate`` operands and function results
are brought to their annotated layouts the same way. Where no strategy yields an op's result
layouts, the op runs in the best one there is and a ``shard.redistribute`` after it brings each
result to its layout (a ``ShardingFallbackWarning`` per op; docs/passes.md).

Before::

    %0 = tensor.matmul %a, %w2 {shard.sharding = [#shard<@m, [P(sum)]>]} : ...
    func.return %0 : tensor<8x16xf32>          // result annotated [R]

After::

    %1 = shard.redistribute %0 {from = #shard<@m, [P(sum)]>, to = #shard<@m, [R]>} : tensor<8x16xf32>
    func.return %1 : tensor<8x16xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.func import FuncOp, ReturnOp
from spmdc.dialects.shard import AnnotateOp, MeshOp, RedistributeOp, ShardingAttr
from spmdc.ir.core import Operation, Value
from spmdc.ir.rewriter import Builder
from spmdc.ir.types import TensorType
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.layouts import SHARDING, Layout, func_mesh, layout_of, require_layout, set_result_layouts
from spmdc.sharding.planner import moved_bytes
from spmdc.sharding.strategy import ResultChange, choose_or_fallback, rule_for, warn_fallback


def insert_in_function(module: Operation, func: FuncOp) -> int:
    mesh = func_mesh(module, func)
    if mesh is None:
        return 0
    cache: dict[tuple[int, Layout], Value] = {}
    inserted = 0

    def convert(v: Value, want: Layout, before: Operation, shared: bool = True) -> Value:
        nonlocal inserted
        have = require_layout(v, before)
        if have == want:
            return v
        key = (id(v), want)
        if key not in cache or not shared:
            op = Builder.before(before).create(
                RedistributeOp, [v],
                {"from": ShardingAttr(mesh.sym_name, have), "to": ShardingAttr(mesh.sym_name, want)},
                location=before.location)
            set_result_layouts(op, mesh.sym_name, [want])
            cache[key] = op.result
            inserted += 1
        return cache[key]

    for op in list(func.body.ops):
        if isinstance(op, RedistributeOp):
            continue
        if isinstance(op, AnnotateOp):
            # each annotation is its own conversion point (FSDP re-gathers in backward)
            op.set_operand(0, convert(op.operand(0), op.sharding.placements, op, shared=False))
            set_result_layouts(op, mesh.sym_name, [op.sharding.placements])
            continue
        if isinstance(op, ReturnOp):
            for i, v in enumerate(op.operands):
                s = func.res_attrs(i).get(SHARDING)
                if isinstance(s, ShardingAttr) and isinstance(v.type, TensorType):
                    op.set_operand(i, convert(v, s.placements, op))
            continue
        if not op.results or not all(isinstance(r.type, TensorType) for r in op.results):
            continue
        outs = [layout_of(r) for r in op.results]
        if any(o is None for o in outs):
            raise op.emit_error("has no 'shard.sharding'; run sharding-propagation first")
        ins = [require_layout(v, op) for v in op.operands]
        choice, fell_back = choose_or_fallback(op, rule_for(op), mesh.shape, ins, outs, exact_results=True)
        for i, (v, want) in enumerate(zip(op.operands, choice.operands)):
            op.set_operand(i, convert(v, want, op))
        if fell_back:
            inserted += redistribute_results(op, mesh, choice.results, outs)  # type: ignore[arg-type]
    return inserted


def redistribute_results(op: Operation, mesh: MeshOp, got: Sequence[Layout], want: Sequence[Layout]) -> int:
    """The fallback for an op no strategy gives ``want``: it yields ``got``, and one
    ``shard.redistribute`` after it brings each changed result to ``want`` for all its users
    (a ``Partial`` no collective makes: the result keeps ``got`` and its users adapt). Warns once."""
    set_result_layouts(op, mesh.sym_name, [tuple(g) for g in got])
    changes, at = [], op
    for r, g, w in zip(op.results, got, want):
        if tuple(g) == tuple(w):
            continue
        nbytes = float(r.type.num_bytes)  # type: ignore[attr-defined]
        try:
            moved: float | None = moved_bytes(tuple(g), tuple(w), r.type.rank, nbytes, mesh.shape)  # type: ignore[attr-defined]
        except ValueError:
            moved = None
        changes.append(ResultChange(r.index, tuple(g), tuple(w), moved))
        if moved is None:
            continue
        users = list(r.uses)
        attrs = {"from": ShardingAttr(mesh.sym_name, tuple(g)), "to": ShardingAttr(mesh.sym_name, tuple(w))}
        at = Builder.after(at).create(RedistributeOp, [r], attrs, location=op.location)
        set_result_layouts(at, mesh.sym_name, [tuple(w)])
        for use in users:
            use.owner.set_operand(use.index, at.result)
    warn_fallback(op, changes)
    return sum(1 for c in changes if c.moved is not None)


@dataclass
class InsertRedistribution(ModulePass):
    """Insert shard.redistribute wherever a producer's layout is not what its user needs.

    Conversions of one value to one layout are shared by its users, except those feeding
    ``shard.annotate``: each annotation is a separate conversion point."""

    name: ClassVar[str] = "insert-redistribution"

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp):
                insert_in_function(module, op)


PASS = InsertRedistribution
