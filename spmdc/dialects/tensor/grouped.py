"""Grouped matrix products (mixture-of-experts): rows in consecutive groups, one weight per group.

``offs`` (``E``, i32) holds the groups' cumulative ends (``torch._grouped_mm``'s ``offs``): group
``g`` is rows ``offs[g-1]:offs[g]`` (``offs[-1]`` read as 0), possibly empty; ``offs`` must be
non-decreasing with ``offs[E-1] <= S``. Rows at or past ``offs[E-1]`` belong to no group: their
result rows are zeros, and they add nothing to a weight gradient (``torch._grouped_mm`` leaves them
unwritten on CPU; spmdc defines them so that padded token buffers stay deterministic)::

    %y = tensor.grouped_matmul %x, %w, %offs
           : (tensor<16x8xf32>, tensor<4x8x32xf32>, tensor<4xi32>) -> tensor<16x32xf32>
    %dw = tensor.grouped_matmul_wgrad %x, %dy, %offs
           : (tensor<16x8xf32>, tensor<16x32xf32>, tensor<4xi32>) -> tensor<4x8x32xf32>

The input gradient is ``grouped_matmul %dy, %w, %offs {transpose_w = true}`` (``dy_g @ w[g]^T``).

**Explicit bounds (expert parallelism).** With four operands, ``%x, %w, %starts, %ends``, group
``g`` is rows ``starts[g]:ends[g]`` (the frontend emits this form: ``starts`` are ``offs`` shifted
by one, ``ends`` are ``offs``). Then the expert factor ``e`` (``w``'s dim 0, ``starts``, ``ends``)
may be sharded: a rank holding experts ``[e0, e1)`` computes the rows of its groups and zeros
elsewhere, so the ranks' results sum to the whole — ``e`` is a ``sum`` reduction of
``grouped_matmul`` (``P(sum)`` over the expert axis: Megatron's all-gather token dispatcher)
and parallel in ``grouped_matmul_wgrad`` (each rank the gradients of its own experts)::

    %y = tensor.grouped_matmul %x, %w, %starts, %ends
           : (tensor<16x8xf32>, tensor<4x8x32xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<16x32xf32>
The torch implementation is a loop over the groups (``offs`` read on the host once), each group one
``torch.matmul``; ``torch._grouped_mm`` is not used: on CPU it leaves rows past ``offs[-1]``
uninitialised, needs 16-byte aligned strides and has no f64.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TensorOp, same_element_type, tensor_types
from spmdc.dialects.tensor.helpers import bool_attr, require_float
from spmdc.ir.attributes import BoolAttr, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


def _check_offs(offs: TensorType, groups: int | None = None) -> None:
    if offs.rank != 1 or offs.element_type != "i32" or offs.shape[0] < 1:
        raise InferError(f"offs must be a non-empty rank-1 i32 tensor, got {offs}")
    if groups is not None and offs.shape[0] != groups:
        raise InferError(f"offs has {offs.shape[0]} entries for {groups} groups")


def _groups(offs: str) -> str:
    """Python source: ``(g, start, end)`` of every group (``offs`` read on the host once)."""
    return f"for o in [[0] + {offs}.tolist()] for g in range(len(o) - 1) for a, b in [(o[g], o[g + 1])]"


def _bounded(starts: str, ends: str) -> str:
    """Python source: ``(g, start, end)`` of every group with explicit bounds."""
    return f"for g, (a, b) in enumerate(zip({starts}.tolist(), {ends}.tolist()))"


def _check_bounds(types: Sequence[TensorType], groups: int) -> None:
    for t in types:
        _check_offs(t, groups)


def _slot_rows(op) -> int:
    """``slot_rows`` (0: none): ``x``'s rows are slots of that many rows (``tensor.expert_dispatch``'s
    buffer), slot ``q`` holding experts ``[q*E/slots, (q+1)*E/slots)``; ``starts``/``ends`` are rows
    of the whole buffer, and ``x`` starts at the slot of ``starts[0]`` (the whole buffer, or a rank's
    slots of it)."""
    a = op.attributes.get("slot_rows")
    return int(a.value) if isinstance(a, IntegerAttr) else 0


def _slot_rule(b: RuleBuilder, operands, results, rows: int, experts: int, slot_rows: int, **kw) -> OpShardingRule:
    """The slot form's rule: one factor ``q`` (the slots) for the rows of ``x`` (and ``dy``/the result)
    and the experts of ``w``, ``starts`` and ``ends``: sharded, each rank computes its slots' experts
    on its slots' rows, nothing else is sharded with them."""
    slots = rows // slot_rows
    q = b.factor(slots)
    s, e = operands[0][0], operands[2][0]
    swap = {s: q, e: q}
    ops = [[swap.get(f, f) for f in dims] for dims in operands]
    res = [[swap.get(f, f) for f in dims] for dims in results]
    scales = []
    for is_res, groups in ((False, ops), (True, res)):
        for i, dims in enumerate(groups):
            if dims and dims[0] == q:
                src = (results if is_res else operands)[i][0]
                scales.append((is_res, i, 0, slot_rows if src == s else experts // slots))
    return b.build(ops, res, blocked=frozenset({s, e}), even_only=frozenset({q}), scales=tuple(scales), **kw)


class GroupedMatmulOp(TensorOp):
    """``r[offs[g-1]:offs[g]] = x[offs[g-1]:offs[g]] @ w[g]`` for each group ``g``; rows past
    ``offs[-1]`` are zeros. ``x`` (S, K), ``w`` (E, K, N) — or (E, N, K) with ``transpose_w``,
    then ``x_g @ w[g]^T`` — ``offs`` (E,) i32 cumulative group ends; result (S, N).

    ``%r = tensor.grouped_matmul %x, %w, %offs : (tensor<16x8xf32>, tensor<4x8x32xf32>, tensor<4xi32>)
    -> tensor<16x32xf32>``

    ``%dx = tensor.grouped_matmul %dy, %w, %offs {transpose_w = true}
    : (tensor<16x32xf32>, tensor<4x8x32xf32>, tensor<4xi32>) -> tensor<16x8xf32>``

    Sharding: ``([s, k], [e, k, n], [e]) -> ([s, n])`` (``[e, n, k]`` transposed); ``n`` parallel
    (each rank's columns of ``w``: tensor parallelism inside the experts), ``k`` a sum (sharded in
    ``x`` and ``w`` it leaves ``P(sum)``); ``s`` needs replication (``offs`` index global rows) and so
    does ``e`` (expert parallelism is a dispatch, not a layout of this op). Linear in ``x`` and in
    ``w``: one ``P(sum)`` operand with the other replicated gives ``P(sum)``.
    """

    name = "tensor.grouped_matmul"
    num_operands = None   # x, w, offs — or x, w, starts, ends
    num_results = 1
    optional_attrs = {"transpose_w": BoolAttr, "slot_rows": IntegerAttr}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ts = tensor_types(operand_types, cls.name)
        if len(ts) not in (3, 4):
            raise InferError(f"expects x, w, offs or x, w, starts, ends; got {len(ts)} operands")
        x, w = ts[0], ts[1]
        if x.rank != 2 or w.rank != 3:
            raise InferError(f"expects x of rank 2 and w of rank 3, got {x} and {w}")
        elt = same_element_type([x, w])
        require_float(x, "x")
        _check_bounds(ts[2:], w.shape[0])
        k, n = (w.shape[2], w.shape[1]) if bool_attr(attrs, "transpose_w") else (w.shape[1], w.shape[2])
        if x.shape[1] != k:
            raise InferError(f"contracting dims differ: x has {x.shape[1]} columns, w's groups {k} rows")
        return [TensorType((x.shape[0], n), elt)]

    @property
    def transpose_w(self) -> bool:
        return bool_attr(self.attributes, "transpose_w")

    def torch_expr(self, ins: Sequence[str]) -> str:
        x, w = ins[0], ins[1]
        if _slot_rows(self):
            return (f"spmdc_ops.grouped_matmul_slots({x}, {w}, {ins[2]}, {ins[3]}, {_slot_rows(self)}, "
                    f"{self.transpose_w})")
        wg = f"{w}[g].mT" if self.transpose_w else f"{w}[g]"
        n = f"{w}.shape[{1 if self.transpose_w else 2}]"
        if len(ins) == 4:   # groups starts[g]:ends[g], consecutive; zeros before the first and after the last
            starts, ends = ins[2], ins[3]
            head = f"{x}.new_zeros(int({starts}[0]), {n})"
            rest = f"{x}.new_zeros({x}.shape[0] - int({ends}[-1]), {n})"
            pieces = f"[{head}] + [torch.matmul({x}[a:b], {wg}) {_bounded(starts, ends)}] + [{rest}]"
        else:
            offs = ins[2]
            rest = f"{x}.new_zeros({x}.shape[0] - int({offs}[-1]), {n})"
            pieces = f"[torch.matmul({x}[a:b], {wg}) {_groups(offs)}] + [{rest}]"
        # the reshape fails (rather than mislabel rows) when the groups are not consecutive
        return f"torch.cat({pieces}).reshape({x}.shape[0], {n})"

    def sharding_rule(self) -> OpShardingRule:
        x, w = self.operand(0).tensor_type, self.operand(1).tensor_type
        b = RuleBuilder()
        s, k, n, e = b.factor(x.shape[0]), b.factor(x.shape[1]), b.factor(self.result.tensor_type.shape[1]), \
            b.factor(w.shape[0])
        wdims = [e, n, k] if self.transpose_w else [e, k, n]
        if _slot_rows(self):
            return _slot_rule(b, [[s, k], wdims, [e], [e]], [[s, n]], x.shape[0], w.shape[0], _slot_rows(self),
                              reductions=((k, "sum"),), partial_one=(0, 1))
        if len(self.operands) == 4:   # a rank's experts give its groups' rows, zeros elsewhere: a sum over e
            return b.build([[s, k], wdims, [e], [e]], [[s, n]], reductions=((k, "sum"), (e, "sum")),
                           blocked=frozenset({s}), partial_one=(0, 1))
        return b.build([[s, k], wdims, [e]], [[s, n]], reductions=((k, "sum"),), blocked=frozenset({s, e}),
                       partial_one=(0, 1))


class GroupedMatmulWgradOp(TensorOp):
    """The weight gradient of ``tensor.grouped_matmul``: ``r[g] = x_g^T @ dy_g`` over the rows
    ``offs[g-1]:offs[g]`` of group ``g`` (zeros for an empty group; rows past ``offs[-1]`` add
    nothing). ``x`` (S, K), ``dy`` (S, N), ``offs`` (E,) i32; result (E, K, N).

    ``%dw = tensor.grouped_matmul_wgrad %x, %dy, %offs
    : (tensor<16x8xf32>, tensor<16x32xf32>, tensor<4xi32>) -> tensor<4x8x32xf32>``

    Sharding: ``([s, k], [s, n], [e]) -> ([e, k, n])``: ``k`` and ``n`` parallel; ``s`` needs
    replication (``offs`` index global rows; a rank's rows would be a sum, but only with its own
    offsets) and so does ``e``. Linear in ``x`` and in ``dy``.
    """

    name = "tensor.grouped_matmul_wgrad"
    num_operands = None   # x, dy, offs — or x, dy, starts, ends
    num_results = 1
    optional_attrs = {"slot_rows": IntegerAttr}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ts = tensor_types(operand_types, cls.name)
        if len(ts) not in (3, 4):
            raise InferError(f"expects x, dy, offs or x, dy, starts, ends; got {len(ts)} operands")
        x, dy, offs = ts[0], ts[1], ts[2]
        if len(ts) == 4:
            _check_bounds(ts[2:], offs.shape[0])
        if x.rank != 2 or dy.rank != 2:
            raise InferError(f"expects x and dy of rank 2, got {x} and {dy}")
        elt = same_element_type([x, dy])
        require_float(x, "x")
        if x.shape[0] != dy.shape[0]:
            raise InferError(f"x has {x.shape[0]} rows, dy {dy.shape[0]}")
        _check_offs(offs)
        return [TensorType((offs.shape[0], x.shape[1], dy.shape[1]), elt)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        x, dy = ins[0], ins[1]
        if _slot_rows(self):
            return f"spmdc_ops.grouped_matmul_wgrad_slots({x}, {dy}, {ins[2]}, {ins[3]}, {_slot_rows(self)})"
        groups = _bounded(ins[2], ins[3]) if len(ins) == 4 else _groups(ins[2])
        return f"torch.stack([torch.matmul({x}[a:b].mT, {dy}[a:b]) {groups}])"

    def sharding_rule(self) -> OpShardingRule:
        x, dy = self.operand(0).tensor_type, self.operand(1).tensor_type
        b = RuleBuilder()
        s, k, n = b.factor(x.shape[0]), b.factor(x.shape[1]), b.factor(dy.shape[1])
        e = b.factor(self.operand(2).tensor_type.shape[0])
        if _slot_rows(self):
            return _slot_rule(b, [[s, k], [s, n], [e], [e]], [[e, k, n]], x.shape[0],
                              self.operand(2).tensor_type.shape[0], _slot_rows(self), partial_one=(0, 1))
        if len(self.operands) == 4:   # each rank the gradients of its own experts
            return b.build([[s, k], [s, n], [e], [e]], [[e, k, n]], blocked=frozenset({s}), partial_one=(0, 1))
        return b.build([[s, k], [s, n], [e]], [[e, k, n]], blocked=frozenset({s, e}), partial_one=(0, 1))


OPS = [GroupedMatmulOp, GroupedMatmulWgradOp]
