"""Pointwise math beyond the basics: activations, trig, erf, pow, clamp.

    %0 = tensor.gelu %x {approximate = "tanh"} : tensor<8x16xf32>
    %1 = tensor.sigmoid %0 : tensor<8x16xf32>
    %2 = tensor.pow %1, %two : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
    %3 = tensor.clamp %i {max = 63, min = 0} : tensor<8xi64>
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.tensor.base import tensor_types, triton_type
from spmdc.dialects.tensor.elementwise import BinaryOp, UnaryOp
from spmdc.dialects.tensor.helpers import number_attr, str_attr
from spmdc.ir.attributes import FloatAttr, IntegerAttr, StringAttr
from spmdc.ir.core import InferError

# exponents a pow by a splat constant may have in a Triton kernel (repeated products, square roots)
POW_EXPONENTS = (-4.0, -3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0)


class SigmoidOp(UnaryOp):
    """``%r = tensor.sigmoid %a : tensor<4xf32>`` — 1/(1+exp(-a))."""

    name = "tensor.sigmoid"
    torch = "torch.sigmoid({0})"
    triton = "tl.sigmoid({0})"


class SinOp(UnaryOp):
    """``%r = tensor.sin %a : tensor<4xf32>``."""

    name = "tensor.sin"
    torch = "torch.sin({0})"
    triton = "tl.sin({0})"


class CosOp(UnaryOp):
    """``%r = tensor.cos %a : tensor<4xf32>``."""

    name = "tensor.cos"
    torch = "torch.cos({0})"
    triton = "tl.cos({0})"


class ErfOp(UnaryOp):
    """``%r = tensor.erf %a : tensor<4xf32>`` — the Gauss error function."""

    name = "tensor.erf"
    torch = "torch.erf({0})"
    triton = "tl.erf({0})"


class Log1pOp(UnaryOp):
    """``%r = tensor.log1p %a : tensor<4xf32>`` — log(1 + a), exact for small a (softplus, Mish).

    The kernel form is Kahan's: with ``u = 1 + a``, ``log(u) * a / (u - 1)`` (``a`` where ``u == 1``).
    """

    name = "tensor.log1p"
    torch = "torch.log1p({0})"
    triton = "tl.where((1.0 + {0}) == 1.0, {0}, tl.log(1.0 + {0}) * ({0} / ((1.0 + {0}) - 1.0)))"


class SiluOp(UnaryOp):
    """``%r = tensor.silu %a : tensor<4xf32>`` — a * sigmoid(a)."""

    name = "tensor.silu"
    torch = "torch.nn.functional.silu({0})"
    triton = "({0} * tl.sigmoid({0}))"


class AbsOp(UnaryOp):
    """``%r = tensor.abs %a : tensor<4xf32>`` — |a|."""

    name = "tensor.abs"
    float_only = False
    torch = "torch.abs({0})"
    triton = "tl.abs({0})"


class SignOp(UnaryOp):
    """``%r = tensor.sign %a : tensor<4xf32>`` — -1, 0 or 1."""

    name = "tensor.sign"
    float_only = False
    torch = "torch.sign({0})"

    def triton_expr(self, ins: Sequence[str]) -> str:
        t = self.result.tensor_type
        one, zero = ("1.0", "0.0") if t.is_float else ("1", "0")
        x = ins[0]
        return f"tl.where({x} > {zero}, {one}, tl.where({x} < {zero}, -{one}, {zero})).to({triton_type(t)})"


class GeluOp(UnaryOp):
    """GELU; ``approximate`` is ``"none"`` (erf, the default) or ``"tanh"``.

    ``%r = tensor.gelu %a {approximate = "tanh"} : tensor<8x16xf32>``
    """

    name = "tensor.gelu"
    optional_attrs = {"approximate": StringAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        str_attr(attrs, "approximate", ("none", "tanh"), default="none")
        return super().infer_result_types(operand_types, attrs)

    @property
    def approximate(self) -> str:
        return str(self.attr_value("approximate", "none"))

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.nn.functional.gelu({ins[0]}, approximate={literal(self.approximate)})"

    def triton_expr(self, ins: Sequence[str]) -> str:
        x = ins[0]
        if self.approximate == "tanh":
            return f"(0.5 * {x} * (1.0 + _tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))))"
        return f"(0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476)))"


class PowOp(BinaryOp):
    """``a ** b`` with broadcasting (a rank-0 exponent is the common case).

    ``%r = tensor.pow %a, %e : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>``
    """

    name = "tensor.pow"

    def torch_expr(self, ins: Sequence[str]) -> str:
        if self.operand(1).tensor_type.rank == 0:  # the Tensor_Scalar kernel torch itself picks
            return f"torch.pow({ins[0]}, {ins[1]}.item())"
        return f"torch.pow({ins[0]}, {ins[1]})"

    def constant_exponent(self) -> float | None:
        """The exponent when it is a splat constant that a kernel can compute exactly."""
        c = self.operand(1).defining_op()
        if c is None or c.name != "tensor.constant":
            return None
        vals = getattr(c.attributes["value"], "values", ())
        if len(vals) != 1 or float(vals[0]) not in POW_EXPONENTS:
            return None
        return float(vals[0])

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        p = self.constant_exponent()
        if p is None or not self.result.tensor_type.is_float:
            return None
        x = ins[0]
        if p == 0.0:
            return f"({x} * 0.0 + 1.0)"
        if abs(p) == 0.5:
            return f"tl.sqrt({x})" if p > 0 else f"tl.rsqrt({x})"
        prod = " * ".join([x] * int(abs(p)))
        return f"({prod})" if p > 0 else f"(1.0 / ({prod}))"


class ClampOp(UnaryOp):
    """Clamp into ``[min, max]``; either bound may be absent (not both).

    ``%r = tensor.clamp %a {max = 6.0, min = 0.0} : tensor<4xf32>``
    """

    name = "tensor.clamp"
    float_only = False
    optional_attrs = {"min": (IntegerAttr, FloatAttr), "max": (IntegerAttr, FloatAttr)}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        lo, hi = number_attr(attrs, "min"), number_attr(attrs, "max")
        if lo is None and hi is None:
            raise InferError("needs at least one of 'min' and 'max'")
        if not a.is_float and any(isinstance(attrs.get(k), FloatAttr) for k in ("min", "max")):
            raise InferError(f"float bounds on an integer tensor {a}")
        return [a]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.clamp({ins[0]}, {literal(self.attr_value('min'))}, {literal(self.attr_value('max'))})"

    def triton_expr(self, ins: Sequence[str]) -> str:
        x = ins[0]
        lo, hi = self.attr_value("min"), self.attr_value("max")
        if lo is not None:
            x = f"tl.maximum({x}, {literal(lo)})"
        if hi is not None:
            x = f"tl.minimum({x}, {literal(hi)})"
        return x


OPS = [SigmoidOp, SinOp, CosOp, ErfOp, Log1pOp, SiluOp, AbsOp, SignOp, GeluOp, PowOp, ClampOp]
