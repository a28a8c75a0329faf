"""``insert-redistribution``: make every layout change explicit as ``shard.redistribute``.

For each op, the strategy that produces its results' layouts most cheaply (the same
choice as :mod:`sharding-propagation`) says what layout each operand must have; where
the producer's layout differs, a ``shard.redistribute`` is inserted (one per value and
target layout, shared by all users). ``shard.annotate`` operands and function results
are brought to their annotated layouts the same way.

Before::

    %0 = tensor.matmul %a, %w2 {shard.sharding = [#shard<@m, [P(sum)]>]} : ...
    func.return %0 : tensor<8x16xf32>          // result annotated [R]

After::

    %1 = shard.redistribute %0 {from = #shard<@m, [P(sum)]>, to = #shard<@m, [R]>} : tensor<8x16xf32>
    func.return %1 : tensor<8x16xf32>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.func import FuncOp, ReturnOp
from spmdc.dialects.shard import AnnotateOp, RedistributeOp, ShardingAttr
from spmdc.ir.core import Operation, Value
from spmdc.ir.rewriter import Builder
from spmdc.ir.types import TensorType
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.layouts import SHARDING, Layout, func_mesh, layout_of, require_layout, set_result_layouts
from spmdc.sharding.strategy import choose, rule_for


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
        choice = choose(op, rule_for(op), mesh.shape, ins, outs, exact_results=True)
        for i, (v, want) in enumerate(zip(op.operands, choice.operands)):
            op.set_operand(i, convert(v, want, op))
    return inserted


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
