"""``canonicalize``: local simplifications to a fixed point, then dead-code removal.

Patterns:

* ``tensor.reshape`` of ``tensor.reshape`` → one reshape; reshape to the same type → operand
* ``tensor.permute`` of ``tensor.permute`` → one permute; identity permute → operand
* ``tensor.cast`` / ``tensor.broadcast`` to the operand's own type → operand
* ``shard.redistribute`` from a layout to the same layout → operand
* ``shard.redistribute`` of ``shard.redistribute`` → one redistribute (or none)
* ``tensor.sum``/``max``/``mean`` over no dims → operand

Before::

    %0 = tensor.reshape %x : (tensor<4x4xf32>) -> tensor<16xf32>
    %1 = tensor.reshape %0 : (tensor<16xf32>) -> tensor<2x8xf32>

After::

    %1 = tensor.reshape %x : (tensor<4x4xf32>) -> tensor<2x8xf32>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.shard import RedistributeOp
from spmdc.dialects.tensor import BroadcastOp, CastOp, PermuteOp, ReshapeOp
from spmdc.dialects.tensor.reduction import ReduceOp
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder, RewritePattern, Rewriter, apply_patterns_greedily
from spmdc.passes.dce import erase_dead_ops
from spmdc.passes.pass_base import ModulePass


class FoldIdentity(RewritePattern):
    """Ops that return their operand unchanged."""

    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        if isinstance(op, (ReshapeOp, CastOp, BroadcastOp)) and op.operand(0).type == op.result.type:
            pass
        elif isinstance(op, PermuteOp) and op.perm == list(range(len(op.perm))):
            pass
        elif isinstance(op, RedistributeOp) and op.source == op.target:
            pass
        elif isinstance(op, ReduceOp) and not op.dims:
            pass
        else:
            return False
        rewriter.replace_op(op, [op.operand(0)])
        return True


class ComposeReshape(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        inner = op.operand(0).defining_op() if isinstance(op, ReshapeOp) else None
        if not isinstance(inner, ReshapeOp):
            return False
        new = Builder.before(op).create(ReshapeOp, [inner.operand(0)], result_types=[op.result.type],
                                        location=op.location)
        rewriter.replace_op(op, new.results)
        return True


class ComposePermute(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        inner = op.operand(0).defining_op() if isinstance(op, PermuteOp) else None
        if not isinstance(inner, PermuteOp):
            return False
        perm = [inner.perm[p] for p in op.perm]
        new = Builder.before(op).create(PermuteOp, [inner.operand(0)], {"perm": perm}, location=op.location)
        rewriter.replace_op(op, new.results)
        return True


class ComposeRedistribute(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        inner = op.operand(0).defining_op() if isinstance(op, RedistributeOp) else None
        if not isinstance(inner, RedistributeOp) or inner.target != op.source:
            return False  # a chain whose layouts do not meet says nothing about the value
        if inner.source == op.target:
            rewriter.replace_op(op, [inner.operand(0)])
            return True
        new = Builder.before(op).create(RedistributeOp, [inner.operand(0)],
                                        {"from": inner.source, "to": op.target}, location=op.location)
        rewriter.replace_op(op, new.results)
        return True


PATTERNS: list[RewritePattern] = [FoldIdentity(), ComposeReshape(), ComposePermute(), ComposeRedistribute()]


@dataclass
class Canonicalize(ModulePass):
    """Apply the canonicalization patterns greedily, then erase dead pure ops."""

    name: ClassVar[str] = "canonicalize"
    max_iterations: int = 10

    def run(self, module: Operation) -> None:
        apply_patterns_greedily(module, PATTERNS, self.max_iterations)
        for region in module.regions:
            for block in region.blocks:
                erase_dead_ops(block)


PASS = Canonicalize
