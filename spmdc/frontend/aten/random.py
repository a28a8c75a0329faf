"""Handlers for random numbers: factories, in-place-style functional draws and dropout.

Each becomes one ``tensor.random`` whose eager semantics is the very call PyTorch makes on
one device (``torch.empty(shape, dtype).bernoulli_(p)`` for dropout's mask, ``uniform_`` for
``rand``, ``normal_`` for ``randn``, ``random_`` for ``randint``), so masks and samples are
bitwise equal to the single-device run under any plan (see
:mod:`spmdc.dialects.tensor.random`). ``torch.bernoulli(probs)`` arrives decomposed as
``rand_like(probs) < probs``, which is what eager PyTorch computes too.

``native_dropout(x, p, train)`` draws ``mask = bernoulli(1 - p)`` of ``x``'s type and returns
``(x * mask) * (1 / (1 - p))`` and the mask as ``i1``, the order of operations of PyTorch's
kernel; its backward is ``grad * (mask * scale)``. An explicit ``torch.Generator`` is refused:
spmdc only follows the default generator.
"""

from __future__ import annotations

from typing import Any

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, handles

A = "torch.aten."


def _check_generator(e: Emitter, i: int) -> None:
    if i < e.num_operands and not (e.is_const(i) and e.const(i) is None):
        raise e.unsupported("with an explicit torch.Generator: spmdc reproduces the default generator only")


def _random(e: Emitter, distribution: str, **params: Any) -> Any:
    out = e.out_type()
    return e.create(T.RandomOp, [], {"distribution": distribution, **params}, result_type=out)


def _number(e: Emitter, i: int, what: str) -> float:
    v = e.const(i)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise e.unsupported(f"with a non-constant {what} ({v!r})")
    return float(v)


@handles(A + "rand", A + "rand_like")
def _rand(e: Emitter):
    return [_random(e, "uniform", low=0.0, high=1.0)]


@handles(A + "randn", A + "randn_like")
def _randn(e: Emitter):
    return [_random(e, "normal", mean=0.0, std=1.0)]


@handles(A + "uniform")
def _uniform(e: Emitter):
    # (self, from, to, generator)
    _check_generator(e, 3)
    return [_random(e, "uniform", low=_number(e, 1, "lower bound"), high=_number(e, 2, "upper bound"))]


@handles(A + "normal_functional")
def _normal(e: Emitter):
    # (self, mean, std, generator)
    _check_generator(e, 3)
    return [_random(e, "normal", mean=_number(e, 1, "mean"), std=_number(e, 2, "standard deviation"))]


@handles(A + "bernoulli.p")
def _bernoulli_p(e: Emitter):
    # (self, p, generator)
    _check_generator(e, 2)
    return [_random(e, "bernoulli", p=_number(e, 1, "probability"))]


@handles(A + "randint", A + "randint.low", A + "randint_like", A + "randint_like.low_dtype")
def _randint(e: Emitter):
    name = e.rec.name
    if name in (A + "randint", A + "randint_like"):     # (high, size, ...) / (self, high, ...)
        low, high = 0, e.const(0 if name == A + "randint" else 1)
    else:                                                 # (low, high, size, ...) / (self, low, high, ...)
        first = 0 if name == A + "randint.low" else 1
        low, high = e.const(first), e.const(first + 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        raise e.unsupported(f"with non-constant bounds ({low!r}, {high!r})")
    return [_random(e, "randint", low=int(low), high=int(high))]


@handles(A + "native_dropout")
def _native_dropout(e: Emitter):
    # (input, p, train) -> (output, mask)
    x = e.tensor(0)
    t = x.tensor_type
    p, train = _number(e, 1, "dropout probability"), e.const(2)
    mask_type = t.with_element_type("i1")
    if not train or p == 0.0:
        return [x, e.splat(True, mask_type)]
    if not t.is_float:
        raise e.unsupported(f"on a non-floating-point tensor {t}")
    if p == 1.0:
        return [e.splat(0, t), e.splat(False, mask_type)]
    keep = e.create(T.RandomOp, [], {"distribution": "bernoulli", "p": 1.0 - p}, result_type=t)
    out = e.create(T.MulOp, [e.create(T.MulOp, [x, keep]), e.scalar(1.0 / (1.0 - p), t.element_type)])
    return [out, e.cast(keep, "i1")]


@handles(A + "native_dropout_backward")
def _native_dropout_backward(e: Emitter):
    # (grad_output, mask, scale)
    g, mask = e.tensor(0), e.tensor(1)
    scale = _number(e, 2, "scale")
    elt = g.tensor_type.element_type
    scaled = e.create(T.MulOp, [e.cast(mask, elt), e.scalar(scale, elt)])
    return [e.create(T.MulOp, [g, scaled])]
