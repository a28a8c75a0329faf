"""Elementwise ``tensor`` ops with torch broadcasting.

    %0 = tensor.add %a, %b : tensor<8x16xf32>
    %1 = tensor.mul %0, %s : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
    %2 = tensor.relu %1 : tensor<8x16xf32>
    %3 = tensor.cast %2 : (tensor<8x16xf32>) -> tensor<8x16xbf16>
"""

from __future__ import annotations

from typing import Any, Callable

from spmdc.ir.core import InferError
from spmdc.dialects.tensor.base import (
    TensorOp, broadcast_shapes, same_element_type, tensor_types, torch_dtype, torch_module,
)
from spmdc.ir.types import TensorType


class BinaryOp(TensorOp):
    """Two operands, broadcast against each other, same element type."""

    num_operands = 2
    num_results = 1
    fn: Callable[[Any, Any], Any]

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        a, b = tensor_types(operand_types, cls.name)
        elt = same_element_type([a, b])
        return [TensorType(broadcast_shapes(a.shape, b.shape), elt)]

    def reference(self, a: Any, b: Any) -> Any:
        return type(self).fn(a, b)


def _binary(op_name: str, doc: str, fn: Callable[[Any, Any], Any], commutative: bool) -> type[BinaryOp]:
    traits = BinaryOp.traits | ({"Commutative"} if commutative else set())
    cls = type(op_name.split(".")[1].title() + "Op", (BinaryOp,),
               {"name": op_name, "__doc__": doc, "fn": staticmethod(fn), "traits": frozenset(traits)})
    return cls  # type: ignore[return-value]


AddOp = _binary("tensor.add", "``%r = tensor.add %a, %b : tensor<4xf32>`` — a + b.", lambda a, b: a + b, True)
SubOp = _binary("tensor.sub", "``%r = tensor.sub %a, %b : tensor<4xf32>`` — a - b.", lambda a, b: a - b, False)
MulOp = _binary("tensor.mul", "``%r = tensor.mul %a, %b : tensor<4xf32>`` — a * b.", lambda a, b: a * b, True)
DivOp = _binary("tensor.div", "``%r = tensor.div %a, %b : tensor<4xf32>`` — a / b (integers: truncating).",
                lambda a, b: a / b if a.is_floating_point() else torch_module().div(a, b, rounding_mode="trunc"),
                False)
MaximumOp = _binary("tensor.maximum", "``%r = tensor.maximum %a, %b : tensor<4xf32>`` — elementwise max.",
                    lambda a, b: torch_module().maximum(a, b), True)
MinimumOp = _binary("tensor.minimum", "``%r = tensor.minimum %a, %b : tensor<4xf32>`` — elementwise min.",
                    lambda a, b: torch_module().minimum(a, b), True)


class UnaryOp(TensorOp):
    """One operand, same result type."""

    num_operands = 1
    num_results = 1
    fn: Callable[[Any], Any]
    float_only = True

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        if cls.float_only and not a.is_float:
            raise InferError(f"expects a floating-point tensor, got {a}")
        return [a]

    def reference(self, a: Any) -> Any:
        return type(self).fn(a)


def _unary(op_name: str, doc: str, fn: Callable[[Any], Any], float_only: bool = True) -> type[UnaryOp]:
    cls = type(op_name.split(".")[1].title() + "Op", (UnaryOp,),
               {"name": op_name, "__doc__": doc, "fn": staticmethod(fn), "float_only": float_only,
                "traits": UnaryOp.traits | {"SameOperandsAndResultType"}})
    return cls  # type: ignore[return-value]


def _t() -> Any:
    return torch_module()


NegOp = _unary("tensor.neg", "``%r = tensor.neg %a : tensor<4xf32>`` — -a.", lambda a: -a, float_only=False)
ExpOp = _unary("tensor.exp", "``%r = tensor.exp %a : tensor<4xf32>``.", lambda a: _t().exp(a))
LogOp = _unary("tensor.log", "``%r = tensor.log %a : tensor<4xf32>``.", lambda a: _t().log(a))
SqrtOp = _unary("tensor.sqrt", "``%r = tensor.sqrt %a : tensor<4xf32>``.", lambda a: _t().sqrt(a))
RsqrtOp = _unary("tensor.rsqrt", "``%r = tensor.rsqrt %a : tensor<4xf32>`` — 1/sqrt(a).", lambda a: _t().rsqrt(a))
TanhOp = _unary("tensor.tanh", "``%r = tensor.tanh %a : tensor<4xf32>``.", lambda a: _t().tanh(a))
ReluOp = _unary("tensor.relu", "``%r = tensor.relu %a : tensor<4xf32>`` — max(a, 0).",
                lambda a: _t().relu(a), float_only=False)


class CastOp(TensorOp):
    """Element type conversion, shape unchanged.

    ``%r = tensor.cast %a : (tensor<4xf32>) -> tensor<4xbf16>``
    """

    name = "tensor.cast"
    num_operands = 1
    num_results = 1

    def verify_(self) -> None:
        src, dst = self.operand(0).type, self.result.type
        if not isinstance(src, TensorType) or not isinstance(dst, TensorType) or src.shape != dst.shape:
            raise self.emit_error(f"result {dst} must have the shape of operand {src}")

    def reference(self, a: Any) -> Any:
        return a.to(torch_dtype(self.result.tensor_type.element_type))


OPS = [AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp, NegOp, ExpOp, LogOp, SqrtOp, RsqrtOp,
       TanhOp, ReluOp, CastOp]
