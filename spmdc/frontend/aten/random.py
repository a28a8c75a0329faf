"""Handlers for random numbers: factories, in-place-style functional draws and dropout.

Each becomes one ``tensor.random`` whose eager semantics is the very call PyTorch makes on
one device (``torch.empty(shape, dtype).bernoulli_(p)`` for dropout's mask, ``uniform_`` for
``rand``, ``normal_`` for ``randn``, ``random_`` for ``randint``), so masks and samples are
bitwise equal to the single-device run under any plan (see
:mod:`spmdc.dialects.tensor.random`). ``torch.bernoulli(probs)`` arrives decomposed as
``rand_like(probs) < probs``, which is what eager PyTorch computes too.

``native_dropout(x, p, train)`` (what export makes of ``F.dropout``; ``aten.dropout`` /
``feature_dropout`` follow eager's composite form when they survive) draws
``mask = bernoulli(1 - p)`` of ``x``'s type and returns
``(x * mask) * (1 / (1 - p))`` and the mask as ``i1``, the order of operations of PyTorch's
kernel; its backward is ``grad * (mask * scale)``. An explicit ``torch.Generator`` is refused:
spmdc only follows the default generator. ``randperm(n)`` is ``tensor.randperm``, the call
``torch.randperm(n, dtype=...)`` itself (eager's permutation; ``randperm.generator`` has no handler).
"""

from __future__ import annotations

from typing import Any

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, handles

A = "torch.aten."


def storage_order(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> list[int] | None:
    """Dims from outermost to innermost in the memory of a tensor ``empty_like`` makes from one with
    ``strides`` (torch's ``preserve_format``: the input's stride order, ambiguous zero strides
    keeping their place); None when that is the logical (row-major) order.

    Random draws fill memory in storage order, so eager PyTorch's ``dropout(x.transpose(0, 1))``
    draws its mask in ``x``'s order; spmdc draws the same numbers and permutes them."""
    if strides is None or len(strides) != len(shape):
        return None

    def should_swap(d0: int, d1: int) -> int:
        s0, s1 = strides[d0], strides[d1]
        if s0 == 0 or s1 == 0:
            return 0
        if s0 != s1:
            return -1 if s0 < s1 else 1
        return 1 if shape[d0] > shape[d1] else 0

    perm = list(reversed(range(len(shape))))   # innermost first
    for i in range(1, len(perm)):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    order = list(reversed(perm))
    moving = [d for d in order if shape[d] > 1]
    return None if moving == sorted(moving) else order


def _check_generator(e: Emitter, i: int) -> None:
    if i < e.num_operands and not (e.is_const(i) and e.const(i) is None):
        raise e.unsupported("with an explicit torch.Generator: spmdc reproduces the default generator only")


def _random(e: Emitter, distribution: str, like: int | None = None, out: Any = None, **params: Any) -> Any:
    """A draw of the result's type; ``like``: the argument whose memory layout the result copies
    (``rand_like``, ``dropout``), so the numbers land where eager PyTorch puts them."""
    out = out if out is not None else e.out_type()
    order = storage_order(out.shape, e.arg_strides(like)) if like is not None else None
    if order is None:
        return e.create(T.RandomOp, [], {"distribution": distribution, **params}, result_type=out)
    stored = out.with_shape(tuple(out.shape[d] for d in order))
    draw = e.create(T.RandomOp, [], {"distribution": distribution, **params}, result_type=stored)
    inverse = [order.index(d) for d in range(len(order))]
    return e.create(T.PermuteOp, [draw], {"perm": inverse})


def _number(e: Emitter, i: int, what: str) -> float:
    v = e.const(i)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise e.unsupported(f"with a non-constant {what} ({v!r})")
    return float(v)


def _like(e: Emitter) -> int | None:
    """``*_like`` factories (and ops on ``self``) copy argument 0's layout; plain factories are contiguous."""
    return 0 if e.rec.name.endswith("_like") or e.rec.name.endswith("_like.low_dtype") else None


@handles(A + "rand", A + "rand_like")
def _rand(e: Emitter):
    return [_random(e, "uniform", _like(e), low=0.0, high=1.0)]


@handles(A + "randn", A + "randn_like")
def _randn(e: Emitter):
    return [_random(e, "normal", _like(e), mean=0.0, std=1.0)]


@handles(A + "uniform")
def _uniform(e: Emitter):
    # (self, from, to, generator)
    _check_generator(e, 3)
    return [_random(e, "uniform", 0, low=_number(e, 1, "lower bound"), high=_number(e, 2, "upper bound"))]


@handles(A + "normal_functional")
def _normal(e: Emitter):
    # (self, mean, std, generator)
    _check_generator(e, 3)
    return [_random(e, "normal", 0, mean=_number(e, 1, "mean"), std=_number(e, 2, "standard deviation"))]


@handles(A + "bernoulli.p")
def _bernoulli_p(e: Emitter):
    # (self, p, generator)
    _check_generator(e, 2)
    return [_random(e, "bernoulli", 0, p=_number(e, 1, "probability"))]


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
    return [_random(e, "randint", _like(e), low=int(low), high=int(high))]


@handles(A + "randperm")
def _randperm(e: Emitter):
    # (n, dtype=int64, layout, device, pin_memory): torch.randperm(n) from the default generator
    return [e.create(T.RandpermOp, [], result_type=e.out_type())]


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
    keep = _random(e, "bernoulli", 0, out=t, p=1.0 - p)
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


@handles(A + "dropout", A + "feature_dropout")
def _dropout(e: Emitter):
    # (input, p, train): eager's composite form, x * (noise / (1 - p)) with noise = bernoulli(1 - p)
    # of x's layout, or of [N, C, 1, ...] for feature dropout (one draw per channel)
    x = e.tensor(0)
    t = x.tensor_type
    p, train = _number(e, 1, "dropout probability"), e.const(2)
    if not train or p == 0.0:
        return [x]
    if not t.is_float:
        raise e.unsupported(f"on a non-floating-point tensor {t}")
    if p == 1.0:
        return [e.splat(0, t)]
    if e.rec.name.endswith("feature_dropout"):
        if t.rank < 2:
            raise e.unsupported(f"feature dropout needs [N, C, ...], got {t}")
        noise = _random(e, "bernoulli", None, out=t.with_shape(t.shape[:2] + (1,) * (t.rank - 2)), p=1.0 - p)
    else:
        noise = _random(e, "bernoulli", 0, out=t, p=1.0 - p)
    scaled = e.create(T.DivOp, [noise, e.scalar(1.0 - p, t.element_type)])
    return [e.create(T.MulOp, [x, scaled])]
