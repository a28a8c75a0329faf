"""Handlers for gathers and scatters: embedding, gather, scatter (and scatter_reduce), index_select,
advanced indexing, index_put (index_add arrives as index_put)."""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.dialects.tensor.index import index_shape
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
    items = e.raw(1)
    if not isinstance(items, list) or not any(v is None for v in items):
        return [e.create(T.IndexOp, [e.tensor(0), *_indices(e, 1)])]
    return [_index_with_gaps(e, e.tensor(0), items)]


def _index_with_gaps(e: Emitter, x, items: list):
    """``x[:, :, idx]``: the indexed dims are moved to the front, indexed there, and the result's
    dims put where torch puts them (in place of the indexed dims when those are adjacent, else
    first)."""
    perm, tensors, order = _gap_layout(e, x, items)
    out = e.create(T.IndexOp, [_permuted(e, x, perm), *tensors])
    return out if order is None else _permuted(e, out, order)


@handles(A + "index_put", A + "_index_put_impl", A + "_unsafe_index_put")
def _index_put(e: Emitter):
    x = e.tensor(0)
    vals = e.cast(e.tensor(2), x.tensor_type.element_type)
    attrs = {"accumulate": True} if e.const(3, False) else {}
    items = e.raw(1)
    if isinstance(items, list) and any(v is None for v in items):
        return [_index_put_with_gaps(e, x, items, vals, attrs)]
    return [e.create(T.IndexPutOp, [x, *_indices(e, 1), vals], attrs)]


def _gap_layout(e: Emitter, x, items: list) -> tuple[list[int], list, list[int] | None]:
    """For ``x[:, :, idx]``: the permutation moving the indexed dims to the front, the index
    tensors, and the permutation taking the front-indexed result to torch's result layout (None
    when it already is)."""
    rank = x.tensor_type.rank
    positions = [d for d, v in enumerate(items) if v is not None]
    perm = positions + [d for d in range(rank) if d not in positions]
    tensors = [e.as_value(items[d]) for d in positions]
    if any(t.tensor_type.element_type == "i1" for t in tensors):
        raise e.unsupported("with a boolean mask index (its result shape depends on the data)")
    n_index = len(index_shape(x.tensor_type, [t.tensor_type for t in tensors])) - (rank - len(positions))
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    if not adjacent or positions[0] == 0:
        return perm, tensors, None
    rest = list(range(n_index, n_index + rank - len(positions)))
    return perm, tensors, rest[:positions[0]] + list(range(n_index)) + rest[positions[0]:]


def _permuted(e: Emitter, v, perm: list[int]):
    return v if perm == list(range(len(perm))) else e.create(T.PermuteOp, [v], {"perm": perm})


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _broadcasts(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


def _index_put_with_gaps(e: Emitter, x, items: list, vals, attrs: dict):
    """``x[:, :, idx] = vals``: on ``x`` with the indexed dims in front, then permuted back."""
    perm, tensors, order = _gap_layout(e, x, items)
    front = _permuted(e, x, perm)
    indexed = index_shape(front.tensor_type, [t.tensor_type for t in tensors])
    torch_shape = indexed if order is None else tuple(indexed[i] for i in order)
    if not _broadcasts(vals.tensor_type.shape, torch_shape):
        # torch's index_add decomposition (the backward of index_select) emits this for a 0-d index
        raise e.unsupported(f"with values {vals.tensor_type} that do not broadcast to the indexed shape "
                            f"{list(torch_shape)} (eager index_put rejects this call too)")
    vals = e.broadcast(vals, torch_shape)
    if order is not None:
        vals = _permuted(e, vals, _inverse(order))
    out = e.create(T.IndexPutOp, [front, *tensors, vals], attrs)
    return _permuted(e, out, _inverse(perm))


@handles(A + "index_select")
def _index_select(e: Emitter):
    # (self, dim, index)
    x = e.tensor(0)
    return [e.create(T.IndexSelectOp, [x, e.tensor(2)], {"dim": norm_dim(e.const(1), x.tensor_type.rank)})]


@handles(A + "scatter_reduce.two")
def _scatter_reduce(e: Emitter):
    # (self, dim, index, src, reduce, *, include_self=True)
    x, idx, src = e.tensor(0), e.tensor(2), e.tensor(3)
    dim = norm_dim(e.const(1), x.tensor_type.rank)
    for d, n in enumerate(idx.tensor_type.shape):   # torch reads the leading index.shape block of src
        src = _leading(e, src, d, n)
    attrs = {"dim": dim, "reduce": e.const(4), "include_self": bool(e.const(5, True))}
    return [e.create(T.ScatterReduceOp, [x, idx, src], attrs)]
