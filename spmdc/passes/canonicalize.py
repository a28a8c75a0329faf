"""``canonicalize``: local simplifications to a fixed point, then dead-code removal.

Patterns:

* ``tensor.reshape`` of ``tensor.reshape`` → one reshape; reshape to the same type → operand
* ``tensor.permute`` of ``tensor.permute`` → one permute; identity permute → operand
* ``tensor.cast`` / ``tensor.broadcast`` to the operand's own type → operand
* ``shard.redistribute`` from a layout to the same layout → operand
* ``shard.redistribute`` of ``shard.redistribute`` → one redistribute (or none)
* ``tensor.sum``/``max``/``mean`` over no dims → operand
* ``matmul(reshape(a), reshape(b))`` flattening the same leading batch dims →
  ``reshape(matmul(a, b))``, and ``permute(reshape(x))`` of such a merge →
  ``reshape(permute(x))`` (attention keeps batch and heads apart)
* patterns that would fuse two ops carrying ``shard.sharding`` leave them alone (the
  intermediate layout would be lost)

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
from spmdc.dialects.tensor import BroadcastOp, CastOp, MatmulOp, PermuteOp, ReshapeOp
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
        if not isinstance(inner, ReshapeOp) or _sharded(op, inner):
            return False
        new = Builder.before(op).create(ReshapeOp, [inner.operand(0)], result_types=[op.result.type],
                                        location=op.location)
        rewriter.replace_op(op, new.results)
        return True


class ComposePermute(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        inner = op.operand(0).defining_op() if isinstance(op, PermuteOp) else None
        if not isinstance(inner, PermuteOp) or _sharded(op, inner):
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


def _merged_leading(r: Operation) -> int:
    """How many leading dims ``r`` (a reshape) merges into its dim 0, keeping the rest; 0 if not that."""
    src, dst = r.operand(0).type, r.result.type
    for k in range(2, src.rank + 1):  # type: ignore[attr-defined]
        lead = 1
        for d in src.shape[:k]:  # type: ignore[attr-defined]
            lead *= d
        if (lead,) + tuple(src.shape[k:]) == tuple(dst.shape):  # type: ignore[attr-defined]
            return k
    return 0


class SinkPermuteThroughBatchMerge(RewritePattern):
    """``permute(reshape(x))`` merging x's leading dims, permute fixing dim 0 →
    ``reshape(permute(x))``: keeps batch and head dims apart (attention backward)."""

    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        r = op.operand(0).defining_op() if isinstance(op, PermuteOp) else None
        if not isinstance(r, ReshapeOp) or _sharded(op, r) or op.perm[0] != 0:
            return False
        k = _merged_leading(r)
        if not k:
            return False
        perm = list(range(k)) + [p + k - 1 for p in op.perm[1:]]
        b = Builder.before(op)
        p4 = b.create(PermuteOp, [r.operand(0)], {"perm": perm}, location=op.location)
        back = b.create(ReshapeOp, [p4.result], result_types=[op.result.type], location=op.location)
        rewriter.replace_op(op, back.results)
        return True


class HoistBatchMatmul(RewritePattern):
    """``matmul(reshape(a), reshape(b))`` where both merge the same leading batch dims →
    ``reshape(matmul(a, b))``: torch's ``bmm`` on flattened ``batch*heads`` becomes a
    batched matmul over both, so sharding can follow the heads dim::

        %a3 = tensor.reshape %a : (tensor<2x4x8x8xf32>) -> tensor<8x8x8xf32>
        %b3 = tensor.reshape %b : (tensor<2x4x8x8xf32>) -> tensor<8x8x8xf32>
        %m = tensor.matmul %a3, %b3 : tensor<8x8x8xf32>
        // becomes
        %m4 = tensor.matmul %a, %b : tensor<2x4x8x8xf32>
        %m = tensor.reshape %m4 : (tensor<2x4x8x8xf32>) -> tensor<8x8x8xf32>
    """

    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        if not isinstance(op, MatmulOp) or _sharded(op):
            return False
        ra, rb = (v.defining_op() for v in op.operands)
        if not isinstance(ra, ReshapeOp) or not isinstance(rb, ReshapeOp) or _sharded(ra, rb):
            return False
        ka, kb = _merged_leading(ra), _merged_leading(rb)
        a, b = ra.operand(0).type, rb.operand(0).type
        if not ka or ka != kb or a.shape[:ka] != b.shape[:kb] or op.result.type.rank != 3:  # type: ignore[attr-defined]
            return False
        builder = Builder.before(op)
        mm = builder.create(MatmulOp, [ra.operand(0), rb.operand(0)], location=op.location)
        back = builder.create(ReshapeOp, [mm.result], result_types=[op.result.type], location=op.location)
        rewriter.replace_op(op, back.results)
        return True


def _sharded(*ops: Operation | None) -> bool:
    """Before partition, a fused op would lose the intermediate layout: leave those alone."""
    return any(op is not None and "shard.sharding" in op.attributes for op in ops)


PATTERNS: list[RewritePattern] = [FoldIdentity(), ComposeReshape(), ComposePermute(), ComposeRedistribute(),
                                   SinkPermuteThroughBatchMerge(), HoistBatchMatmul()]


@dataclass
class Canonicalize(ModulePass):
    """Apply the canonicalization patterns greedily, then erase dead pure ops."""

    name: ClassVar[str] = "canonicalize"
    max_iterations: int = 10

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise ValueError(f"max-iterations must be at least 1, got {self.max_iterations}")

    def run(self, module: Operation) -> None:
        apply_patterns_greedily(module, PATTERNS, self.max_iterations)
        for region in module.regions:
            for block in region.blocks:
                erase_dead_ops(block)


PASS = Canonicalize
