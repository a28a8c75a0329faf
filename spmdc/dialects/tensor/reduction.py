"""Reductions over a list of dims.

    %0 = tensor.sum %x {dims = [1], keepdim = false} : (tensor<8x16xf32>) -> tensor<8xf32>
    %1 = tensor.max %x {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
    %2 = tensor.mean %x {dims = [0, 1], keepdim = false} : (tensor<8x16xf32>) -> tensor<f32>
"""

from __future__ import annotations

from typing import Any

from spmdc.ir.attributes import ArrayAttr, BoolAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType
from spmdc.dialects.tensor.base import TensorOp, check_dims, int_list, tensor_types, torch_module


class ReduceOp(TensorOp):
    """Base: reduce ``dims`` (sorted, non-negative); keep them as size 1 if ``keepdim``."""

    num_operands = 1
    num_results = 1
    required_attrs = {"dims": ArrayAttr}
    optional_attrs = {"keepdim": BoolAttr}

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
    """Sum over ``dims``."""

    name = "tensor.sum"

    def reference(self, a: Any) -> Any:
        if not self.dims:
            return a.clone()
        # keep the element type (torch would promote integer sums to int64)
        return torch_module().sum(a, dim=self.dims, keepdim=self.keepdim, dtype=a.dtype)


class MaxOp(ReduceOp):
    """Maximum over ``dims``."""

    name = "tensor.max"

    def reference(self, a: Any) -> Any:
        if not self.dims:
            return a.clone()
        return torch_module().amax(a, dim=self.dims, keepdim=self.keepdim)


class MeanOp(ReduceOp):
    """Mean over ``dims`` (floating point only)."""

    name = "tensor.mean"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        if not operand_types[0].is_float:  # type: ignore[attr-defined]
            raise InferError(f"expects a floating-point tensor, got {operand_types[0]}")
        return out

    def reference(self, a: Any) -> Any:
        if not self.dims:
            return a.clone()
        return torch_module().mean(a, dim=self.dims, keepdim=self.keepdim)


OPS = [SumOp, MaxOp, MeanOp]
