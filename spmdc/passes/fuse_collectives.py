"""``fuse-collectives`` (first version): fewer, cheaper collectives on per-rank programs.

* ``all_reduce(a) + all_reduce(b)`` (same mesh, axes and op ``sum``; each used only
  there) → ``all_reduce(a + b)``: a deferred reduction, one collective instead of two;
  likewise ``reduce_scatter(a) + reduce_scatter(b)`` → ``reduce_scatter(a + b)`` (a tied
  embedding's two gradient halves: the head's and the lookup's).
  Which ops allow it is read from their sharding rules: ops whose rule takes every
  operand ``P(sum)`` to a ``P(sum)`` result (``partial_all``: add, sub).
* ``all_reduce(a) + bias`` (a commutative such op) followed by another such op with an
  all-reduce: the bias joins the partial sum on the ranks at coordinate 0 of the reduced
  axes (``comm.keep_at_origin``: the rank reads its coordinates at run time, so the program
  is the same on every rank), and both reductions merge into one (a Partial bias add).
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

from spmdc.dialects.attrs import RANK_ATTR
from spmdc.dialects.comm import AllReduceOp, AllSliceOp, KeepAtOriginOp, ReduceScatterOp
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder, RewritePattern, Rewriter, apply_patterns_greedily
from spmdc.passes.pass_base import ModulePass


def _single_use_all_reduce(v, user: Operation, kind: type = AllReduceOp) -> Operation | None:
    op = v.defining_op()
    if isinstance(op, kind) and op.attr_value("op") == "sum" and len(v.uses) == 1 \
            and "shard.sharding" not in op.attributes and "sizes" not in op.attributes:
        return op
    return None


def linear_in_partial_sums(op: Operation | None, commutative: bool = False) -> bool:
    """Whether ``op``'s declared sharding rule passes ``P(sum)`` through when every operand is
    one (``sum_r f(x_r, y_r) = f(sum_r x_r, sum_r y_r)``), optionally also commutative."""
    declared = getattr(op, "sharding_rule", None)
    if op is None or declared is None or len(op.results) != 1 or (commutative and not op.has_trait("Commutative")):
        return False
    rule = declared()
    return rule.partial_all and "sum" in rule.partial_kinds


class DeferAllReduce(RewritePattern):
    """``f(reduce(a), reduce(b))`` → ``reduce(f(a, b))`` for ``f`` linear in partial sums, the
    reductions alike: all-reduces, or reduce-scatters of operands of one shape (``f`` then
    acts elementwise on the whole tensors, so scattering after it is the same)."""

    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        if len(op.operands) < 2 or not linear_in_partial_sums(op):
            return False
        for kind in (AllReduceOp, ReduceScatterOp):
            ars = [_single_use_all_reduce(v, op, kind) for v in op.operands]
            first = ars[0]
            if first is None or any(a is None or a.attributes != first.attributes for a in ars) \
                    or any(v.type != op.result.type for v in op.operands) \
                    or any(a.operand(0).type != first.operand(0).type for a in ars):  # type: ignore[union-attr]
                continue
            break
        else:
            return False
        builder = Builder.before(op)
        inner = builder.create(type(op), [a.operand(0) for a in ars], location=op.location)  # type: ignore[union-attr]
        fused = builder.create(kind, [inner.result], dict(first.attributes),
                               result_types=[op.result.type], location=op.location)
        rewriter.replace_op(op, fused.results)
        for a in ars:
            rewriter.erase_op(a)  # type: ignore[arg-type]
        return True


class DeferPastBiasAdd(RewritePattern):
    """``all_reduce(a) + b`` (``b`` replicated) feeding an add with another all_reduce →
    ``all_reduce(a + b')`` where ``b' = b`` on the ranks at coordinate 0 of the reduced
    axes and zeros elsewhere (``comm.keep_at_origin``, read at run time): the sum over
    ranks is unchanged, and the reduction can then merge with the other one."""

    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        if len(op.operands) != 2 or not linear_in_partial_sums(op, commutative=True):
            return False
        for i in (0, 1):
            ar = _single_use_all_reduce(op.operand(i), op)
            other = op.operand(1 - i)
            if ar is None or _single_use_all_reduce(other, op) is not None:
                continue
            if op.result.type != ar.result.type or len(op.result.uses) != 1:
                continue
            nxt = op.result.uses[0].owner
            if not linear_in_partial_sums(nxt) or not any(
                    _reduced_like(v, nxt, ar) for v in nxt.operands if v is not op.result):
                continue
            if not _per_rank(op):
                continue
            builder = Builder.before(op)
            where = {"mesh": ar.attributes["mesh"], "axes": ar.attributes["axes"]}
            kept = builder.create(KeepAtOriginOp, [other], where, location=op.location).result
            local = builder.create(type(op), [ar.operand(0), kept], location=op.location).result
            fused = builder.create(AllReduceOp, [local], dict(ar.attributes), location=op.location)
            rewriter.replace_op(op, fused.results)
            rewriter.erase_op(ar)
            return True
        return False


def _reduced_like(v, user: Operation, ar: AllReduceOp) -> bool:
    """``v`` is an all-reduce like ``ar`` (or such an all-reduce plus a bias): a merge partner."""
    r = _single_use_all_reduce(v, user)
    if r is not None:
        return r.attributes == ar.attributes
    op = v.defining_op()
    return linear_in_partial_sums(op, commutative=True) and len(v.uses) == 1 and any(
        (x := _single_use_all_reduce(w, op)) is not None and x.attributes == ar.attributes for w in op.operands)


def _per_rank(op: Operation) -> bool:
    """Whether ``op`` is in a per-rank program (after ``partition``)."""
    from spmdc.dialects.func import FuncOp

    func = op.parent_of_type(FuncOp)
    return func is not None and RANK_ATTR in func.attributes


class AllReduceSliceToReduceScatter(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        if not isinstance(op, AllSliceOp) or "shard.sharding" in op.attributes:
            return False
        ar = op.operand(0).defining_op()
        if not isinstance(ar, AllReduceOp) or len(ar.result.uses) != 1 or list(ar.axes) != [op.attr_value("axis")] \
                or ar.attr_value("mesh") != op.attr_value("mesh"):
            return False
        attrs = {"mesh": op.attributes["mesh"], "axis": op.attributes["axis"], "dim": op.attributes["dim"],
                 "op": ar.attributes["op"]}
        if "sizes" in op.attributes:   # a ragged slice scatters the same sizes
            attrs["sizes"] = op.attributes["sizes"]
        rs = Builder.before(op).create(ReduceScatterOp, [ar.operand(0)], attrs, result_types=[op.result.type],
                                       location=op.location)
        rewriter.replace_op(op, rs.results)
        rewriter.erase_op(ar)
        return True


@dataclass
class FuseCollectives(ModulePass):
    """Defer and merge all-reduces (also past bias adds); all_reduce + all_slice → reduce_scatter."""

    name: ClassVar[str] = "fuse-collectives"

    def run(self, module: Operation) -> None:
        apply_patterns_greedily(module, [DeferAllReduce(), DeferPastBiasAdd(), AllReduceSliceToReduceScatter()])


PASS = FuseCollectives
