"""Pointwise math beyond the basics: activations, trig, erf, pow, clamp.

    %0 = tensor.gelu %x {approximate = "tanh"} : tensor<8x16xf32>
    %1 = tensor.sigmoid %0 : tensor<8x16xf32>
    %2 = tensor.pow %1, %two : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
    %3 = tensor.clamp %i {max = 63, min = 0} : tensor<8xi64>
"""

from __future__ import annotations

from typing import Any

from spmdc.ir.attributes import FloatAttr, IntegerAttr, StringAttr
from spmdc.ir.core import InferError
from spmdc.dialects.tensor.base import tensor_types, torch_module
from spmdc.dialects.tensor.elementwise import BinaryOp, UnaryOp, _unary
from spmdc.dialects.tensor.helpers import number_attr, str_attr


def _t() -> Any:
    return torch_module()


SigmoidOp = _unary("tensor.sigmoid", "``%r = tensor.sigmoid %a : tensor<4xf32>`` — 1/(1+exp(-a)).",
                   lambda a: _t().sigmoid(a))
SinOp = _unary("tensor.sin", "``%r = tensor.sin %a : tensor<4xf32>``.", lambda a: _t().sin(a))
CosOp = _unary("tensor.cos", "``%r = tensor.cos %a : tensor<4xf32>``.", lambda a: _t().cos(a))
ErfOp = _unary("tensor.erf", "``%r = tensor.erf %a : tensor<4xf32>`` — the Gauss error function.",
               lambda a: _t().erf(a))
SiluOp = _unary("tensor.silu", "``%r = tensor.silu %a : tensor<4xf32>`` — a * sigmoid(a).",
                lambda a: _t().nn.functional.silu(a))
AbsOp = _unary("tensor.abs", "``%r = tensor.abs %a : tensor<4xf32>`` — |a|.", lambda a: _t().abs(a),
               float_only=False)
SignOp = _unary("tensor.sign", "``%r = tensor.sign %a : tensor<4xf32>`` — -1, 0 or 1.", lambda a: _t().sign(a),
                float_only=False)


class GeluOp(UnaryOp):
    """GELU; ``approximate`` is ``"none"`` (erf, the default) or ``"tanh"``.

    ``%r = tensor.gelu %a {approximate = "tanh"} : tensor<8x16xf32>``
    """

    name = "tensor.gelu"
    optional_attrs = {"approximate": StringAttr}
    traits = UnaryOp.traits | {"SameOperandsAndResultType"}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        str_attr(attrs, "approximate", ("none", "tanh"), default="none")
        return super().infer_result_types(operand_types, attrs)

    def reference(self, a: Any) -> Any:
        approx = self.attr_value("approximate", "none")
        return _t().nn.functional.gelu(a, approximate=approx)


class PowOp(BinaryOp):
    """``a ** b`` with broadcasting (a rank-0 exponent is the common case).

    ``%r = tensor.pow %a, %e : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>``
    """

    name = "tensor.pow"

    def reference(self, a: Any, b: Any) -> Any:
        if b.dim() == 0:  # same kernel as torch's Tensor_Scalar overload
            return _t().pow(a, b.item())
        return _t().pow(a, b)


class ClampOp(UnaryOp):
    """Clamp into ``[min, max]``; either bound may be absent (not both).

    ``%r = tensor.clamp %a {max = 6.0, min = 0.0} : tensor<4xf32>``
    """

    name = "tensor.clamp"
    float_only = False
    optional_attrs = {"min": (IntegerAttr, FloatAttr), "max": (IntegerAttr, FloatAttr)}
    traits = UnaryOp.traits | {"SameOperandsAndResultType"}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        lo, hi = number_attr(attrs, "min"), number_attr(attrs, "max")
        if lo is None and hi is None:
            raise InferError("needs at least one of 'min' and 'max'")
        if not a.is_float and any(isinstance(attrs.get(k), FloatAttr) for k in ("min", "max")):
            raise InferError(f"float bounds on an integer tensor {a}")
        return [a]

    def reference(self, a: Any) -> Any:
        return _t().clamp(a, self.attr_value("min"), self.attr_value("max"))


OPS = [SigmoidOp, SinOp, CosOp, ErfOp, SiluOp, AbsOp, SignOp, GeluOp, PowOp, ClampOp]
