"""Normalising ops along one dim, scans and variance.

    %0 = tensor.softmax %x {dim = 3} : tensor<2x4x8x8xf32>
    %1 = tensor.log_softmax %x {dim = 1} : tensor<16x64xf32>
    %2 = tensor.cumsum %m {dim = 1} : tensor<2x8xi64>
    %3 = tensor.var %x {correction = 0, dims = [2], keepdim = true} : (tensor<2x8x32xf32>) -> tensor<2x8x1xf32>
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, dim_blocked_rule
from spmdc.dialects.tensor.base import TensorOp, tensor_types
from spmdc.dialects.tensor.helpers import check_dim, int_attr, number_attr, require_float
from spmdc.dialects.tensor.reduction import ReduceOp
from spmdc.ir.attributes import FloatAttr, IntegerAttr
from spmdc.ir.core import InferError


class DimOp(TensorOp):
    """One operand, same result type, an op along dimension ``dim`` (which needs replication)."""

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

    @property
    def dim(self) -> int:
        return int(self.attr_value("dim"))  # type: ignore[arg-type]

    def sharding_rule(self) -> OpShardingRule:
        return dim_blocked_rule([self.operand(0).tensor_type], [self.result.tensor_type], self.dim)

    def kernel_role(self) -> str | None:
        return self._row_role([self.dim]) if self.kernel == "row" else None


class SoftmaxOp(DimOp):
    """``exp(x) / sum(exp(x))`` along ``dim``.

    ``%r = tensor.softmax %x {dim = 1} : tensor<8x16xf32>``
    """

    name = "tensor.softmax"
    kernel = "row"
    row_kernel = "softmax"

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.softmax({ins[0]}, {literal(self.dim)})"


class LogSoftmaxOp(DimOp):
    """``x - log(sum(exp(x)))`` along ``dim``.

    ``%r = tensor.log_softmax %x {dim = 1} : tensor<8x16xf32>``
    """

    name = "tensor.log_softmax"
    kernel = "row"
    row_kernel = "log_softmax"

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.log_softmax({ins[0]}, {literal(self.dim)})"


class CumsumOp(DimOp):
    """Inclusive prefix sum along ``dim``.

    ``%r = tensor.cumsum %x {dim = 1} : tensor<2x8xi64>``
    """

    name = "tensor.cumsum"
    float_only = False
    kernel = "none"

    def torch_expr(self, ins: Sequence[str]) -> str:
        # keep the element type (torch would promote integer scans to int64)
        return f"torch.cumsum({ins[0]}, {literal(self.dim)}, dtype={ins[0]}.dtype)"


class VarOp(ReduceOp):
    """Variance over ``dims``: ``sum((x - mean)^2) / (N - correction)``.

    ``%r = tensor.var %x {correction = 0, dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>``
    """

    name = "tensor.var"
    required_attrs = {**ReduceOp.required_attrs, "correction": (IntegerAttr, FloatAttr)}
    row_kernel = "var"   # reduce_kind None: the reduced dims need replication

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        require_float(operand_types[0], "tensor")  # type: ignore[arg-type]
        if number_attr(attrs, "correction") is None:
            raise InferError("requires attribute 'correction'")
        return out

    def torch_expr(self, ins: Sequence[str]) -> str:
        c = literal(self.attr_value("correction"))
        if not self.dims:  # no dims reduced: each element is its own sample (torch would reduce all dims)
            return f"torch.var({ins[0]}.unsqueeze(-1), dim=-1, correction={c})"
        return f"torch.var({ins[0]}, dim={literal(self.dims)}, correction={c}, keepdim={literal(self.keepdim)})"


OPS = [SoftmaxOp, LogSoftmaxOp, CumsumOp, VarOp]
