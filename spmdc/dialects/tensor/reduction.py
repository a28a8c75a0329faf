"""Reductions over a list of dims.

    %0 = tensor.sum %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>
    %1 = tensor.max %x {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
    %2 = tensor.mean %x {dims = [0, 1], keepdim = false} : (tensor<8x16xf32>) -> tensor<f32>
    %3 = tensor.min %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>
    %4 = tensor.prod %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>
    %5 = tensor.argmax %x {dim = 1, keepdim = false} : (tensor<8x16xf32>) -> tensor<8xi64>
    %6 = tensor.histc %x {bins = 4, max = 1.0, min = -1.0} : (tensor<8x16xf32>) -> tensor<4xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder, reduction_rule, replicated_rule
from spmdc.dialects.tensor.base import TensorOp, check_dims, dtype_source, int_list, tensor_types
from spmdc.dialects.tensor.helpers import bool_attr, check_dim, int_attr, number_attr, require_float
from spmdc.ir.attributes import ArrayAttr, BoolAttr, FloatAttr, IntegerAttr
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


class MinOp(ReduceOp):
    """Minimum over ``dims`` (``torch.amin``; sharding a reduced dim leaves ``P(min)``).

    ``%r = tensor.min %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>``
    """

    name = "tensor.min"
    reduce_kind = "min"
    partial_kinds = frozenset({"min"})
    kernel = "none"   # no Triton row template computes a minimum
    torch_fn = "torch.amin"

    def kernel_role(self) -> str | None:
        return None


class ProdOp(ReduceOp):
    """Product over one dim or over all dims, in the operand's element type (the frontend casts
    first: torch multiplies integers as int64). The reduced dims need replication: no collective
    multiplies the pieces' products.

    ``%r = tensor.prod %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>``
    """

    name = "tensor.prod"
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        dims, rank = int_list(attrs, "dims"), operand_types[0].rank  # type: ignore[attr-defined]
        if len(dims) > 1 and sorted(dims) != list(range(rank)):
            raise InferError(f"reduces one dim or every dim, got dims {dims} of a rank-{rank} tensor")
        return out

    def kernel_role(self) -> str | None:
        return None

    def torch_expr(self, ins: Sequence[str]) -> str:
        dt = dtype_source(self.operand(0).tensor_type)
        t = self.operand(0).tensor_type
        if not self.dims:
            return f"{ins[0]}.clone()"
        if len(self.dims) == 1 and t.rank > 1:
            return f"torch.prod({ins[0]}, {literal(self.dims[0])}, keepdim={literal(self.keepdim)}, dtype={dt})"
        whole = f"torch.prod({ins[0]}, dtype={dt})"   # torch's product of every element (prod.default)
        return f"{whole}.reshape({literal([1] * t.rank)})" if self.keepdim else whole


class ArgReduceOp(TensorOp):
    """Base of ``argmax`` / ``argmin``: the ``i64`` index of the first extreme element along
    ``dim`` (a NaN counts as the extreme; ties give the smallest index); without ``dim`` the
    index into the flattened tensor (rank-0 result, or all ones with ``keepdim``).

    Sharding: ``dim`` needs replication (an index is not a reduction of the pieces' indices);
    the other dims are parallel. Without ``dim`` every dim needs replication.
    """

    num_operands = 1
    num_results = 1
    optional_attrs = {"dim": IntegerAttr, "keepdim": BoolAttr}
    kernel = "none"
    torch_fn: ClassVar[str] = ""

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        if a.element_type == "i1":
            raise InferError(f"expects a numeric tensor, got {a}")
        keep = bool_attr(attrs, "keepdim")
        if "dim" not in attrs:
            return [TensorType((1,) * a.rank if keep else (), "i64")]
        dim = int_attr(attrs, "dim")
        check_dim(dim, max(a.rank, 1))
        shape = [1 if i == dim else s for i, s in enumerate(a.shape)] if keep else \
            [s for i, s in enumerate(a.shape) if i != dim]
        return [TensorType(tuple(shape), "i64")]

    @property
    def dim(self) -> int | None:
        d = self.attr_value("dim")
        return None if d is None else int(d)  # type: ignore[arg-type]

    @property
    def keepdim(self) -> bool:
        return bool_attr(self.attributes, "keepdim")

    def sharding_rule(self) -> OpShardingRule:
        t = self.operand(0).tensor_type
        if self.dim is None or t.rank == 0:
            return replicated_rule([t], [self.result.tensor_type])
        return reduction_rule(t, [self.dim], self.keepdim, None, frozenset())

    def torch_expr(self, ins: Sequence[str]) -> str:
        dim = "" if self.dim is None else f"dim={literal(self.dim)}, "
        return f"{self.torch_fn}({ins[0]}, {dim}keepdim={literal(self.keepdim)})"


class ArgMaxOp(ArgReduceOp):
    """Index of the first maximum (``torch.argmax``; also ``max.dim``'s indices).

    ``%r = tensor.argmax %x {dim = 1, keepdim = false} : (tensor<8x16xf32>) -> tensor<8xi64>``
    """

    name = "tensor.argmax"
    torch_fn = "torch.argmax"


class ArgMinOp(ArgReduceOp):
    """Index of the first minimum (``torch.argmin``; also ``min.dim``'s indices).

    ``%r = tensor.argmin %x {dim = 0, keepdim = true} : (tensor<8x16xf32>) -> tensor<1x16xi64>``
    """

    name = "tensor.argmin"
    torch_fn = "torch.argmin"


# consecutive integers a float type holds exactly: a histogram count beyond it rounds
_EXACT_COUNTS = {"f64": 2 ** 53, "f32": 2 ** 24, "f16": 2 ** 11, "bf16": 2 ** 8}


class HistcOp(TensorOp):
    """``torch.histc``: counts of the elements in ``bins`` equal bins over ``[min, max]``
    (elements outside are not counted, ``max`` falls in the last bin); ``min == max`` takes
    the range from the data. Result: ``[bins]`` of the operand's float type.

    Sharding: with a given range each element's bin depends only on the element, so every
    dim of ``x`` is a sum (the pieces' histograms add up) while the counts stay exact in the
    element type; with the data's range (``min == max``) every dim needs replication. The bins
    stay whole.

    ``%r = tensor.histc %x {bins = 4, max = 1.0, min = -1.0} : (tensor<8x16xf32>) -> tensor<4xf32>``
    """

    name = "tensor.histc"
    num_operands = 1
    num_results = 1
    required_attrs = {"bins": IntegerAttr, "min": (IntegerAttr, FloatAttr), "max": (IntegerAttr, FloatAttr)}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        require_float(a, "tensor")
        bins = int_attr(attrs, "bins")
        if bins < 1:
            raise InferError(f"bins must be positive, got {bins}")
        lo, hi = number_attr(attrs, "min"), number_attr(attrs, "max")
        if lo is None or hi is None or lo > hi:
            raise InferError(f"needs min <= max, got [{lo}, {hi}]")
        return [TensorType((bins,), a.element_type)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        v = [literal(self.attr_value(k)) for k in ("bins", "min", "max")]
        return f"torch.histc({ins[0]}, bins={v[0]}, min={v[1]}, max={v[2]})"

    def sharding_rule(self) -> OpShardingRule:
        t = self.operand(0).tensor_type
        exact = t.num_elements <= _EXACT_COUNTS.get(t.element_type, 0)
        if self.attr_value("min") == self.attr_value("max") or not exact:
            return replicated_rule([t], [self.result.tensor_type])
        b = RuleBuilder()
        fs = [b.factor(s) for s in t.shape]
        bins = b.factor(self.result.tensor_type.shape[0])
        return b.build([fs], [[bins]], reductions=tuple((f, "sum") for f in fs), blocked=frozenset({bins}),
                       partial_kinds=frozenset())


OPS = [SumOp, MaxOp, MeanOp, AllOp, AnyOp, MinOp, ProdOp, ArgMaxOp, ArgMinOp, HistcOp]
