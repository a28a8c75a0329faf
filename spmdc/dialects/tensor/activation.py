"""Pointwise math beyond the basics: activations (gelu, elu, leaky_relu...), trigonometric and
hyperbolic functions and their inverses, erf, pow, clamp.

    %0 = tensor.gelu %x {approximate = "tanh"} : tensor<8x16xf32>
    %1 = tensor.sigmoid %0 : tensor<8x16xf32>
    %2 = tensor.pow %1, %two : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
    %3 = tensor.clamp %i {max = 63, min = 0} : tensor<8xi64>
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.tensor.base import tensor_types, triton_type
from spmdc.dialects.tensor.elementwise import BinaryOp, MathOp, UnaryOp
from spmdc.dialects.tensor.helpers import number_attr, str_attr
from spmdc.dialects.tensor.triton_math import in_f32
from spmdc.ir.attributes import FloatAttr, IntegerAttr, StringAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType

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
    triton = ("tl.where((1.0 + {0}) == 1.0, {0}, tl.where({0} == float('inf'), {0}, "
              "tl.log(1.0 + {0}) * ({0} / ((1.0 + {0}) - 1.0))))")


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


class _GeluForm:
    """GELU's ``approximate`` attribute: ``"none"`` (erf, the default) or ``"tanh"``."""

    optional_attrs = {"approximate": StringAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        str_attr(attrs, "approximate", ("none", "tanh"), default="none")
        return super().infer_result_types(operand_types, attrs)

    @property
    def approximate(self) -> str:
        return str(self.attr_value("approximate", "none"))


class GeluOp(_GeluForm, UnaryOp):
    """GELU; ``approximate`` is ``"none"`` (erf, the default) or ``"tanh"``.

    ``%r = tensor.gelu %a {approximate = "tanh"} : tensor<8x16xf32>``
    """

    name = "tensor.gelu"

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.nn.functional.gelu({ins[0]}, approximate={literal(self.approximate)})"

    def triton_expr(self, ins: Sequence[str]) -> str:
        x = ins[0]
        if self.approximate == "tanh":
            return f"(0.5 * {x} * (1.0 + _tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))))"
        return f"(0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476)))"


class GeluBackwardOp(_GeluForm, BinaryOp):
    """GELU's derivative times the incoming gradient, one op (the decomposition would materialize
    a dozen full-size temporaries, in float32 for a bf16 model); ``approximate`` as for GELU.

    ``%dx = tensor.gelu_backward %dy, %x {approximate = "tanh"} : tensor<8x16xf32>``
    """

    name = "tensor.gelu_backward"

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.ops.aten.gelu_backward({ins[0]}, {ins[1]}, approximate={literal(self.approximate)})"

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        def grad(v: list[str]) -> str:
            g, x = v
            if self.approximate == "tanh":
                t = f"_tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))"
                return (f"({g} * (0.5 * (1.0 + {t}) + 0.5 * {x} * (1.0 - {t} * {t}) * 0.7978845608028654 * "
                        f"(1.0 + 0.134145 * {x} * {x})))")
            return (f"({g} * (0.5 * (1.0 + tl.erf({x} * 0.7071067811865476)) + "
                    f"{x} * 0.3989422804014327 * tl.exp(-0.5 * {x} * {x})))")
        return in_f32(self.result.tensor_type, ins, grad)


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
        t = self.result.tensor_type
        lo, hi = self.attr_value("min"), self.attr_value("max")
        nan = ", propagate_nan=tl.PropagateNan.ALL" if t.is_float else ""  # clamp(NaN) is NaN
        if lo is not None:
            x = f"tl.maximum({x}, {typed_literal(lo, t)}{nan})"
        if hi is not None:
            x = f"tl.minimum({x}, {typed_literal(hi, t)}{nan})"
        return x


def typed_literal(value: int | float, t: TensorType) -> str:
    """A bound or coefficient in a kernel: a plain literal for f32 and integers (Triton's float
    literals are fp32), a ``tl.full`` of the element type otherwise (f64 keeps every digit)."""
    if not t.is_float or t.element_type == "f32":
        return literal(value)
    return f"tl.full([], {literal(float(value))}, {triton_type(t)})"


class TanOp(MathOp):
    """``%r = tensor.tan %a : tensor<4xf32>`` (kernel form: sin(a) / cos(a))."""

    name = "tensor.tan"
    torch = "torch.tan({0})"
    math = "(tl.sin({0}) / tl.cos({0}))"
    math_f64 = True


class SinhOp(MathOp):
    """``%r = tensor.sinh %a : tensor<4xf32>``."""

    name = "tensor.sinh"
    torch = "torch.sinh({0})"
    math = "_sinh({0})"


class CoshOp(MathOp):
    """``%r = tensor.cosh %a : tensor<4xf32>``."""

    name = "tensor.cosh"
    torch = "torch.cosh({0})"
    math = "_cosh({0})"
    math_f64 = True


class AsinOp(MathOp):
    """``%r = tensor.asin %a : tensor<4xf32>`` — arcsine, NaN outside [-1, 1]."""

    name = "tensor.asin"
    torch = "torch.asin({0})"
    math = "_asin({0})"


class AcosOp(MathOp):
    """``%r = tensor.acos %a : tensor<4xf32>`` — arccosine, NaN outside [-1, 1]."""

    name = "tensor.acos"
    torch = "torch.acos({0})"
    math = "_acos({0})"


class AtanOp(MathOp):
    """``%r = tensor.atan %a : tensor<4xf32>``."""

    name = "tensor.atan"
    torch = "torch.atan({0})"
    math = "_atan({0})"


class AsinhOp(MathOp):
    """``%r = tensor.asinh %a : tensor<4xf32>``."""

    name = "tensor.asinh"
    torch = "torch.asinh({0})"
    math = "_asinh({0})"


class AcoshOp(MathOp):
    """``%r = tensor.acosh %a : tensor<4xf32>`` — NaN below 1."""

    name = "tensor.acosh"
    torch = "torch.acosh({0})"
    math = "_acosh({0})"


class AtanhOp(MathOp):
    """``%r = tensor.atanh %a : tensor<4xf32>`` — +-inf at +-1, NaN beyond."""

    name = "tensor.atanh"
    torch = "torch.atanh({0})"
    math = "_atanh({0})"


class Atan2Op(BinaryOp):
    """``%r = tensor.atan2 %y, %x : tensor<4xf32>`` — the angle of the point (x, y), in [-pi, pi]
    (C's atan2, signed zeros and infinities included)."""

    name = "tensor.atan2"
    torch = "torch.atan2({0}, {1})"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        out = super().infer_result_types(operand_types, attrs)
        if not out[0].is_float:
            raise InferError(f"expects floating-point operands, got {out[0].element_type}")
        return out

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        return in_f32(self.result.tensor_type, ins, lambda v: f"_atan2({v[0]}, {v[1]})")


class EluOp(UnaryOp):
    """ELU: ``scale * a`` for ``a > 0``, else ``scale * alpha * (exp(input_scale * a) - 1)``
    (torch's ``aten.elu``; each coefficient defaults to 1).

    ``%r = tensor.elu %a {alpha = 0.5, input_scale = 2.0, scale = 1.5} : tensor<4xf32>``
    """

    name = "tensor.elu"
    optional_attrs = {"alpha": FloatAttr, "scale": FloatAttr, "input_scale": FloatAttr}

    def coefficients(self) -> tuple[float, float, float]:
        return tuple(float(self.attr_value(k, 1.0)) for k in ("alpha", "scale", "input_scale"))  # type: ignore[return-value]

    def torch_expr(self, ins: Sequence[str]) -> str:
        alpha, scale, input_scale = self.coefficients()
        return f"torch.ops.aten.elu({ins[0]}, {literal(alpha)}, {literal(scale)}, {literal(input_scale)})"

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        alpha, scale, input_scale = self.coefficients()

        def elu(v: list[str]) -> str:
            x = v[0]
            neg = f"_expm1({x} * {literal(input_scale)}) * {literal(alpha * scale)}"
            return f"tl.where({x} > 0, {x} * {literal(scale)}, {neg})"

        return in_f32(self.result.tensor_type, ins, elu)


class LeakyReluOp(UnaryOp):
    """``a`` for ``a > 0``, else ``negative_slope * a`` (default 0.01).

    ``%r = tensor.leaky_relu %a {negative_slope = 0.2} : tensor<4xf32>``
    """

    name = "tensor.leaky_relu"
    optional_attrs = {"negative_slope": FloatAttr}

    @property
    def negative_slope(self) -> float:
        return float(self.attr_value("negative_slope", 0.01))

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.nn.functional.leaky_relu({ins[0]}, {literal(self.negative_slope)})"

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        # bf16/f16 in fp32 with the fp32 slope, rounded once (torch's CPU kernel)
        t = self.result.tensor_type
        slope = typed_literal(self.negative_slope, t) if t.element_type == "f64" else literal(self.negative_slope)
        return in_f32(t, ins, lambda v: f"tl.where({v[0]} > 0, {v[0]}, {v[0]} * {slope})", f64=True)


OPS = [SigmoidOp, SinOp, CosOp, ErfOp, Log1pOp, SiluOp, AbsOp, SignOp, GeluOp, GeluBackwardOp, PowOp, ClampOp,
       TanOp, SinhOp, CoshOp, AsinOp, AcosOp, AtanOp, AsinhOp, AcoshOp, AtanhOp, Atan2Op, EluOp, LeakyReluOp]
