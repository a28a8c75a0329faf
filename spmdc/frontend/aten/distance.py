"""Handlers for distances and norms: ``_cdist_forward`` / ``_cdist_backward``, ``_pdist_forward`` /
``_pdist_backward`` and ``linalg_vector_norm`` (and ``norm``, which ``F.pairwise_distance`` calls).

``_cdist_forward`` becomes ``tensor.cdist``, with the algorithm eager PyTorch picks
(``compute_mode``; the matrix-product form for ``p = 2`` and more than 25 rows) fixed on the
global shapes; the batch dims of both operands are broadcast first, as PyTorch does.
``linalg_vector_norm`` is written with reductions: ``sqrt(sum(x * x))`` for ``ord = 2``, the sum
(``1``), maximum (``inf``) or minimum (``-inf``) of ``|x|``, the count of non-zeros (``0``) and
``sum(|x| ** ord) ** (1 / ord)`` otherwise; half-precision inputs are reduced in ``f32``, as
PyTorch's kernels accumulate, and the result cast back.
"""

from __future__ import annotations

import math

from spmdc.dialects import tensor as T
from spmdc.dialects.tensor.base import broadcast_shapes
from spmdc.frontend.aten.base import Emitter, handles, norm_dim

A = "torch.aten."


def _p(e: Emitter, i: int) -> float:
    p = e.const(i)
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not p >= 0:
        raise e.unsupported(f"with p = {p!r} (a constant p >= 0 is needed)")
    return float(p)


def _batched(e: Emitter, a, b):
    """``a [*B1, P, M]`` and ``b [*B2, R, M]`` broadcast to one batch shape."""
    at, bt = a.tensor_type, b.tensor_type
    batch = broadcast_shapes(at.shape[:-2], bt.shape[:-2])
    return e.broadcast(a, (*batch, *at.shape[-2:])), e.broadcast(b, (*batch, *bt.shape[-2:]))


@handles(A + "_cdist_forward")
def _cdist(e: Emitter):
    # (x1, x2, p, compute_mode): mode None/0 uses the matrix product for p = 2 past 25 rows, 1 always, 2 never
    a, b = _batched(e, e.tensor(0), e.tensor(1))
    p = _p(e, 2)
    mode = e.const(3, None)
    mode = 0 if mode is None else int(mode)
    rows = (a.tensor_type.shape[-2], b.tensor_type.shape[-2])
    mm = p == 2.0 and (mode == 1 or (mode == 0 and max(rows) > 25))
    return [e.create(T.CdistOp, [a, b], {"p": p, **({"mm": True} if mm else {})})]


@handles(A + "_cdist_backward")
def _cdist_backward(e: Emitter):
    # (grad, x1, x2, p, cdist) -> the gradient for x1, of the broadcast batch shape
    a, b = _batched(e, e.tensor(1), e.tensor(2))
    out = e.out_type(0)
    return [e.create(T.CdistGradOp, [e.tensor(0), a, b, e.tensor(4)], {"p": _p(e, 3)}, result_type=out)]


@handles(A + "_pdist_forward")
def _pdist(e: Emitter):
    # (self, p)
    return [e.create(T.PdistOp, [e.tensor(0)], {"p": _p(e, 1)})]


@handles(A + "_pdist_backward")
def _pdist_backward(e: Emitter):
    # (grad, self, p, pdist)
    return [e.create(T.PdistGradOp, [e.tensor(0), e.tensor(1), e.tensor(3)], {"p": _p(e, 2)})]


@handles(A + "linalg_vector_norm", A + "norm.ScalarOpt_dim", A + "norm.Scalar")
def _vector_norm(e: Emitter):
    # (self, ord, dim, keepdim, *, dtype); norm.ScalarOpt_dim (F.pairwise_distance): (self, p, dim, keepdim);
    # norm.Scalar: (self, p) over every dim
    out = e.out_type()
    if not out.is_float:
        raise e.unsupported(f"with result type {out} (norms of complex or integer results)")
    acc = "f32" if out.element_type in ("f16", "bf16") else out.element_type
    x = e.cast(e.cast(e.tensor(0), out.element_type), acc)
    rank = x.tensor_type.rank
    ord_ = e.const(1, 2)
    ord_ = 2 if ord_ is None else ord_
    if not isinstance(ord_, (int, float)) or isinstance(ord_, bool):
        raise e.unsupported(f"with ord = {ord_!r}")
    ord_ = float(ord_)
    dims = e.const(2, None)
    dims = list(range(rank)) if dims in (None, []) else [dims] if isinstance(dims, int) else dims
    dims = sorted({norm_dim(d, rank) for d in dims})
    attrs = {"dims": dims, "keepdim": bool(e.const(3, False))}
    if rank == 0:   # a scalar: its absolute value (or, for ord 0, whether it is non-zero)
        x = e.reshape(x, (1,))
        attrs = {"dims": [0], "keepdim": False}
    mag = e.create(T.AbsOp, [x])
    if ord_ == 2.0:
        r = e.create(T.SqrtOp, [e.create(T.SumOp, [e.create(T.MulOp, [x, x])], attrs)])
    elif ord_ == 1.0:
        r = e.create(T.SumOp, [mag], attrs)
    elif ord_ == math.inf:
        r = e.create(T.MaxOp, [mag], attrs)
    elif ord_ == -math.inf:
        r = e.create(T.MinOp, [mag], attrs)
    elif ord_ == 0.0:
        nz = e.create(T.CompareOp, [x, e.scalar(0, acc)], {"predicate": "ne"})
        r = e.create(T.SumOp, [e.cast(nz, acc)], attrs)
    else:
        powered = e.create(T.PowOp, [mag, e.scalar(ord_, acc)])
        r = e.create(T.PowOp, [e.create(T.SumOp, [powered], attrs), e.scalar(1.0 / ord_, acc)])
    return [e.reshape(e.cast(r, out.element_type), out.shape)]
