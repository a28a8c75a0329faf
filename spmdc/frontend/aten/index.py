"""Handlers for gathers and scatters: embedding, gather, scatter, advanced indexing, index_put."""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, handles, norm_dim

A = "torch.aten."


@handles(A + "embedding")
def _embedding(e: Emitter):
    return [e.create(T.EmbeddingOp, [e.tensor(0), e.tensor(1)])]


@handles(A + "gather")
def _gather(e: Emitter):
    x = e.tensor(0)
    return [e.create(T.GatherOp, [x, e.tensor(2)], {"dim": norm_dim(e.const(1), x.tensor_type.rank)})]


@handles(A + "scatter.value", A + "scatter.src", A + "scatter_add")
def _scatter(e: Emitter):
    x, idx = e.tensor(0), e.tensor(2)
    t = x.tensor_type
    dim = norm_dim(e.const(1), t.rank)
    src = e.operand_or_scalar(3, t.element_type)
    ishape = idx.tensor_type.shape
    if src.tensor_type.shape != ishape:
        if src.tensor_type.rank == 0:
            src = e.broadcast(src, ishape)
        else:  # torch uses the leading index.shape block of a larger src
            for d, n in enumerate(ishape):
                src = _leading(e, src, d, n)
    attrs = {"dim": dim}
    if e.rec.name.endswith("scatter_add"):
        attrs["reduce"] = "add"
    return [e.create(T.ScatterOp, [x, idx, src], attrs)]


def _leading(e: Emitter, v, dim: int, n: int):
    if v.tensor_type.shape[dim] == n:
        return v
    return e.create(T.SliceOp, [v], {"dim": dim, "start": 0, "end": n, "step": 1})


def _indices(e: Emitter, i: int):
    items = e.raw(i)
    if not isinstance(items, list) or not items:
        raise e.unsupported("expects a list of index tensors")
    if any(v is None for v in items):
        raise e.unsupported("with None entries in the index list (x[:, idx]-style indexing)")
    vals = [e.as_value(v) for v in items]
    for v in vals:
        if v.tensor_type.element_type == "i1":
            raise e.unsupported("with a boolean mask index (its result shape depends on the data)")
    return vals


@handles(A + "index.Tensor", A + "_unsafe_index.Tensor")
def _index(e: Emitter):
    return [e.create(T.IndexOp, [e.tensor(0), *_indices(e, 1)])]


@handles(A + "index_put", A + "_index_put_impl", A + "_unsafe_index_put")
def _index_put(e: Emitter):
    x = e.tensor(0)
    vals = e.cast(e.tensor(2), x.tensor_type.element_type)
    attrs = {"accumulate": True} if e.const(3, False) else {}
    return [e.create(T.IndexPutOp, [x, *_indices(e, 1), vals], attrs)]
