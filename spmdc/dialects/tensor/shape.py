"""Ops that move data without arithmetic: permute, reshape, broadcast, diagonal, constant, iota.

    %0 = tensor.permute %x {perm = [1, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>
    %1 = tensor.reshape %0 : (tensor<16x8xf32>) -> tensor<2x8x8xf32>
    %2 = tensor.broadcast %b : (tensor<16xf32>) -> tensor<8x16xf32>
    %3 = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
    %4 = tensor.diagonal %m {dim1 = 0, dim2 = 1, offset = 0} : (tensor<4x4xf32>) -> tensor<4xf32>
    %5 = tensor.diagonal_scatter %z, %4 {dim1 = 0, dim2 = 1, offset = 0}
           : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
    %6 = tensor.iota {start = 0, step = 1} : tensor<1048576xi64>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdc.dialects.pyexpr import literal, shape_literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder, broadcast_rule, permute_rule, reshape_rule
from spmdc.dialects.tensor.base import (
    TensorOp,
    check_dims,
    dtype_source,
    int_list,
    same_element_type,
    tensor_types,
    torch_dtype,
    torch_module,
)
from spmdc.dialects.tensor.helpers import int_attr
from spmdc.ir.attributes import ArrayAttr, DenseAttr, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import INT_TYPES, TensorType

INLINE_CONSTANT_MAX = 16   # non-splat constants up to this many elements are written into generated code


class PermuteOp(TensorOp):
    """Reorder dims: result dim ``i`` is operand dim ``perm[i]``.

    ``%r = tensor.permute %x {perm = [1, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>``
    """

    name = "tensor.permute"
    num_operands = 1
    num_results = 1
    required_attrs = {"perm": ArrayAttr}
    traits = TensorOp.traits | {"View", "StridedView"}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        perm = int_list(attrs, "perm")
        if len(perm) != a.rank:
            raise InferError(f"perm {perm} has {len(perm)} entries for a rank-{a.rank} tensor")
        check_dims(perm, a.rank, "perm entry")
        return [TensorType(tuple(a.shape[p] for p in perm), a.element_type)]

    @property
    def perm(self) -> list[int]:
        return [p.value for p in self.attributes["perm"]]  # type: ignore[attr-defined]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"{ins[0]}.permute({literal(tuple(self.perm))})"

    def sharding_rule(self) -> OpShardingRule:
        return permute_rule(self.operand(0).tensor_type, self.perm)


class ReshapeOp(TensorOp):
    """Same elements in row-major order, new shape (given by the result type).

    ``%r = tensor.reshape %x : (tensor<16x8xf32>) -> tensor<2x8x8xf32>``
    """

    name = "tensor.reshape"
    num_operands = 1
    num_results = 1
    traits = TensorOp.traits | {"View"}   # a copy when its operand is a strided view
    kernel = "none"

    def verify_(self) -> None:
        src, dst = self.operand(0).type, self.result.type
        if not isinstance(src, TensorType) or not isinstance(dst, TensorType):
            raise self.emit_error("operates on tensors only")
        if src.element_type != dst.element_type:
            raise self.emit_error(f"element types differ: {src.element_type} vs {dst.element_type}")
        if src.num_elements != dst.num_elements:
            raise self.emit_error(f"cannot reshape {src} ({src.num_elements} elements) to {dst} "
                                  f"({dst.num_elements} elements)")

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"{ins[0]}.reshape({shape_literal(self.result.tensor_type.shape)})"

    def sharding_rule(self) -> OpShardingRule:
        return reshape_rule(self.operand(0).tensor_type, self.result.tensor_type)


class BroadcastOp(TensorOp):
    """Broadcast to the result shape with torch's rules (trailing dims aligned).

    ``%r = tensor.broadcast %b : (tensor<16xf32>) -> tensor<8x16xf32>``
    """

    name = "tensor.broadcast"
    num_operands = 1
    num_results = 1
    traits = TensorOp.traits | {"View", "StridedView"}
    kernel = "none"

    def verify_(self) -> None:
        src, dst = self.operand(0).type, self.result.type
        if not isinstance(src, TensorType) or not isinstance(dst, TensorType):
            raise self.emit_error("operates on tensors only")
        if src.element_type != dst.element_type:
            raise self.emit_error(f"element types differ: {src.element_type} vs {dst.element_type}")
        ok = src.rank <= dst.rank and all(
            s in (1, d) for s, d in zip(reversed(src.shape), reversed(dst.shape)))
        if not ok:
            raise self.emit_error(f"cannot broadcast {src} to {dst}")

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"{ins[0]}.expand({shape_literal(self.result.tensor_type.shape)})"

    def sharding_rule(self) -> OpShardingRule:
        return broadcast_rule(self.operand(0).tensor_type, self.result.tensor_type)


class ConstantOp(TensorOp):
    """A dense constant; its type is the value's type:
    ``%c = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>``.

    Splats are the same on every rank, so any layout is free (a zero splat may also be
    ``P(sum)``); other constants stay whole. Generated code writes splats and small
    constants inline; larger ones are materialised from the IR when the program loads.
    """

    name = "tensor.constant"
    num_operands = 0
    num_results = 1
    required_attrs = {"value": DenseAttr}
    kernel = "none"   # splats are cloned into kernel regions as scalars by fuse-kernels

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        v = attrs.get("value")
        if not isinstance(v, DenseAttr):
            raise InferError("attribute 'value' must be a dense<...> attribute")
        return [v.type]

    @property
    def value(self) -> DenseAttr:
        return self.attributes["value"]  # type: ignore[return-value]

    @property
    def is_splat(self) -> bool:
        return len(self.value.values) == 1

    def torch_expr(self, ins: Sequence[str]) -> str | None:
        v = self.value
        t, dt = v.type, dtype_source(v.type)
        if t.rank == 0:
            return f"torch.tensor({literal(v.values[0])}, dtype={dt})"
        if self.is_splat:
            return f"torch.full({shape_literal(t.shape)}, {literal(v.values[0])}, dtype={dt})"
        if t.num_elements <= INLINE_CONSTANT_MAX:
            return f"torch.tensor({literal(list(v.flat_values()))}, dtype={dt}).reshape({shape_literal(t.shape)})"
        return None

    def reference(self, *args: Any, comm: Any = None) -> Any:
        v = self.value
        torch = torch_module()
        return torch.tensor(v.flat_values(), dtype=torch_dtype(v.type.element_type)).reshape(v.type.shape)

    def sharding_rule(self) -> OpShardingRule:
        t = self.result.tensor_type
        b = RuleBuilder()
        fs = [b.factor(s) for s in t.shape]
        zero = self.is_splat and self.value.values[0] == 0
        return b.build([], [fs], blocked=frozenset() if self.is_splat else frozenset(fs),
                       partial_results=frozenset({"sum"}) if zero else frozenset())


class IotaOp(TensorOp):
    """``start, start + step, start + 2·step, ...`` as a 1-D integer tensor (``torch.arange`` of
    integers): a dense constant of its values would be that many numbers in the IR, and a MoE
    router's ``arange`` over a real-size batch's token assignments is millions of them.

    ``%r = tensor.iota {start = 0, step = 1} : tensor<1048576xi64>``

    Sharding: replicated, as a dense constant (each element's value is its position).
    """

    name = "tensor.iota"
    num_operands = 0
    num_results = 1
    required_attrs = {"start": IntegerAttr, "step": IntegerAttr}
    kernel = "none"

    def verify_(self) -> None:
        t = self.result.type
        if not isinstance(t, TensorType) or t.rank != 1 or t.element_type not in INT_TYPES or t.element_type == "i1":
            raise self.emit_error(f"result must be a rank-1 integer tensor, got {t}")

    @property
    def progression(self) -> range:
        """The values, as a ``range``."""
        start, step = int(self.attr_value("start")), int(self.attr_value("step"))
        return range(start, start + step * self.result.tensor_type.shape[0], step)

    def torch_expr(self, ins: Sequence[str]) -> str:
        r = self.progression
        return f"torch.arange({literal(r.start)}, {literal(r.stop)}, {literal(r.step)}, " \
               f"dtype={dtype_source(self.result.tensor_type)})"

    def reference(self, *args: Any, comm: Any = None) -> Any:
        r = self.progression
        return torch_module().arange(r.start, r.stop, r.step, dtype=torch_dtype(self.result.tensor_type.element_type))

    def sharding_rule(self) -> OpShardingRule:
        b = RuleBuilder()
        n = b.factor(self.result.tensor_type.shape[0])
        return b.build([], [[n]], blocked=frozenset({n}))


_DIAGONAL_ATTRS = {"offset": IntegerAttr, "dim1": IntegerAttr, "dim2": IntegerAttr}


def diagonal_shape(t: TensorType, attrs) -> tuple[int, ...]:
    """``torch.diagonal``'s result shape: ``t``'s dims without ``dim1``, ``dim2``, then the diagonal's
    length ``max(0, min(n1 + min(offset, 0), n2 - max(offset, 0)))``."""
    offset, d1, d2 = int_attr(attrs, "offset"), int_attr(attrs, "dim1"), int_attr(attrs, "dim2")
    check_dims([d1, d2], t.rank, "diagonal dim")
    n1, n2 = t.shape[d1], t.shape[d2]
    length = max(0, min(n1 + min(offset, 0), n2 - max(offset, 0)))
    return tuple(s for i, s in enumerate(t.shape) if i not in (d1, d2)) + (length,)


class _DiagonalBase(TensorOp):
    required_attrs = _DIAGONAL_ATTRS
    kernel = "none"

    def diagonal_attrs(self) -> tuple[int, int, int]:
        return tuple(int(self.attr_value(k)) for k in ("offset", "dim1", "dim2"))  # type: ignore[return-value]

    def _factors(self) -> tuple[RuleBuilder, list[int], list[int], frozenset[int]]:
        """The full tensor's factors, the diagonal's (other dims, then its length) and the blocked
        ones: both diagonal dims and the length (an element of the diagonal reads both dims)."""
        _, d1, d2 = self.diagonal_attrs()
        full = self.operand(0).tensor_type
        b = RuleBuilder()
        fs = [b.factor(s) for s in full.shape]
        length = b.factor(diagonal_shape(full, self.attributes)[-1])
        diag = [f for i, f in enumerate(fs) if i not in (d1, d2)] + [length]
        return b, fs, diag, frozenset({fs[d1], fs[d2], length})


class DiagonalOp(_DiagonalBase):
    """The diagonal ``x[..., i, ..., i + offset, ...]`` of dims ``dim1``, ``dim2`` (``torch.diagonal``):
    the other dims in order, then the diagonal (offset > 0 above the main diagonal, < 0 below).

    ``%r = tensor.diagonal %x {dim1 = 0, dim2 = 2, offset = 1} : (tensor<3x2x4xf32>) -> tensor<2x3xf32>``

    Sharding: ``([i, j, k]) -> ([j, l])`` for ``dim1 = 0, dim2 = 2``: the other dims are parallel; the
    two diagonal dims and the diagonal need replication. Linear: a ``P(sum)`` operand stays ``P(sum)``.
    """

    name = "tensor.diagonal"
    num_operands = 1
    num_results = 1
    traits = TensorOp.traits | {"View", "StridedView"}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        return [a.with_shape(diagonal_shape(a, attrs))]

    def torch_expr(self, ins: Sequence[str]) -> str:
        offset, d1, d2 = self.diagonal_attrs()
        return f"torch.diagonal({ins[0]}, {literal(offset)}, {literal(d1)}, {literal(d2)})"

    def sharding_rule(self) -> OpShardingRule:
        b, fs, diag, blocked = self._factors()
        return b.build([fs], [diag], blocked=blocked, partial_one=(0,))


class DiagonalScatterOp(_DiagonalBase):
    """``x`` with the diagonal of ``dim1``, ``dim2`` (see ``tensor.diagonal``) replaced by ``src``
    (``torch.diagonal_scatter``; the backward of a diagonal writes into zeros).

    ``%r = tensor.diagonal_scatter %x, %s {dim1 = 0, dim2 = 1, offset = -1}
           : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>``

    Sharding: ``([i, j, k], [j, l]) -> ([i, j, k])`` for ``dim1 = 0, dim2 = 2``: the other dims are
    parallel, the diagonal dims need replication. Linear in ``(x, src)`` together: both ``P(sum)``
    give ``P(sum)``.
    """

    name = "tensor.diagonal_scatter"
    num_operands = 2
    num_results = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        x, src = tensor_types(operand_types, cls.name)
        same_element_type([x, src])
        want = diagonal_shape(x, attrs)
        if src.shape != want:
            raise InferError(f"source {src} does not match the diagonal's shape {list(want)}")
        return [x]

    def torch_expr(self, ins: Sequence[str]) -> str:
        offset, d1, d2 = self.diagonal_attrs()
        return f"torch.diagonal_scatter({ins[0]}, {ins[1]}, {literal(offset)}, {literal(d1)}, {literal(d2)})"

    def sharding_rule(self) -> OpShardingRule:
        b, fs, diag, blocked = self._factors()
        return b.build([fs, diag], [fs], blocked=blocked, partial_group=(0, 1))


OPS = [PermuteOp, ReshapeOp, BroadcastOp, ConstantOp, IotaOp, DiagonalOp, DiagonalScatterOp]
