"""Handlers for reductions (sums, extremes and their indices, products, histograms), normalisers
along a dim, scans and matrix products."""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, handles, norm_dim

A = "torch.aten."


def _dims(e: Emitter, i: int, rank: int) -> list[int]:
    dims = e.const(i, None)
    if dims is None or dims == []:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({norm_dim(d, rank) for d in dims})


def _reduce(e: Emitter, cls, dims_index: int | None, keepdim_index: int | None):
    out = e.out_type()
    x = e.cast(e.tensor(0), out.element_type)  # sum of i1 -> i64, mean with dtype=...
    rank = x.tensor_type.rank
    dims = list(range(rank)) if dims_index is None else _dims(e, dims_index, rank)
    keep = bool(e.const(keepdim_index, False)) if keepdim_index is not None else False
    if not dims:  # rank-0 input
        return [x]
    return [e.create(cls, [x], {"dims": dims, "keepdim": keep})]


handles(A + "sum.dim_IntList")(lambda e: _reduce(e, T.SumOp, 1, 2))
handles(A + "sum")(lambda e: _reduce(e, T.SumOp, None, None))
handles(A + "mean.dim")(lambda e: _reduce(e, T.MeanOp, 1, 2))
handles(A + "mean")(lambda e: _reduce(e, T.MeanOp, None, None))
handles(A + "amax")(lambda e: _reduce(e, T.MaxOp, 1, 2))
# boolean reductions (transformers' mask utilities ask whether a mask hides anything)
for _name, _cls in (("all", T.AllOp), ("any", T.AnyOp)):
    handles(A + _name + ".dim", A + _name + ".dims")(lambda e, _cls=_cls: _reduce(e, _cls, 1, 2))
    handles(A + _name)(lambda e, _cls=_cls: _reduce(e, _cls, None, None))


@handles(A + "max")
def _max_all(e: Emitter):
    return _reduce(e, T.MaxOp, None, None)


handles(A + "amin")(lambda e: _reduce(e, T.MinOp, 1, 2))
# prod multiplies in the result's type (integers and booleans as int64, or dtype=...)
handles(A + "prod")(lambda e: _reduce(e, T.ProdOp, None, None))
handles(A + "prod.dim_int")(lambda e: _reduce(e, T.ProdOp, 1, 2))


def _arg(e: Emitter, cls, x, dim: int | None, keep: bool):
    attrs: dict[str, object] = {"keepdim": keep}
    if dim is not None:
        attrs["dim"] = norm_dim(dim, x.tensor_type.rank)
    return e.create(cls, [x], attrs)


for _name, _cls in (("argmax", T.ArgMaxOp), ("argmin", T.ArgMinOp)):
    # (self, dim=None, keepdim=False): the first extreme element's index
    handles(A + _name)(lambda e, _cls=_cls: [_arg(e, _cls, e.tensor(0), e.const(1, None), bool(e.const(2, False)))])


def _value_and_index(e: Emitter, values_cls, index_cls):
    """``max.dim`` / ``min.dim`` (self, dim, keepdim) -> (values, indices): the values are the
    reduction (``amax`` / ``amin``: a sharded dim leaves ``P(max)`` / ``P(min)``), the indices
    the first extreme's (the dim whole)."""
    x = e.tensor(0)
    rank = x.tensor_type.rank
    dim, keep = norm_dim(e.const(1), rank), bool(e.const(2, False))
    values = x if rank == 0 else e.create(values_cls, [x], {"dims": [dim], "keepdim": keep})
    return [values, _arg(e, index_cls, x, dim, keep)]


handles(A + "max.dim")(lambda e: _value_and_index(e, T.MaxOp, T.ArgMaxOp))
handles(A + "min.dim")(lambda e: _value_and_index(e, T.MinOp, T.ArgMinOp))


@handles(A + "histc")
def _histc(e: Emitter):
    # (self, bins=100, min=0, max=0)
    x = e.tensor(0)
    bins, lo, hi = e.const(1, 100), e.const(2, 0), e.const(3, 0)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (bins, lo, hi)):
        raise e.unsupported(f"with non-constant bins or range ({bins!r}, {lo!r}, {hi!r})")
    return [e.create(T.HistcOp, [x], {"bins": int(bins), "min": float(lo), "max": float(hi)})]


def _correction(e: Emitter, i: int):
    c = e.const(i, None)
    return 1 if c is None else c


@handles(A + "var_mean.correction", A + "var.correction")
def _var_mean(e: Emitter):
    x = e.tensor(0)
    rank = x.tensor_type.rank
    dims = _dims(e, 1, rank)
    keep = bool(e.const(3, False))
    var = e.create(T.VarOp, [x], {"dims": dims, "keepdim": keep, "correction": _correction(e, 2)})
    if e.rec.name.endswith("var.correction"):
        return [var]
    return [var, e.create(T.MeanOp, [x], {"dims": dims, "keepdim": keep})]


def _along_dim(e: Emitter, cls):
    out = e.out_type()
    x = e.cast(e.tensor(0), out.element_type)
    return [e.create(cls, [x], {"dim": norm_dim(e.const(1), out.rank)})]


handles(A + "_softmax", A + "softmax.int")(lambda e: _along_dim(e, T.SoftmaxOp))
handles(A + "_log_softmax", A + "log_softmax.int")(lambda e: _along_dim(e, T.LogSoftmaxOp))
handles(A + "cumsum")(lambda e: _along_dim(e, T.CumsumOp))


@handles(A + "mm", A + "bmm", A + "matmul")
def _matmul(e: Emitter):
    a, b = e.tensor(0), e.tensor(1)
    if a.tensor_type.rank < 2 or b.tensor_type.rank < 2:
        raise e.unsupported("on vectors (rank-1 operands)")
    return [e.create(T.MatmulOp, [a, b])]
