"""Elementwise ``tensor`` ops with torch broadcasting: arithmetic, remainders, basic math,
roundings, casts.

    %0 = tensor.add %a, %b : tensor<8x16xf32>
    %1 = tensor.mul %0, %s : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
    %2 = tensor.relu %1 : tensor<8x16xf32>
    %3 = tensor.cast %2 : (tensor<8x16xf32>) -> tensor<8x16xbf16>
    %4 = tensor.div %i, %j {rounding_mode = "floor"} : tensor<8xi64>
    %5 = tensor.round %2 : tensor<8x16xf32>

An elementwise op's sharding rule maps every operand dim to the result dim it broadcasts
to; ``partial_all`` (every operand ``P(sum)`` gives ``P(sum)``: add, sub) and
``partial_one`` (operand ``i`` ``P(sum)`` with the rest ``R``: mul, the numerator of div,
neg, casts) say where a pending sum may pass through.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, elementwise_rule
from spmdc.dialects.tensor.base import (
    TensorOp,
    broadcast_shapes,
    dtype_source,
    same_element_type,
    tensor_types,
    triton_type,
)
from spmdc.dialects.tensor.helpers import str_attr
from spmdc.dialects.tensor.triton_math import in_f32, trunc_expr
from spmdc.ir.attributes import StringAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType

ROUNDING_MODES = ("trunc", "floor")


# torch functions taking ``out=`` that compute elementwise, so an operand may be their output
OUT_FUNCTIONS = frozenset({
    "add", "sub", "mul", "div", "neg", "exp", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
    "tanh", "sigmoid", "sin", "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
    "erf", "abs", "sign", "ceil", "floor", "trunc", "round", "maximum", "minimum", "fmod", "remainder", "where"})
_CALL = re.compile(r"^torch\.(\w+)\((\{\d\}(?:, \{\d\})*)\)$")


class ElementwiseOp(TensorOp):
    """Base: one result computed point by point from broadcast operands."""

    num_results = 1
    kernel = "elementwise"
    partial_all: ClassVar[bool] = False
    partial_one: ClassVar[tuple[int, ...]] = ()

    def verify_(self) -> None:
        inplace_operand(self)

    def inplace_expr(self, ins: Sequence[str], k: int) -> str | None:
        """The op's torch expression writing its result into operand ``k``'s tensor (``out=``), or
        None when its torch form has no such variant: what an ``inplace = k`` attribute emits
        (:mod:`spmdc.passes.in_place`). ``torch.mul(a, b)`` → ``torch.mul(a, b, out=a)``."""
        m = _CALL.match(type(self).torch or "")
        if m is None or m.group(1) not in OUT_FUNCTIONS:
            return None
        return f"torch.{m.group(1)}({m.group(2).format(*ins)}, out={ins[k]})"

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
    """``%r = tensor.div %a, %b : tensor<4xf32>`` — a / b (integers: truncating).

    ``rounding_mode`` (``"trunc"`` or ``"floor"``) rounds the quotient as torch's
    ``div(..., rounding_mode=)`` does (floats included; floor is torch's ``div_floor``, not
    ``floor(a / b)``). Only a plain float quotient passes a pending sum of the numerator.

    ``%r = tensor.div %a, %b {rounding_mode = "floor"} : tensor<4xf32>``
    """

    name = "tensor.div"
    optional_attrs = {"rounding_mode": StringAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        if "rounding_mode" in attrs:
            str_attr(attrs, "rounding_mode", ROUNDING_MODES)
        return super().infer_result_types(operand_types, attrs)

    @property
    def rounding_mode(self) -> str | None:
        mode = self.attr_value("rounding_mode")
        if mode is not None and mode not in ROUNDING_MODES:  # unverified IR: never reaches generated code
            raise self.emit_error(f"attribute 'rounding_mode' must be one of {ROUNDING_MODES}, got {mode!r}")
        return mode

    def sharding_rule(self) -> OpShardingRule:
        # (sum a_i) / b = sum (a_i / b) for a true quotient; a rounded one is not linear
        linear = self.result.tensor_type.is_float and self.rounding_mode is None
        return elementwise_rule([v.type for v in self.operands], self.result.type,  # type: ignore[misc]
                                partial_one=(0,) if linear else ())

    def inplace_expr(self, ins: Sequence[str], k: int) -> str | None:
        if self.rounding_mode is None and self.result.tensor_type.is_float:
            return f"torch.div({ins[0]}, {ins[1]}, out={ins[k]})"
        return None

    def torch_expr(self, ins: Sequence[str]) -> str:
        mode = self.rounding_mode
        if mode is None and self.result.tensor_type.is_float:
            return f"torch.div({ins[0]}, {ins[1]})"
        return f"torch.div({ins[0]}, {ins[1]}, rounding_mode={literal(mode or 'trunc')})"

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        t = self.result.tensor_type
        if not t.is_float or self.rounding_mode == "floor":  # integer division by zero; torch's div_floor
            return None
        if self.rounding_mode == "trunc":
            # trunc of the correctly rounded quotient, as torch (fp32 `/` in Triton is not IEEE)
            div = "({0} / {1})" if t.element_type == "f64" else "tl.math.div_rn({0}, {1})"
            return in_f32(t, ins, lambda v: trunc_expr(div.format(*v)), f64=True)
        return f"({ins[0]} / {ins[1]})"


class FmodOp(BinaryOp):
    """``%r = tensor.fmod %a, %b : tensor<4xf32>`` — C's remainder, the sign of ``a`` (torch.fmod).

    The kernel form is integer-only: Triton's float ``%`` becomes ``a - b * trunc(a / b)`` on
    NVIDIA GPUs, off by ``b`` when the quotient rounds to an integer, where torch's is exact.
    """

    name = "tensor.fmod"
    torch = "torch.fmod({0}, {1})"

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        return None if self.result.tensor_type.is_float else f"({ins[0]} % {ins[1]})"


class RemainderOp(BinaryOp):
    """``%r = tensor.remainder %a, %b : tensor<4xi64>`` — Python's ``%``, the sign of ``b``
    (torch.remainder). Integer-only kernel form, as :class:`FmodOp`."""

    name = "tensor.remainder"
    torch = "torch.remainder({0}, {1})"

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        return None if self.result.tensor_type.is_float else f"_remainder_int({ins[0]}, {ins[1]})"


class MaximumOp(BinaryOp):
    """``%r = tensor.maximum %a, %b : tensor<4xf32>`` — elementwise max."""

    name = "tensor.maximum"
    traits = BinaryOp.traits | {"Commutative"}
    torch = "torch.maximum({0}, {1})"
    triton = "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)"   # NaN wins, as in torch


class MinimumOp(BinaryOp):
    """``%r = tensor.minimum %a, %b : tensor<4xf32>`` — elementwise min."""

    name = "tensor.minimum"
    traits = BinaryOp.traits | {"Commutative"}
    torch = "torch.minimum({0}, {1})"
    triton = "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)"


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


class MathOp(UnaryOp):
    """Base of float unary ops whose kernel form ``math`` (a template over the operand) runs
    on fp32 blocks: bf16/f16 are widened and rounded once (:func:`.triton_math.in_f32`);
    ``math_f64``: the form is exact on f64 too (else f64 gets no kernel form)."""

    math: ClassVar[str] = ""
    math_f64: ClassVar[bool] = False

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        return in_f32(self.result.tensor_type, ins, lambda v: self.math.format(*v), f64=self.math_f64)


class Expm1Op(MathOp):
    """``%r = tensor.expm1 %a : tensor<4xf32>`` — exp(a) - 1, exact for small a."""

    name = "tensor.expm1"
    torch = "torch.expm1({0})"
    math = "_expm1({0})"


class Log2Op(MathOp):
    """``%r = tensor.log2 %a : tensor<4xf32>``."""

    name = "tensor.log2"
    torch = "torch.log2({0})"
    math = "tl.log2({0})"


class Log10Op(MathOp):
    """``%r = tensor.log10 %a : tensor<4xf32>`` (kernel form: log(a) / ln 10)."""

    name = "tensor.log10"
    torch = "torch.log10({0})"
    math = "(tl.log({0}) * 0.4342944819032518)"


# ceil/floor/trunc/round take floats: an integer tensor is its own rounding (the frontend emits
# nothing for it); bf16/f16 kernels round in fp32, exact (a rounded narrow value is one of its type)

class CeilOp(MathOp):
    """``%r = tensor.ceil %a : tensor<4xf32>``."""

    name = "tensor.ceil"
    torch = "torch.ceil({0})"
    math = "tl.ceil({0})"
    math_f64 = True


class FloorOp(MathOp):
    """``%r = tensor.floor %a : tensor<4xf32>``."""

    name = "tensor.floor"
    torch = "torch.floor({0})"
    math = "tl.floor({0})"
    math_f64 = True


class TruncOp(MathOp):
    """``%r = tensor.trunc %a : tensor<4xf32>`` — rounding toward zero."""

    name = "tensor.trunc"
    torch = "torch.trunc({0})"
    math = trunc_expr("{0}")
    math_f64 = True


class RoundOp(MathOp):
    """``%r = tensor.round %a : tensor<4xf32>`` — to the nearest integer, halves to even."""

    name = "tensor.round"
    torch = "torch.round({0})"
    math = "_round({0})"
    math_f64 = True


class ReluOp(UnaryOp):
    """``%r = tensor.relu %a : tensor<4xf32>`` — max(a, 0)."""

    name = "tensor.relu"
    float_only = False
    torch = "torch.relu({0})"

    def triton_expr(self, ins: Sequence[str]) -> str:
        if self.result.tensor_type.is_float:  # relu(NaN) is NaN
            return f"tl.maximum({ins[0]}, 0.0, propagate_nan=tl.PropagateNan.ALL)"
        return f"tl.maximum({ins[0]}, 0)"


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


OPS = [AddOp, SubOp, MulOp, DivOp, FmodOp, RemainderOp, MaximumOp, MinimumOp, NegOp, ExpOp, Expm1Op, LogOp,
       Log2Op, Log10Op, SqrtOp, RsqrtOp, TanhOp, CeilOp, FloorOp, TruncOp, RoundOp, ReluOp, CastOp]


def inplace_operand(op: object) -> int | None:
    """The operand an ``inplace = k`` op writes its result into (:mod:`spmdc.passes.in_place`);
    None without the attribute. A wrong one (not an op with a form writing into an operand: an
    elementwise op's ``out=``, ``tensor.scatter``'s ``scatter_``; ``k`` out of range, operand ``k``
    not of the result's type) is an error naming the op."""
    from spmdc.ir.attributes import IntegerAttr
    from spmdc.ir.core import Operation

    assert isinstance(op, Operation)
    attr = op.attributes.get("inplace")
    if attr is None:
        return None
    inplace_expr = getattr(op, "inplace_expr", None)
    if not isinstance(attr, IntegerAttr) or inplace_expr is None:
        raise op.emit_error(f"attribute 'inplace' must be an operand index on an elementwise op or "
                            f"tensor.scatter, got {attr}")
    k = int(attr.value)
    if not 0 <= k < len(op.operands):
        raise op.emit_error(f"attribute 'inplace' = {k}: the op has {len(op.operands)} operand(s)")
    if op.operand(k).type != op.results[0].type:
        raise op.emit_error(f"attribute 'inplace' = {k}: operand #{k} is {op.operand(k).type}, the result "
                            f"{op.results[0].type}; only an operand of the result's type can hold it")
    if inplace_expr([f"_{j}" for j in range(len(op.operands))], k) is None:
        raise op.emit_error("attribute 'inplace': this op has no torch form writing into an operand")
    return k
