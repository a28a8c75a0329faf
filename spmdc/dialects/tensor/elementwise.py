"""Elementwise ``tensor`` ops with torch broadcasting: arithmetic, basic math, casts.

    %0 = tensor.add %a, %b : tensor<8x16xf32>
    %1 = tensor.mul %0, %s : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
    %2 = tensor.relu %1 : tensor<8x16xf32>
    %3 = tensor.cast %2 : (tensor<8x16xf32>) -> tensor<8x16xbf16>

An elementwise op's sharding rule maps every operand dim to the result dim it broadcasts
to; ``partial_all`` (every operand ``P(sum)`` gives ``P(sum)``: add, sub) and
``partial_one`` (operand ``i`` ``P(sum)`` with the rest ``R``: mul, the numerator of div,
neg, casts) say where a pending sum may pass through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from spmdc.dialects.shard.rules import OpShardingRule, elementwise_rule
from spmdc.dialects.tensor.base import (
    TensorOp,
    broadcast_shapes,
    dtype_source,
    same_element_type,
    tensor_types,
    triton_type,
)
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


class ElementwiseOp(TensorOp):
    """Base: one result computed point by point from broadcast operands."""

    num_results = 1
    kernel = "elementwise"
    partial_all: ClassVar[bool] = False
    partial_one: ClassVar[tuple[int, ...]] = ()

    def sharding_rule(self) -> OpShardingRule:
        return elementwise_rule([v.type for v in self.operands], self.result.type,  # type: ignore[misc]
                                partial_all=self.partial_all, partial_one=self.partial_one)


class BinaryOp(ElementwiseOp):
    """Two operands, broadcast against each other, same element type."""

    num_operands = 2

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        a, b = tensor_types(operand_types, cls.name)
        elt = same_element_type([a, b])
        return [TensorType(broadcast_shapes(a.shape, b.shape), elt)]


class UnaryOp(ElementwiseOp):
    """One operand, same result type (floating point unless ``float_only`` is False)."""

    num_operands = 1
    float_only: ClassVar[bool] = True
    traits = ElementwiseOp.traits | {"SameOperandsAndResultType"}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        if cls.float_only and not a.is_float:
            raise InferError(f"expects a floating-point tensor, got {a}")
        return [a]


class AddOp(BinaryOp):
    """``%r = tensor.add %a, %b : tensor<4xf32>`` — a + b."""

    name = "tensor.add"
    traits = BinaryOp.traits | {"Commutative"}
    torch = "torch.add({0}, {1})"
    triton = "({0} + {1})"
    partial_all = True


class SubOp(BinaryOp):
    """``%r = tensor.sub %a, %b : tensor<4xf32>`` — a - b."""

    name = "tensor.sub"
    torch = "torch.sub({0}, {1})"
    triton = "({0} - {1})"
    partial_all = True


class MulOp(BinaryOp):
    """``%r = tensor.mul %a, %b : tensor<4xf32>`` — a * b."""

    name = "tensor.mul"
    traits = BinaryOp.traits | {"Commutative"}
    torch = "torch.mul({0}, {1})"
    triton = "({0} * {1})"
    partial_one = (0, 1)


class DivOp(BinaryOp):
    """``%r = tensor.div %a, %b : tensor<4xf32>`` — a / b (integers: truncating)."""

    name = "tensor.div"
    partial_one = (0,)

    def torch_expr(self, ins: Sequence[str]) -> str:
        if self.result.tensor_type.is_float:
            return f"torch.div({ins[0]}, {ins[1]})"
        return f"torch.div({ins[0]}, {ins[1]}, rounding_mode='trunc')"

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        return f"({ins[0]} / {ins[1]})" if self.result.tensor_type.is_float else None


class MaximumOp(BinaryOp):
    """``%r = tensor.maximum %a, %b : tensor<4xf32>`` — elementwise max."""

    name = "tensor.maximum"
    traits = BinaryOp.traits | {"Commutative"}
    torch = "torch.maximum({0}, {1})"
    triton = "tl.maximum({0}, {1})"


class MinimumOp(BinaryOp):
    """``%r = tensor.minimum %a, %b : tensor<4xf32>`` — elementwise min."""

    name = "tensor.minimum"
    traits = BinaryOp.traits | {"Commutative"}
    torch = "torch.minimum({0}, {1})"
    triton = "tl.minimum({0}, {1})"


class NegOp(UnaryOp):
    """``%r = tensor.neg %a : tensor<4xf32>`` — -a."""

    name = "tensor.neg"
    float_only = False
    torch = "torch.neg({0})"
    triton = "(-{0})"
    partial_one = (0,)


class ExpOp(UnaryOp):
    """``%r = tensor.exp %a : tensor<4xf32>``."""

    name = "tensor.exp"
    torch = "torch.exp({0})"
    triton = "tl.exp({0})"


class LogOp(UnaryOp):
    """``%r = tensor.log %a : tensor<4xf32>``."""

    name = "tensor.log"
    torch = "torch.log({0})"
    triton = "tl.log({0})"


class SqrtOp(UnaryOp):
    """``%r = tensor.sqrt %a : tensor<4xf32>``."""

    name = "tensor.sqrt"
    torch = "torch.sqrt({0})"
    triton = "tl.sqrt({0})"


class RsqrtOp(UnaryOp):
    """``%r = tensor.rsqrt %a : tensor<4xf32>`` — 1/sqrt(a)."""

    name = "tensor.rsqrt"
    torch = "torch.rsqrt({0})"
    triton = "tl.rsqrt({0})"


class TanhOp(UnaryOp):
    """``%r = tensor.tanh %a : tensor<4xf32>``."""

    name = "tensor.tanh"
    torch = "torch.tanh({0})"
    triton = "_tanh({0})"


class ReluOp(UnaryOp):
    """``%r = tensor.relu %a : tensor<4xf32>`` — max(a, 0)."""

    name = "tensor.relu"
    float_only = False
    torch = "torch.relu({0})"

    def triton_expr(self, ins: Sequence[str]) -> str:
        return f"tl.maximum({ins[0]}, {'0.0' if self.result.tensor_type.is_float else '0'})"


class CastOp(ElementwiseOp):
    """Element type conversion, shape unchanged.

    ``%r = tensor.cast %a : (tensor<4xf32>) -> tensor<4xbf16>``
    """

    name = "tensor.cast"
    num_operands = 1
    partial_one = (0,)

    def verify_(self) -> None:
        src, dst = self.operand(0).type, self.result.type
        if not isinstance(src, TensorType) or not isinstance(dst, TensorType) or src.shape != dst.shape:
            raise self.emit_error(f"result {dst} must have the shape of operand {src}")

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"{ins[0]}.to({dtype_source(self.result.tensor_type)})"

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        t = self.result.tensor_type
        if t.element_type == "i1":  # Triton's int1 conversion is not torch's != 0
            return None
        x = ins[0] if ins[0].isidentifier() or ins[0].startswith("tl.full(") else f"tl.full([], {ins[0]}, tl.float32)"
        return f"{x}.to({triton_type(t)})"


OPS = [AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp, NegOp, ExpOp, LogOp, SqrtOp, RsqrtOp,
       TanhOp, ReluOp, CastOp]
