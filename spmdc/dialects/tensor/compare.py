"""Comparisons and float tests (``i1`` results), boolean/bitwise logic and ``select``.

    %m = tensor.compare %a, %b {predicate = "lt"} : (tensor<8x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
    %n = tensor.not %m : tensor<8x8xi1>
    %k = tensor.and %m, %n : tensor<8x8xi1>
    %r = tensor.select %k, %x, %ninf : (tensor<8x8xi1>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.shard.rules import OpShardingRule, elementwise_rule
from spmdc.dialects.tensor.base import broadcast_shapes, same_element_type, tensor_types
from spmdc.dialects.tensor.elementwise import BinaryOp, ElementwiseOp, UnaryOp
from spmdc.dialects.tensor.helpers import str_attr
from spmdc.ir.attributes import StringAttr
from spmdc.ir.core import InferError, Value
from spmdc.ir.types import TensorType

PREDICATES = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


class CompareOp(ElementwiseOp):
    """Elementwise comparison of two broadcast operands of one element type; result ``i1``.

    ``predicate`` is one of ``eq ne lt le gt ge``.

    ``%r = tensor.compare %a, %b {predicate = "eq"} : (tensor<4xf32>, tensor<f32>) -> tensor<4xi1>``
    """

    name = "tensor.compare"
    num_operands = 2
    required_attrs = {"predicate": StringAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        a, b = tensor_types(operand_types, cls.name)
        same_element_type([a, b])
        str_attr(attrs, "predicate", tuple(PREDICATES))
        return [TensorType(broadcast_shapes(a.shape, b.shape), "i1")]

    @property
    def predicate(self) -> str:
        p = str(self.attr_value("predicate"))
        if p not in PREDICATES:  # unverified IR: never let the text reach generated code
            raise self.emit_error(f"attribute 'predicate' must be one of {', '.join(PREDICATES)}, got {p!r}")
        return p

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.{self.predicate}({ins[0]}, {ins[1]})"

    def triton_expr(self, ins: Sequence[str]) -> str:
        return f"({ins[0]} {PREDICATES[self.predicate]} {ins[1]})"


class FloatTestOp(ElementwiseOp):
    """Base: an ``i1`` test of each element of a float tensor (the frontend gives integer
    tensors, never infinite nor NaN, a false constant)."""

    num_operands = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        if not a.is_float:
            raise InferError(f"expects a floating-point tensor, got {a}")
        return [TensorType(a.shape, "i1")]

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        # bf16/f16 tested in fp32 (exact widening), never on their raw bits
        x = ins[0]
        if self.operand(0).tensor_type.element_type in ("bf16", "f16"):
            x = f"{x}.to(tl.float32)"
        return super().triton_expr([x])


class IsInfOp(FloatTestOp):
    """``%r = tensor.isinf %a : (tensor<4xf32>) -> tensor<4xi1>`` — a is +inf or -inf."""

    name = "tensor.isinf"
    torch = "torch.isinf({0})"
    triton = "(tl.abs({0}) == float('inf'))"


class IsNanOp(FloatTestOp):
    """``%r = tensor.isnan %a : (tensor<4xf32>) -> tensor<4xi1>`` — a is NaN."""

    name = "tensor.isnan"
    torch = "torch.isnan({0})"
    triton = "({0} != {0})"


class LogicOp(BinaryOp):
    """Bitwise op on integer tensors; on ``i1`` the logical one."""

    traits = BinaryOp.traits | {"Commutative"}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        if out[0].is_float:
            raise InferError(f"expects integer or i1 operands, got {out[0].element_type}")
        return out


class AndOp(LogicOp):
    """``%r = tensor.and %a, %b : tensor<4xi1>`` — a & b."""

    name = "tensor.and"
    torch = "torch.bitwise_and({0}, {1})"
    triton = "({0} & {1})"


class OrOp(LogicOp):
    """``%r = tensor.or %a, %b : tensor<4xi1>`` — a | b."""

    name = "tensor.or"
    torch = "torch.bitwise_or({0}, {1})"
    triton = "({0} | {1})"


class XorOp(LogicOp):
    """``%r = tensor.xor %a, %b : tensor<4xi1>`` — a ^ b."""

    name = "tensor.xor"
    torch = "torch.bitwise_xor({0}, {1})"
    triton = "({0} ^ {1})"


class NotOp(UnaryOp):
    """``%r = tensor.not %a : tensor<4xi1>`` — logical not on ``i1``, bitwise not on integers."""

    name = "tensor.not"
    float_only = False
    torch = "torch.bitwise_not({0})"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        if a.is_float:
            raise InferError(f"expects an integer or i1 tensor, got {a}")
        return [a]

    def triton_expr(self, ins: Sequence[str]) -> str:
        return f"({ins[0]} == 0)" if self.result.tensor_type.element_type == "i1" else f"(~{ins[0]})"


class SelectOp(ElementwiseOp):
    """``cond ? a : b`` elementwise (``torch.where``); all three operands broadcast.

    ``%r = tensor.select %c, %a, %b : (tensor<8x8xi1>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>``

    Masking with zero keeps a partial sum (``select(c, 0, P) = P``: every rank's zeros sum to
    zero), as an embedding's backward masks its padding rows before the scatter-add.
    """

    name = "tensor.select"
    num_operands = 3
    torch = "torch.where({0}, {1}, {2})"
    triton = "tl.where({0}, {1}, {2})"

    def sharding_rule(self) -> OpShardingRule:
        zero = [_is_zero_splat(v) for v in self.operands]
        partial = tuple(i for i, other in ((1, 2), (2, 1)) if zero[other])
        return elementwise_rule([v.type for v in self.operands], self.result.type,  # type: ignore[misc]
                                partial_one=partial)

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        c, a, b = tensor_types(operand_types, cls.name)
        if c.element_type != "i1":
            raise InferError(f"condition must be an i1 tensor, got {c}")
        elt = same_element_type([a, b])
        shape = broadcast_shapes(broadcast_shapes(c.shape, a.shape), b.shape)
        return [TensorType(shape, elt)]


def _is_zero_splat(v: Value) -> bool:
    """``v`` is a ``tensor.constant`` splat of zero."""
    d = v.defining_op()
    if d is None or d.name != "tensor.constant" or not d.is_splat:  # type: ignore[attr-defined]
        return False
    return d.value.flat_values()[0] == 0  # type: ignore[attr-defined]


OPS = [CompareOp, IsInfOp, IsNanOp, AndOp, OrOp, XorOp, NotOp, SelectOp]
