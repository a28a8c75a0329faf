"""Triton forms of the math functions ``triton.language`` lacks (atan, asinh, expm1, round...).

Each is a ``@triton.jit`` helper registered in :data:`~spmdc.dialects.tensor.base.TRITON_HELPERS`
(a generated program defines the ones its kernels call) and written for fp32 blocks: the ops
using them compute bf16/f16 in fp32 and round once (:func:`in_f32`), as torch does on CPU, and
give no kernel form for f64 (the polynomials are fp32-accurate only). The formulas avoid
cancellation and premature overflow, handle infinities, NaN and signed zeros like C's libm::

    v_r = _atan2(v_y, v_x)     # in a fused elementwise kernel

A helper cannot call another (only the kernel text is scanned for the helpers it needs), so
the shared pieces are Python text spliced into each source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spmdc.dialects.tensor.base import TRITON_HELPERS, triton_type
from spmdc.ir.types import TensorType

LOW_PRECISION = ("bf16", "f16")


def in_f32(t: TensorType, ins: Sequence[str], make: Callable[[list[str]], str], f64: bool = False) -> str | None:
    """``make(ins)`` on fp32 values: bf16/f16 operands are widened and the result rounded once;
    f64 only where ``f64`` says the formula is exact there (else None: no kernel form)."""
    elt = t.element_type
    if elt in LOW_PRECISION:
        return f"({make([f'{x}.to(tl.float32)' for x in ins])}).to({triton_type(t)})"
    if elt == "f32" or (elt == "f64" and f64):
        return make(list(ins))
    return None


# atan(t) for t >= 0 (or NaN) into `r`: Cephes' atanf, |t| reduced to [0, tan(pi/8)] and a
# degree-9 odd polynomial (relative error 2e-7); t = inf gives pi/2
_ATAN_POS = """\
    big = {t} > 2.414213562373095
    mid = {t} > 0.4142135623730950
    z = tl.where(big, -1.0 / {t}, tl.where(mid, ({t} - 1.0) / ({t} + 1.0), {t}))
    z2 = z * z
    p = (((0.0805374449538 * z2 - 0.138776856032) * z2 + 0.199777106478) * z2 - 0.333329491539) * z2 * z + z
    r = tl.where(big, 1.5707963267948966, tl.where(mid, 0.7853981633974483, 0.0)) + p
"""

# log1p(w) into `l` (Kahan: with u = 1 + w, log(u) * w / (u - 1); w where u == 1; inf stays inf)
_LOG1P = """\
    u = 1.0 + {w}
    l = tl.where(u == 1.0, {w}, tl.where(u == float('inf'), u, tl.log(u) * ({w} / (u - 1.0))))
"""

# odd functions keep the input's sign, -0.0 included
_ODD = "    return tl.where({x} < 0, -{r}, tl.where({x} == 0, {x}, {r}))"

HELPERS: dict[str, str] = {
    "_atan": "@triton.jit\ndef _atan(x):\n    a = tl.abs(x)\n" + _ATAN_POS.format(t="a") + _ODD.format(x="x", r="r"),
    # asin(x) = atan(x / sqrt(1 - x^2)); |x| > 1 gives NaN (a negative square)
    "_asin": ("@triton.jit\ndef _asin(x):\n    a = tl.abs(x)\n    q = a / tl.sqrt((1.0 - a) * (1.0 + a))\n"
              + _ATAN_POS.format(t="q") + _ODD.format(x="x", r="r")),
    # acos(x) = 2 atan(sqrt((1 - x) / (1 + x))): pi at -1, 0 at 1, NaN outside
    "_acos": ("@triton.jit\ndef _acos(x):\n    q = tl.sqrt((1.0 - x) / (1.0 + x))\n"
              + _ATAN_POS.format(t="q") + "    return 2.0 * r"),
    # C's atan2: the angle of min/max in [0, pi/4] reflected into the quadrant; signs of zeros count
    "_atan2": ("@triton.jit\ndef _atan2(y, x):\n"
               "    ax = tl.abs(x)\n    ay = tl.abs(y)\n"
               "    hi = tl.maximum(ax, ay)\n    lo = tl.minimum(ax, ay)\n"
               "    inf = float('inf')\n"
               "    q = tl.where(hi == 0.0, 0.0, tl.where((ax == inf) & (ay == inf), 1.0, lo / hi))\n"
               + _ATAN_POS.format(t="q")
               + "    r = tl.where(ay > ax, 1.5707963267948966 - r, r)\n"
               "    r = tl.where(x.to(tl.int32, bitcast=True) < 0, 3.141592653589793 - r, r)\n"
               "    r = tl.where(y.to(tl.int32, bitcast=True) < 0, -r, r)\n"
               "    return tl.where((x != x) | (y != y), x + y, r)"),
    # sinh: an odd Taylor series below 0.5; above, with h = exp(|x|/2), (h - 1/h)/2 * (h + 1/h):
    # finite up to the result's own overflow (|x| 89.4, as CUDA's sinhf; torch's CPU kernel gives
    # inf from 88.7, where exp overflows)
    "_sinh": ("@triton.jit\ndef _sinh(x):\n    a = tl.abs(x)\n    x2 = x * x\n"
              "    small = x * (1.0 + x2 * (0.16666666666666666 + x2 * (0.008333333333333333 + x2 * ("
              "1.984126984126984e-04 + x2 * 2.755731922398589e-06))))\n"
              "    h = tl.exp(0.5 * a)\n    big = (0.5 * (h - 1.0 / h)) * (h + 1.0 / h)\n"
              "    return tl.where(a < 0.5, small, tl.where(x < 0, -big, big))"),
    # cosh = h * h / 2 + 1 / (2 h h), h = exp(|x|/2): finite up to the result's own overflow, as sinh
    "_cosh": ("@triton.jit\ndef _cosh(x):\n    h = tl.exp(0.5 * tl.abs(x))\n"
              "    return (0.5 * h) * h + (0.5 / h) / h"),
    # expm1: Taylor series (degree 10) below 0.5 in magnitude, exp(x) - 1 above
    "_expm1": ("@triton.jit\ndef _expm1(x):\n"
               "    small = x * (1.0 + x * (0.5 + x * (0.16666666666666666 + x * (0.041666666666666664 + x * ("
               "0.008333333333333333 + x * (0.001388888888888889 + x * (1.984126984126984e-04 + x * ("
               "2.48015873015873e-05 + x * (2.755731922398589e-06 + x * 2.755731922398589e-07)))))))))\n"
               "    return tl.where(tl.abs(x) < 0.5, small, tl.exp(x) - 1.0)"),
    # asinh(|x|) = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))); log(2|x|) above 2^28
    "_asinh": ("@triton.jit\ndef _asinh(x):\n    a = tl.abs(x)\n    w = a + a * a / (1.0 + tl.sqrt(1.0 + a * a))\n"
               + _LOG1P.format(w="w")
               + "    r = tl.where(a > 268435456.0, tl.log(a) + 0.6931471805599453, l)\n"
               + _ODD.format(x="x", r="r")),
    # acosh(x) = log1p(x - 1 + sqrt((x - 1)(x + 1))); log(2x) above 2^28; NaN below 1
    "_acosh": ("@triton.jit\ndef _acosh(x):\n    t = x - 1.0\n    w = t + tl.sqrt(t * (x + 1.0))\n"
               + _LOG1P.format(w="w")
               + "    r = tl.where(x > 268435456.0, tl.log(x) + 0.6931471805599453, l)\n"
               "    return tl.where(x < 1.0, float('nan'), r)"),
    # atanh(|x|) = log1p(2|x| / (1 - |x|)) / 2: inf at 1, NaN beyond
    "_atanh": ("@triton.jit\ndef _atanh(x):\n    a = tl.abs(x)\n    w = (2.0 * a) / (1.0 - a)\n"
               + _LOG1P.format(w="w") + "    r = 0.5 * l\n" + _ODD.format(x="x", r="r")),
    # round half to even (torch.round): floor, then up when the rest is above 1/2 or 1/2 on an
    # odd floor; a zero result keeps the input's sign
    "_round": ("@triton.jit\ndef _round(x):\n    f = tl.floor(x)\n    d = x - f\n"
               "    odd = (f - 2.0 * tl.floor(0.5 * f)) != 0.0\n"
               "    y = tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)\n"
               "    return tl.where(y == 0.0, x * 0.0, y)"),
    # torch.remainder on integers: C's remainder moved to the divisor's sign
    "_remainder_int": ("@triton.jit\ndef _remainder_int(a, b):\n    r = a % b\n"
                       "    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)"),
}

TRITON_HELPERS.update(HELPERS)


def trunc_expr(x: str) -> str:
    """Rounding toward zero on a float block (fp32/fp64: ``tl.floor``/``tl.ceil`` take no other)."""
    return f"tl.where({x} < 0, tl.ceil({x}), tl.floor({x}))"
