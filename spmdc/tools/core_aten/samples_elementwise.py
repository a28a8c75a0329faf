"""Core ATen samples: elementwise ops (see :class:`spmdc.tools.core_aten.Sample`).

Every core pointwise overload has at least one call here: float inputs inside the op's domain
(and away from kinks, ties and poles, so gradients are well defined where ``train``), integer
and bool inputs where torch takes them (its type promotion is part of what is compared), and
the special values an op exists for (isinf, isnan, round's halves).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from spmdc.tools.core_aten import Sample

aten = torch.ops.aten


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def uniform(lo: float, hi: float, *shape: int) -> torch.Tensor:
    return torch.rand(*shape) * (hi - lo) + lo


def positive(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) + 0.5


def signed_away_from_zero(*shape: int) -> torch.Tensor:
    """|x| in [0.5, 1.5) with a random sign: a divisor, or an input away from a kink at 0."""
    return positive(*shape) * torch.where(torch.rand(*shape) < 0.5, -1.0, 1.0)


def ints(*shape: int, lo: int = -9, hi: int = 10, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(lo, hi, shape, dtype=dtype)


def nonzero_ints(*shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(1, 6, shape, dtype=dtype) * torch.where(torch.rand(*shape) < 0.5, -1, 1).to(dtype)


def bools(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) < 0.5


def specials() -> torch.Tensor:
    """Finite values, both infinities and NaN."""
    return torch.tensor([[1.0, float("inf"), -2.5, float("nan")], [float("-inf"), 0.0, -0.0, 3e38],
                         [float("nan"), 7.0, float("-inf"), 1e-40]])


def halves() -> torch.Tensor:
    """Ties of round-half-to-even, and values next to them."""
    return torch.tensor([[0.5, 1.5, 2.5, -0.5], [-1.5, -2.5, 0.49999997, 2.5000002],
                         [-3.5, 1e8, -0.2, 4.5]])


X = (3, 4)

_UNARY_FLOAT = [
    ("aten.abs.default", torch.abs, lambda: (signed_away_from_zero(*X),)),
    ("aten.acos.default", torch.acos, lambda: (uniform(-0.9, 0.9, *X),)),
    ("aten.acosh.default", torch.acosh, lambda: (uniform(1.2, 4.0, *X),)),
    ("aten.asin.default", torch.asin, lambda: (uniform(-0.9, 0.9, *X),)),
    ("aten.asinh.default", torch.asinh, lambda: (randn(*X) * 3,)),
    ("aten.atan.default", torch.atan, lambda: (randn(*X) * 3,)),
    ("aten.atanh.default", torch.atanh, lambda: (uniform(-0.9, 0.9, *X),)),
    ("aten.ceil.default", torch.ceil, lambda: (randn(*X) * 3,)),
    ("aten.cos.default", torch.cos, lambda: (randn(*X),)),
    ("aten.cosh.default", torch.cosh, lambda: (randn(*X) * 2,)),
    ("aten.erf.default", torch.erf, lambda: (randn(*X),)),
    ("aten.exp.default", torch.exp, lambda: (randn(*X),)),
    ("aten.expm1.default", torch.expm1, lambda: (randn(*X),)),
    ("aten.floor.default", torch.floor, lambda: (randn(*X) * 3,)),
    ("aten.log.default", torch.log, lambda: (positive(*X),)),
    ("aten.log10.default", torch.log10, lambda: (positive(*X),)),
    ("aten.log1p.default", torch.log1p, lambda: (uniform(-0.5, 2.0, *X),)),
    ("aten.log2.default", torch.log2, lambda: (positive(*X),)),
    ("aten.neg.default", torch.neg, lambda: (randn(*X),)),
    ("aten.reciprocal.default", torch.reciprocal, lambda: (signed_away_from_zero(*X),)),
    ("aten.relu.default", torch.relu, lambda: (signed_away_from_zero(*X),)),
    ("aten.round.default", torch.round, lambda: (randn(*X) * 3,)),
    ("aten.rsqrt.default", torch.rsqrt, lambda: (positive(*X),)),
    ("aten.sigmoid.default", torch.sigmoid, lambda: (randn(*X),)),
    ("aten.sign.default", torch.sign, lambda: (signed_away_from_zero(*X),)),
    ("aten.sin.default", torch.sin, lambda: (randn(*X),)),
    ("aten.sinh.default", torch.sinh, lambda: (randn(*X) * 2,)),
    ("aten.sqrt.default", torch.sqrt, lambda: (positive(*X),)),
    ("aten.tan.default", torch.tan, lambda: (uniform(-1.2, 1.2, *X),)),
    ("aten.tanh.default", torch.tanh, lambda: (randn(*X),)),
    ("aten.trunc.default", torch.trunc, lambda: (randn(*X) * 3,)),
]

# integer and bool inputs: torch computes the float functions in the default float type and
# returns integers unchanged from the roundings
_UNARY_INT = [
    ("aten.abs.default", torch.abs, lambda: (ints(*X, dtype=torch.int32),)),
    ("aten.acos.default", torch.acos, lambda: (ints(*X, lo=-1, hi=2),)),
    ("aten.asinh.default", torch.asinh, lambda: (ints(*X, dtype=torch.int32),)),
    ("aten.atan.default", torch.atan, lambda: (bools(*X),)),
    ("aten.ceil.default", torch.ceil, lambda: (ints(*X),)),
    ("aten.cosh.default", torch.cosh, lambda: (ints(*X, lo=-3, hi=4),)),
    ("aten.exp.default", torch.exp, lambda: (ints(*X, lo=-3, hi=4),)),
    ("aten.expm1.default", torch.expm1, lambda: (ints(*X, lo=-3, hi=4, dtype=torch.int16),)),
    ("aten.floor.default", torch.floor, lambda: (ints(*X, dtype=torch.int32),)),
    ("aten.log2.default", torch.log2, lambda: (ints(*X, lo=1, hi=100),)),
    ("aten.log10.default", torch.log10, lambda: (ints(*X, lo=1, hi=1000, dtype=torch.int32),)),
    ("aten.neg.default", torch.neg, lambda: (ints(*X, dtype=torch.int8),)),
    ("aten.relu.default", torch.relu, lambda: (ints(*X),)),
    ("aten.round.default", torch.round, lambda: (ints(*X),)),
    ("aten.sign.default", torch.sign, lambda: (ints(*X),)),
    ("aten.sin.default", torch.sin, lambda: (ints(*X),)),
    ("aten.sinh.default", torch.sinh, lambda: (ints(*X, lo=-3, hi=4, dtype=torch.int8),)),
    ("aten.sqrt.default", torch.sqrt, lambda: (ints(*X, lo=0, hi=50),)),
    ("aten.tan.default", torch.tan, lambda: (ints(*X, lo=-1, hi=2),)),
    ("aten.trunc.default", torch.trunc, lambda: (ints(*X, dtype=torch.int16),)),
]

_BINARY_FLOAT = [
    ("aten.add.Tensor", lambda a, b: torch.add(a, b), lambda: (randn(*X), randn(4))),
    ("aten.add.Tensor", lambda a, b: torch.add(a, b, alpha=2.5), lambda: (randn(*X), randn(3, 1))),
    ("aten.add.Scalar", lambda a: aten.add.Scalar(a, 2.5, alpha=3), lambda: (randn(*X),)),
    ("aten.atan2.default", torch.atan2, lambda: (randn(*X), signed_away_from_zero(*X))),
    ("aten.atan2.default", torch.atan2, lambda: (signed_away_from_zero(*X), randn(4))),
    ("aten.div.Scalar", lambda a: aten.div.Scalar(a, 3.0), lambda: (randn(*X),)),
    ("aten.div.Tensor", torch.div, lambda: (randn(*X), signed_away_from_zero(4))),
    ("aten.maximum.default", torch.maximum, lambda: (randn(*X), randn(*X))),
    ("aten.minimum.default", torch.minimum, lambda: (randn(*X), randn(4))),
    ("aten.mul.Scalar", lambda a: aten.mul.Scalar(a, -1.5), lambda: (randn(*X),)),
    ("aten.mul.Tensor", torch.mul, lambda: (randn(*X), randn(*X))),
    ("aten.pow.Scalar", lambda a: torch.pow(2.0, a), lambda: (randn(*X),)),
    ("aten.pow.Tensor_Scalar", lambda a: torch.pow(a, 3), lambda: (randn(*X),)),
    ("aten.pow.Tensor_Scalar", lambda a: torch.pow(a, 0.5), lambda: (positive(*X),)),
    ("aten.pow.Tensor_Tensor", torch.pow, lambda: (positive(*X), randn(*X))),
    ("aten.sub.Scalar", lambda a: aten.sub.Scalar(a, 1.5, alpha=2), lambda: (randn(*X),)),
    ("aten.sub.Tensor", lambda a, b: torch.sub(a, b, alpha=0.5), lambda: (randn(*X), randn(*X))),
    # fmod/remainder: the gradient of the divisor is minus the rounded quotient (a div with a
    # rounding mode in the backward graph); quotients away from integers
    ("aten.fmod.Tensor", torch.fmod, lambda: (randn(*X) * 4, signed_away_from_zero(*X))),
    ("aten.fmod.Scalar", lambda a: torch.fmod(a, 1.5), lambda: (randn(*X) * 4,)),
    ("aten.remainder.Tensor", torch.remainder, lambda: (randn(*X) * 4, signed_away_from_zero(4))),
    ("aten.remainder.Scalar", lambda a: torch.remainder(a, -1.25), lambda: (randn(*X) * 4,)),
    ("aten.div.Tensor_mode", lambda a, b: torch.div(a, b, rounding_mode="trunc"),
     lambda: (randn(*X) * 4, signed_away_from_zero(*X))),
    ("aten.div.Tensor_mode", lambda a, b: torch.div(a, b, rounding_mode="floor"),
     lambda: (randn(*X) * 4, signed_away_from_zero(4))),
    ("aten.div.Tensor_mode", lambda a, b: torch.div(a, b, rounding_mode=None), lambda: (randn(*X), positive(*X))),
    ("aten.div.Scalar_mode", lambda a: aten.div.Scalar_mode(a, 0.75, rounding_mode="floor"),
     lambda: (randn(*X) * 4,)),
    ("aten.div.Scalar_mode", lambda a: aten.div.Scalar_mode(a, -2.0, rounding_mode="trunc"),
     lambda: (randn(*X) * 4,)),
]

# integer operands, mixed dtypes (torch's promotion decides the result type)
_BINARY_INT = [
    ("aten.add.Tensor", torch.add, lambda: (ints(*X, dtype=torch.int32), ints(4))),
    ("aten.add.Tensor", torch.add, lambda: (ints(*X), randn(*X))),
    ("aten.add.Scalar", lambda a: aten.add.Scalar(a, 2.5), lambda: (ints(*X),)),
    ("aten.atan2.default", torch.atan2, lambda: (ints(*X), nonzero_ints(*X, dtype=torch.int32))),
    ("aten.div.Scalar", lambda a: aten.div.Scalar(a, 4), lambda: (ints(*X),)),
    ("aten.div.Tensor", torch.div, lambda: (ints(*X), nonzero_ints(*X))),
    ("aten.div.Tensor_mode", lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda: (ints(*X), nonzero_ints(4))),
    ("aten.div.Tensor_mode", lambda a, b: torch.div(a, b, rounding_mode="floor"), lambda: (ints(*X), nonzero_ints(*X))),
    ("aten.div.Scalar_mode", lambda a: aten.div.Scalar_mode(a, -3, rounding_mode="floor"), lambda: (ints(*X),)),
    ("aten.fmod.Tensor", torch.fmod, lambda: (ints(*X), nonzero_ints(*X))),
    ("aten.fmod.Tensor", torch.fmod, lambda: (ints(*X, dtype=torch.int32), positive(*X))),
    ("aten.fmod.Scalar", lambda a: torch.fmod(a, -4), lambda: (ints(*X, dtype=torch.int32),)),
    ("aten.fmod.Scalar", lambda a: torch.fmod(a, 2.5), lambda: (ints(*X),)),
    ("aten.remainder.Tensor", torch.remainder, lambda: (ints(*X), nonzero_ints(4))),
    ("aten.remainder.Scalar", lambda a: torch.remainder(a, -4), lambda: (ints(*X, dtype=torch.int16),)),
    ("aten.remainder.Scalar", lambda a: torch.remainder(a, 3), lambda: (bools(*X),)),
    ("aten.maximum.default", torch.maximum, lambda: (ints(*X), ints(*X, dtype=torch.int32))),
    ("aten.minimum.default", torch.minimum, lambda: (ints(*X, dtype=torch.int8), ints(4, dtype=torch.int8))),
    ("aten.mul.Scalar", lambda a: aten.mul.Scalar(a, 3), lambda: (ints(*X),)),
    ("aten.mul.Tensor", torch.mul, lambda: (ints(*X), bools(*X))),
    ("aten.pow.Scalar", lambda a: torch.pow(2, a), lambda: (ints(*X, lo=0, hi=8),)),
    ("aten.pow.Tensor_Scalar", lambda a: torch.pow(a, 2), lambda: (ints(*X),)),
    ("aten.pow.Tensor_Tensor", torch.pow, lambda: (ints(*X), ints(*X, lo=0, hi=4))),
    ("aten.sub.Scalar", lambda a: aten.sub.Scalar(a, 2, alpha=3), lambda: (ints(*X),)),
    ("aten.sub.Tensor", torch.sub, lambda: (ints(*X, dtype=torch.int16), ints(3, 1, dtype=torch.int16))),
]

_BITWISE = [
    ("aten.bitwise_and.Tensor", torch.bitwise_and, lambda: (ints(*X), ints(4))),
    ("aten.bitwise_or.Tensor", torch.bitwise_or, lambda: (bools(*X), bools(*X))),
    ("aten.bitwise_xor.Tensor", torch.bitwise_xor, lambda: (ints(*X, dtype=torch.int32), ints(*X, dtype=torch.int32))),
    ("aten.bitwise_and.Scalar", lambda a: aten.bitwise_and.Scalar(a, 6), lambda: (ints(*X),)),
    ("aten.bitwise_and.Scalar", lambda a: aten.bitwise_and.Scalar(a, True), lambda: (bools(*X),)),
    ("aten.bitwise_or.Scalar", lambda a: aten.bitwise_or.Scalar(a, -8), lambda: (ints(*X, dtype=torch.int32),)),
    ("aten.bitwise_or.Scalar", lambda a: aten.bitwise_or.Scalar(a, 2), lambda: (bools(*X),)),  # bool | int: i64
    ("aten.bitwise_xor.Scalar", lambda a: aten.bitwise_xor.Scalar(a, 5), lambda: (ints(*X, dtype=torch.int8),)),
    ("aten.bitwise_xor.Scalar", lambda a: aten.bitwise_xor.Scalar(a, False), lambda: (bools(*X),)),
    ("aten.bitwise_not.default", torch.bitwise_not, lambda: (ints(*X),)),
    ("aten.bitwise_not.default", torch.bitwise_not, lambda: (bools(*X),)),
    ("aten.logical_and.default", torch.logical_and, lambda: (randn(*X), ints(4, lo=0, hi=2))),
    ("aten.logical_or.default", torch.logical_or, lambda: (bools(*X), bools(*X))),
    ("aten.logical_xor.default", torch.logical_xor, lambda: (ints(*X, lo=0, hi=2), bools(4))),
    ("aten.logical_not.default", torch.logical_not, lambda: (ints(*X, lo=-1, hi=2),)),
    ("aten.logical_not.default", torch.logical_not, lambda: (bools(*X),)),
    ("aten.isinf.default", torch.isinf, lambda: (specials(),)),
    ("aten.isinf.default", torch.isinf, lambda: (ints(*X),)),
    ("aten.isnan.default", torch.isnan, lambda: (specials(),)),
    ("aten.isnan.default", torch.isnan, lambda: (specials().to(torch.bfloat16),)),
    ("aten.isnan.default", torch.isnan, lambda: (bools(*X),)),
]

_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")
_COMPARE = [
    *[(f"aten.{p}.Tensor", getattr(torch, p), lambda: (randn(*X), randn(4))) for p in _PREDICATES],
    *[(f"aten.{p}.Scalar", lambda a, p=p: getattr(torch, p)(a, 0.25), lambda: (randn(*X),)) for p in _PREDICATES],
    ("aten.eq.Tensor", torch.eq, lambda: (ints(*X, lo=0, hi=3), ints(4, lo=0, hi=3, dtype=torch.int32))),
    ("aten.lt.Tensor", torch.lt, lambda: (ints(*X), randn(*X) * 5)),
    ("aten.eq.Scalar", lambda a: a == 2, lambda: (ints(*X, lo=0, hi=4),)),
    ("aten.ge.Scalar", lambda a: a >= 0.5, lambda: (ints(*X, lo=-2, hi=3),)),
    ("aten.ne.Scalar", lambda a: a != 1, lambda: (bools(*X),)),
    # a 0-dim f64 tensor with an integer one compares in f64 (f32 would call 2^24 + 1 equal to 2^24)
    ("aten.eq.Tensor", torch.eq, lambda: (torch.tensor([[16777217, 3], [16777216, -1]]),
                                          torch.tensor(16777216.0, dtype=torch.float64))),
    ("aten.eq.Scalar", lambda a: a == 0.1, lambda: (torch.full((3, 4), 0.1).to(torch.bfloat16),)),  # in bf16
]

_ACTIVATIONS = [
    ("aten.elu.default", F.elu, lambda: (signed_away_from_zero(*X),)),
    ("aten.elu.default", lambda a: F.elu(a, alpha=0.7), lambda: (randn(*X),)),
    ("aten.elu.default", lambda a: aten.elu(a, 1.2, 1.5, 0.8), lambda: (signed_away_from_zero(*X),)),
    ("aten.elu.default", F.selu, lambda: (signed_away_from_zero(*X),)),
    ("aten.gelu.default", F.gelu, lambda: (randn(*X),)),
    ("aten.gelu.default", lambda a: F.gelu(a, approximate="tanh"), lambda: (randn(*X),)),
    ("aten.hardtanh.default", F.hardtanh, lambda: (randn(*X) * 2,)),
    ("aten.hardtanh.default", lambda a: F.hardtanh(a, -0.5, 0.25), lambda: (randn(*X),)),
    ("aten.hardtanh.default", F.relu6, lambda: (randn(*X) * 5,)),
    ("aten.leaky_relu.default", F.leaky_relu, lambda: (signed_away_from_zero(*X),)),
    ("aten.leaky_relu.default", lambda a: F.leaky_relu(a, 0.2), lambda: (randn(*X),)),
    ("aten.clamp.default", lambda a: torch.clamp(a, -0.5, 0.5), lambda: (randn(*X),)),
    ("aten.clamp.default", lambda a: torch.clamp(a, min=0.1), lambda: (randn(*X),)),
    ("aten.clamp.Tensor", torch.clamp, lambda: (randn(*X), randn(4) - 0.5, randn(3, 1) + 0.5)),
    ("aten.clamp.Tensor", lambda a, lo: torch.clamp(a, min=lo), lambda: (randn(*X), randn(*X))),
    ("aten.clamp.Tensor", lambda a, hi: torch.clamp(a, max=hi), lambda: (randn(*X), randn(4))),
    ("aten.where.self", torch.where, lambda: (bools(*X), randn(*X), randn(4))),
    ("aten._to_copy.default", lambda a: a.to(torch.float64), lambda: (randn(*X),)),
]

# integer, bf16 and special-value forms of the above (never trained)
_EXACT = [
    ("aten.round.default", torch.round, lambda: (halves(),)),
    ("aten.round.default", torch.round, lambda: (halves().to(torch.bfloat16),)),
    ("aten.ceil.default", torch.ceil, lambda: (specials(),)),
    ("aten.trunc.default", torch.trunc, lambda: (halves().to(torch.float64),)),
    ("aten.clamp.default", lambda a: torch.clamp(a, 0, 5), lambda: (ints(*X),)),
    ("aten.clamp.default", lambda a: torch.clamp(a, -1.5, 2.5), lambda: (ints(*X),)),  # promotes to float
    ("aten.clamp.default", lambda a: torch.clamp(a, -1.0, 1.0), lambda: (specials(),)),
    ("aten.clamp.Tensor", torch.clamp, lambda: (ints(*X), ints(4, lo=-5, hi=0), ints(3, 1, lo=0, hi=5))),
    ("aten.clamp.Tensor", lambda a, lo: torch.clamp(a, min=lo), lambda: (ints(*X, dtype=torch.int32), randn(4))),
    ("aten.clamp.Tensor", torch.clamp, lambda: (specials(), torch.full((4,), -1.0), torch.full((3, 1), 2.0))),
    ("aten.hardtanh.default", lambda a: aten.hardtanh(a, -1.5, 2.5), lambda: (ints(*X),)),  # bounds truncated
    ("aten.hardtanh.default", F.hardtanh, lambda: (specials(),)),
    ("aten.leaky_relu.default", lambda a: F.leaky_relu(a, 0.01), lambda: (randn(*X).to(torch.bfloat16),)),
    ("aten.elu.default", F.elu, lambda: (randn(*X).to(torch.bfloat16),)),
    ("aten.maximum.default", torch.maximum, lambda: (specials(), randn(*X))),
    ("aten.relu.default", torch.relu, lambda: (specials(),)),
    ("aten.where.self", torch.where, lambda: (bools(*X), ints(*X), ints(3, 1))),
    ("aten.where.self", torch.where, lambda: (bools(*X), ints(*X), randn(4))),
    ("aten._to_copy.default", lambda a: a.to(torch.float32), lambda: (ints(*X),)),
    ("aten._to_copy.default", lambda a: a.to(torch.int32), lambda: (randn(*X) * 10,)),
    ("aten._to_copy.default", lambda a: a.to(torch.bool), lambda: (ints(*X, lo=-1, hi=2),)),
    ("aten.atan2.default", torch.atan2,
     lambda: (torch.tensor([[0.0, -0.0, 0.0, -0.0], [1.0, -1.0, float("inf"), float("-inf")], [2.0, 0.0, -3.0, 1.0]]),
              torch.tensor([[0.0, 0.0, -0.0, -0.0], [float("inf"), float("-inf"), float("inf"), -1.0],
                            [0.0, -5.0, float("nan"), 1e-30]]))),
]

SAMPLES: list[Sample] = [
    *[Sample(op, fn, make) for op, fn, make in _UNARY_FLOAT + _BINARY_FLOAT + _ACTIVATIONS],
    *[Sample(op, fn, make, train=False)
      for op, fn, make in _UNARY_INT + _BINARY_INT + _BITWISE + _COMPARE + _EXACT],
]
