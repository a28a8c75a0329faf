"""Handlers for ordering along a dim: ``topk``, ``sort`` (``argsort`` arrives as ``sort``) and
the product scan ``cumprod`` (the backward of ``prod``)."""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, handles, norm_dim

A = "torch.aten."


def _two_results(e: Emitter, cls, x, attrs: dict) -> list:
    op = e.b.create(cls, [x], attrs, location=e.loc)
    e.created.append(op)
    return list(op.results)


def _ints(e: Emitter, *indices_defaults: tuple[int, object]) -> list:
    out = []
    for i, default in indices_defaults:
        v = e.const(i, default)
        if not isinstance(v, (int, bool)):
            raise e.unsupported(f"with a non-constant argument #{i} ({v!r})")
        out.append(v)
    return out


@handles(A + "topk")
def _topk(e: Emitter):
    # (self, k, dim=-1, largest=True, sorted=True) -> (values, indices)
    x = e.tensor(0)
    k, dim, largest, ordered = _ints(e, (1, ...), (2, -1), (3, True), (4, True))
    attrs = {"k": int(k), "dim": norm_dim(dim, x.tensor_type.rank), "largest": bool(largest), "sorted": bool(ordered)}
    return _two_results(e, T.TopkOp, x, attrs)


@handles(A + "sort", A + "sort.stable")
def _sort(e: Emitter):
    # sort(self, dim=-1, descending=False); sort.stable(self, *, stable, dim=-1, descending=False)
    x = e.tensor(0)
    rank = x.tensor_type.rank
    if e.rec.name.endswith(".stable"):
        stable = e.const(1, None)
        dim, desc = _ints(e, (2, -1), (3, False))
        attrs = {"dim": norm_dim(dim, rank), "descending": bool(desc), "stable": bool(stable)}
    else:
        dim, desc = _ints(e, (1, -1), (2, False))
        attrs = {"dim": norm_dim(dim, rank), "descending": bool(desc)}
    return _two_results(e, T.SortOp, x, attrs)


@handles(A + "cumprod")
def _cumprod(e: Emitter):
    # (self, dim, dtype=None): in the result's type (torch scans integers as int64)
    out = e.out_type()
    x = e.cast(e.tensor(0), out.element_type)
    return [e.create(T.CumprodOp, [x], {"dim": norm_dim(e.const(1), out.rank)})]
