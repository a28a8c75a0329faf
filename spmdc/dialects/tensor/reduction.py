"""Reductions over a list of dims.

    %0 = tensor.sum %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>
    %1 = tensor.max %x {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
    %2 = tensor.mean %x {dims = [0, 1], keepdim = false} : (tensor<8x16xf32>) -> tensor<f32>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, reduction_rule
from spmdc.dialects.tensor.base import TensorOp, check_dims, dtype_source, int_list, tensor_types
from spmdc.ir.attributes import ArrayAttr, BoolAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


class ReduceOp(TensorOp):
    """Base: reduce ``dims`` (sorted, non-negative); keep them as size 1 if ``keepdim``.

    Sharding: a reduced dim is a reduction factor of kind ``reduce_kind`` (sharding it leaves
    ``P(kind)``); ``None`` means the reduced dims need replication. ``partial_kinds``: the
    pending reductions that may pass through unreduced (a sum of partial sums).
    """

    num_operands = 1
    num_results = 1
    required_attrs = {"dims": ArrayAttr}
    optional_attrs = {"keepdim": BoolAttr}
    kernel = "row"
    reduce_kind: ClassVar[str | None] = None
    partial_kinds: ClassVar[frozenset[str]] = frozenset()
    torch_fn: ClassVar[str] = ""

    def sharding_rule(self) -> OpShardingRule:
        r = reduction_rule(self.operand(0).tensor_type, self.dims, self.keepdim, self.reduce_kind, self.partial_kinds)
        if self.reduce_kind == "avg":  # a mean of unequal pieces is not the mean: only even splits
            evens = frozenset(f for d, f in enumerate(r.operands[0]) if d in set(self.dims) and f is not None)
            r = OpShardingRule(r.operands, r.results, r.factor_sizes, r.reductions, r.blocked,
                               r.even_only | evens, r.partial_all, r.partial_one, r.partial_kinds)
        return r

    def kernel_role(self) -> str | None:
        return self._row_role(self.dims)

    def torch_expr(self, ins: Sequence[str]) -> str:
        if not self.dims:  # nothing reduced (torch would reduce every dim)
            return f"{ins[0]}.clone()"
        return f"{self.torch_fn}({ins[0]}, dim={literal(self.dims)}, keepdim={literal(self.keepdim)})"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        dims = int_list(attrs, "dims")
        check_dims(dims, a.rank, "reduction dim")
        keep = attrs.get("keepdim")
        keepdim = bool(keep.value) if isinstance(keep, BoolAttr) else False
        shape = [1 if i in dims else s for i, s in enumerate(a.shape)] if keepdim else \
            [s for i, s in enumerate(a.shape) if i not in dims]
        return [TensorType(tuple(shape), a.element_type)]

    @property
    def dims(self) -> list[int]:
        return [d.value for d in self.attributes["dims"]]  # type: ignore[attr-defined]

    @property
    def keepdim(self) -> bool:
        k = self.attributes.get("keepdim")
        return bool(k.value) if isinstance(k, BoolAttr) else False


class SumOp(ReduceOp):
    """Sum over ``dims``: ``%r = tensor.sum %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>``."""

    name = "tensor.sum"
    reduce_kind = "sum"
    partial_kinds = frozenset({"sum"})
    row_kernel = "sum"

    def torch_expr(self, ins: Sequence[str]) -> str:
        if not self.dims:
            return f"{ins[0]}.clone()"
        # keep the element type (torch would promote integer sums to int64)
        return (f"torch.sum({ins[0]}, dim={literal(self.dims)}, keepdim={literal(self.keepdim)}, "
                f"dtype={dtype_source(self.operand(0).tensor_type)})")


class MaxOp(ReduceOp):
    """Maximum over ``dims``.

    ``%r = tensor.max %x {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>``
    """

    name = "tensor.max"
    reduce_kind = "max"
    partial_kinds = frozenset({"max"})
    row_kernel = "max"
    torch_fn = "torch.amax"


class MeanOp(ReduceOp):
    """Mean over ``dims`` (floating point only; sharded only in even pieces).

    ``%r = tensor.mean %x {dims = [0, 1], keepdim = false} : (tensor<8x16xf32>) -> tensor<f32>``
    """

    name = "tensor.mean"
    reduce_kind = "avg"
    partial_kinds = frozenset({"sum"})
    row_kernel = "mean"
    torch_fn = "torch.mean"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        if not operand_types[0].is_float:  # type: ignore[attr-defined]
            raise InferError(f"expects a floating-point tensor, got {operand_types[0]}")
        return out


class BoolReduceOp(ReduceOp):
    """Base of ``all`` / ``any``: an ``i1`` tensor reduced over ``dims`` (the reduced dims need
    replication: a logical and/or of pieces is not a collective spmdc issues)."""

    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        if operand_types[0].element_type != "i1":  # type: ignore[attr-defined]
            raise InferError(f"expects an i1 tensor, got {operand_types[0]}")
        return out

    def kernel_role(self) -> str | None:
        return None


class AllOp(BoolReduceOp):
    """True where every element over ``dims`` is (attention masks' "is anything masked").

    ``%r = tensor.all %m {dims = [1], keepdim = false} : (tensor<2x8xi1>) -> tensor<2xi1>``
    """

    name = "tensor.all"
    torch_fn = "torch.all"


class AnyOp(BoolReduceOp):
    """True where some element over ``dims`` is.

    ``%r = tensor.any %m {dims = [1], keepdim = true} : (tensor<2x8xi1>) -> tensor<2x1xi1>``
    """

    name = "tensor.any"
    torch_fn = "torch.any"


OPS = [SumOp, MaxOp, MeanOp, AllOp, AnyOp]
