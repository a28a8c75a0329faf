"""Comparisons (``i1`` results), boolean/bitwise logic and ``select``.

    %m = tensor.compare %a, %b {predicate = "lt"} : (tensor<8x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
    %n = tensor.not %m : tensor<8x8xi1>
    %k = tensor.and %m, %n : tensor<8x8xi1>
    %r = tensor.select %k, %x, %ninf : (tensor<8x8xi1>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
"""

from __future__ import annotations

from typing import Any, Callable

from spmdc.ir.attributes import StringAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType
from spmdc.dialects.tensor.base import TensorOp, broadcast_shapes, same_element_type, tensor_types, torch_module
from spmdc.dialects.tensor.elementwise import BinaryOp, UnaryOp
from spmdc.dialects.tensor.helpers import str_attr

PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")


class CompareOp(TensorOp):
    """Elementwise comparison of two broadcast operands of one element type; result ``i1``.

    ``predicate`` is one of ``eq ne lt le gt ge``.

    ``%r = tensor.compare %a, %b {predicate = "eq"} : (tensor<4xf32>, tensor<f32>) -> tensor<4xi1>``
    """

    name = "tensor.compare"
    num_operands = 2
    num_results = 1
    required_attrs = {"predicate": StringAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        a, b = tensor_types(operand_types, cls.name)
        same_element_type([a, b])
        str_attr(attrs, "predicate", PREDICATES)
        return [TensorType(broadcast_shapes(a.shape, b.shape), "i1")]

    def reference(self, a: Any, b: Any) -> Any:
        return getattr(torch_module(), self.attr_value("predicate"))(a, b)


class LogicOp(BinaryOp):
    """Bitwise op on integer tensors; on ``i1`` the logical one."""

    fn: Callable[[Any, Any], Any]

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        if out[0].is_float:
            raise InferError(f"expects integer or i1 operands, got {out[0].element_type}")
        return out


class AndOp(LogicOp):
    """``%r = tensor.and %a, %b : tensor<4xi1>`` — a & b."""

    name = "tensor.and"
    traits = LogicOp.traits | {"Commutative"}
    fn = staticmethod(lambda a, b: torch_module().bitwise_and(a, b))


class OrOp(LogicOp):
    """``%r = tensor.or %a, %b : tensor<4xi1>`` — a | b."""

    name = "tensor.or"
    traits = LogicOp.traits | {"Commutative"}
    fn = staticmethod(lambda a, b: torch_module().bitwise_or(a, b))


class XorOp(LogicOp):
    """``%r = tensor.xor %a, %b : tensor<4xi1>`` — a ^ b."""

    name = "tensor.xor"
    traits = LogicOp.traits | {"Commutative"}
    fn = staticmethod(lambda a, b: torch_module().bitwise_xor(a, b))


class NotOp(UnaryOp):
    """``%r = tensor.not %a : tensor<4xi1>`` — logical not on ``i1``, bitwise not on integers."""

    name = "tensor.not"
    float_only = False
    traits = UnaryOp.traits | {"SameOperandsAndResultType"}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        if a.is_float:
            raise InferError(f"expects an integer or i1 tensor, got {a}")
        return [a]

    def reference(self, a: Any) -> Any:
        return torch_module().bitwise_not(a)


class SelectOp(TensorOp):
    """``cond ? a : b`` elementwise (``torch.where``); all three operands broadcast.

    ``%r = tensor.select %c, %a, %b : (tensor<8x8xi1>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>``
    """

    name = "tensor.select"
    num_operands = 3
    num_results = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        c, a, b = tensor_types(operand_types, cls.name)
        if c.element_type != "i1":
            raise InferError(f"condition must be an i1 tensor, got {c}")
        elt = same_element_type([a, b])
        shape = broadcast_shapes(broadcast_shapes(c.shape, a.shape), b.shape)
        return [TensorType(shape, elt)]

    def reference(self, c: Any, a: Any, b: Any) -> Any:
        return torch_module().where(c, a, b)


OPS = [CompareOp, AndOp, OrOp, XorOp, NotOp, SelectOp]
