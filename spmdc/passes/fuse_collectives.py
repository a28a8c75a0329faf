"""``fuse-collectives`` (first version): fewer, cheaper collectives on per-rank programs.

* ``all_reduce(a) + all_reduce(b)`` (same mesh, axes and op ``sum``; each used only
  there) → ``all_reduce(a + b)``: a deferred reduction, one collective instead of two;
  likewise for ``sub``.
* ``all_reduce`` on one axis followed by ``all_slice`` on that axis (its only use) →
  ``reduce_scatter``.

Before::

    %1 = comm.all_reduce %a {axes = ["tp"], mesh = @m, op = "sum"} : tensor<8x16xf32>
    %2 = comm.all_reduce %b {axes = ["tp"], mesh = @m, op = "sum"} : tensor<8x16xf32>
    %3 = tensor.add %1, %2 : tensor<8x16xf32>

After::

    %0 = tensor.add %a, %b : tensor<8x16xf32>
    %3 = comm.all_reduce %0 {axes = ["tp"], mesh = @m, op = "sum"} : tensor<8x16xf32>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.comm import AllReduceOp, AllSliceOp, ReduceScatterOp
from spmdc.dialects.tensor import AddOp, SubOp
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder, RewritePattern, Rewriter, apply_patterns_greedily
from spmdc.passes.pass_base import ModulePass


def _single_use_all_reduce(v, user: Operation) -> AllReduceOp | None:
    op = v.defining_op()
    if isinstance(op, AllReduceOp) and op.attr_value("op") == "sum" and len(v.uses) == 1 \
            and "shard.sharding" not in op.attributes:
        return op
    return None


class DeferAllReduce(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        if not isinstance(op, (AddOp, SubOp)):
            return False
        a = _single_use_all_reduce(op.operand(0), op)
        b = _single_use_all_reduce(op.operand(1), op)
        if a is None or b is None or a.attributes != b.attributes or op.operand(0).type != op.operand(1).type:
            return False
        builder = Builder.before(op)
        inner = builder.create(type(op), [a.operand(0), b.operand(0)], location=op.location)
        fused = builder.create(AllReduceOp, [inner.result], dict(a.attributes), location=op.location)
        rewriter.replace_op(op, fused.results)
        rewriter.erase_op(a)
        rewriter.erase_op(b)
        return True


class AllReduceSliceToReduceScatter(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        if not isinstance(op, AllSliceOp) or "shard.sharding" in op.attributes:
            return False
        ar = op.operand(0).defining_op()
        if not isinstance(ar, AllReduceOp) or len(ar.result.uses) != 1 or list(ar.axes) != [op.attr_value("axis")] \
                or ar.attr_value("mesh") != op.attr_value("mesh"):
            return False
        rs = Builder.before(op).create(
            ReduceScatterOp, [ar.operand(0)],
            {"mesh": op.attributes["mesh"], "axis": op.attributes["axis"], "dim": op.attributes["dim"],
             "op": ar.attributes["op"]}, result_types=[op.result.type], location=op.location)
        rewriter.replace_op(op, rs.results)
        rewriter.erase_op(ar)
        return True


@dataclass
class FuseCollectives(ModulePass):
    """Defer and merge all-reduces; all_reduce + all_slice → reduce_scatter."""

    name: ClassVar[str] = "fuse-collectives"

    def run(self, module: Operation) -> None:
        apply_patterns_greedily(module, [DeferAllReduce(), AllReduceSliceToReduceScatter()])


PASS = FuseCollectives
