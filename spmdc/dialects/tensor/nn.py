"""Normalising ops along one dim, scans and variance.

    %0 = tensor.softmax %x {dim = 3} : tensor<2x4x8x8xf32>
    %1 = tensor.log_softmax %x {dim = 1} : tensor<16x64xf32>
    %2 = tensor.cumsum %m {dim = 1} : tensor<2x8xi64>
    %3 = tensor.var %x {correction = 0, dims = [2], keepdim = true} : (tensor<2x8x32xf32>) -> tensor<2x8x1xf32>
"""

from __future__ import annotations

from typing import Any

from spmdc.ir.attributes import FloatAttr, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.dialects.tensor.base import TensorOp, tensor_types, torch_module
from spmdc.dialects.tensor.helpers import check_dim, int_attr, number_attr, require_float
from spmdc.dialects.tensor.reduction import ReduceOp


class DimOp(TensorOp):
    """One operand, same result type, an op along dimension ``dim``."""

    num_operands = 1
    num_results = 1
    required_attrs = {"dim": IntegerAttr}
    traits = TensorOp.traits | {"SameOperandsAndResultType"}
    float_only = True

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        if cls.float_only:
            require_float(a, "tensor")
        check_dim(int_attr(attrs, "dim"), a.rank)
        return [a]


class SoftmaxOp(DimOp):
    """``exp(x) / sum(exp(x))`` along ``dim``.

    ``%r = tensor.softmax %x {dim = 1} : tensor<8x16xf32>``
    """

    name = "tensor.softmax"

    def reference(self, a: Any) -> Any:
        return torch_module().softmax(a, self.attr_value("dim"))


class LogSoftmaxOp(DimOp):
    """``x - log(sum(exp(x)))`` along ``dim``.

    ``%r = tensor.log_softmax %x {dim = 1} : tensor<8x16xf32>``
    """

    name = "tensor.log_softmax"

    def reference(self, a: Any) -> Any:
        return torch_module().log_softmax(a, self.attr_value("dim"))


class CumsumOp(DimOp):
    """Inclusive prefix sum along ``dim``.

    ``%r = tensor.cumsum %x {dim = 1} : tensor<2x8xi64>``
    """

    name = "tensor.cumsum"
    float_only = False

    def reference(self, a: Any) -> Any:
        # keep the element type (torch would promote integer scans to int64)
        return torch_module().cumsum(a, self.attr_value("dim"), dtype=a.dtype)


class VarOp(ReduceOp):
    """Variance over ``dims``: ``sum((x - mean)^2) / (N - correction)``.

    ``%r = tensor.var %x {correction = 0, dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>``
    """

    name = "tensor.var"
    required_attrs = {**ReduceOp.required_attrs, "correction": (IntegerAttr, FloatAttr)}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        require_float(operand_types[0], "tensor")  # type: ignore[arg-type]
        if number_attr(attrs, "correction") is None:
            raise InferError("requires attribute 'correction'")
        return out

    def reference(self, a: Any) -> Any:
        if not self.dims:  # no dims reduced: each element is its own sample (torch would reduce all dims)
            return torch_module().var(a.unsqueeze(-1), dim=-1, correction=self.attr_value("correction"))
        return torch_module().var(a, dim=self.dims, correction=self.attr_value("correction"),
                                  keepdim=self.keepdim)


OPS = [SoftmaxOp, LogSoftmaxOp, CumsumOp, VarOp]
