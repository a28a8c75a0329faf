"""Handlers for ``_embedding_bag`` and its gradients (``F.embedding_bag``, ``nn.EmbeddingBag``).

Bag ``b`` holds ``indices[offsets[b]:offsets[b + 1]]`` (the last bag runs to the end; with
``include_last_offset`` the offsets end with ``len(indices)``, as PyTorch documents). Each
index's bag is computed from the offsets at run time: a scatter-add of ones at every offset,
then a prefix sum (``bag[i] = #{b : offsets[b] <= i} - 1``), so empty bags need nothing special.

* ``sum`` / ``mean``: the rows (times ``per_sample_weights``; padding rows left out) are
  scatter-added into their bags; a mean divides by the bag's number of non-padding rows (an
  empty bag stays zero). Half-precision tables accumulate in ``f32``, as PyTorch does.
* ``max``: ``tensor.embedding_bag_max`` (PyTorch's kernel), which also gives each maximum's row.

The backward (``_embedding_bag_backward``, dense) scatter-adds each bag's gradient to its rows
(scaled by the sample weight, ``1 / bag size`` for ``mean``), or, for ``max``, to the rows the
maxima came from (non-empty bags only); ``scale_grad_by_freq`` is refused outside ``max``
(:data:`SCALE_BY_FREQ` says why) and ignored in ``max``, as PyTorch's kernels do;
``_embedding_bag_per_sample_weights_backward`` is the dot product of each row with its bag's
gradient. PyTorch's bookkeeping outputs ``offset2bag``, ``bag_size`` and, outside ``max``,
``max_indices`` hold implementation-dependent values (they differ between its CPU and CUDA
kernels): spmdc does not compute them and refuses a model that reads them.
"""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, Unavailable, handles

A = "torch.aten."
MODES = {0: "sum", 1: "mean", 2: "max"}
SCALE_BY_FREQ = ("with scale_grad_by_freq in mode 'sum' or 'mean': PyTorch's CPU kernel divides the gradient of "
                 "the k-th distinct index (in sorted order) by the count of the index at position k of the sorted "
                 "indices, not by its own count, whenever indices repeat; eager PyTorch does not compute the "
                 "documented gradient, so there is no one exact result to match")
_BOOKKEEPING = Unavailable("embedding bag's bookkeeping output (implementation-dependent in PyTorch)")


def _mode(e: Emitter, i: int) -> int:
    mode = e.const(i)
    if mode not in MODES:
        raise e.unsupported(f"with mode {mode!r}")
    return int(mode)


def _padding(e: Emitter, i: int) -> int:
    pad = e.const(i, -1)
    pad = -1 if pad is None else int(pad)
    if pad < -1:
        raise e.unsupported(f"with padding_idx {pad} (the frontend passes a non-negative index or -1)")
    return pad


def _bags(e: Emitter, ids, offsets, last: bool):
    """(bag of each index [L], number of bags)."""
    n = ids.tensor_type.shape[0]
    bags = offsets.tensor_type.shape[0] - (1 if last else 0)
    starts = _slice(e, offsets, 0, bags) if last else offsets
    it = offsets.tensor_type.element_type
    marks = e.splat(0, ids.tensor_type.with_shape((n + 1,)).with_element_type(it))
    ones = e.splat(1, starts.tensor_type)
    marks = e.create(T.IndexPutOp, [marks, starts, ones], {"accumulate": True})
    prefix = e.create(T.CumsumOp, [_slice(e, marks, 0, n)], {"dim": 0})
    seg = e.create(T.SubOp, [prefix, e.scalar(1, it)])
    return e.cast(seg, ids.tensor_type.element_type), bags


def _slice(e: Emitter, v, start: int, end: int):
    return e.create(T.SliceOp, [v], {"dim": 0, "start": start, "end": end, "step": 1})


def _mask(e: Emitter, ids, pad: int):
    """``i1``: true where an index is not ``padding_idx``; None without padding."""
    if pad < 0:
        return None
    return e.create(T.CompareOp, [ids, e.scalar(pad, ids.tensor_type.element_type)], {"predicate": "ne"})


def _drop_padding(e: Emitter, rows, mask):
    """Zero the rows of padding indices (selected, not multiplied: a padding row's values never count)."""
    if mask is None:
        return rows
    m = e.broadcast(e.reshape(mask, (mask.tensor_type.shape[0], 1)), rows.tensor_type.shape)
    return e.create(T.SelectOp, [m, rows, e.scalar(0, rows.tensor_type.element_type)])


def _column(e: Emitter, v, width: int):
    """``[L]`` -> ``[L, width]`` (each value repeated along a row)."""
    n = v.tensor_type.shape[0]
    return e.broadcast(e.reshape(v, (n, 1)), (n, width))


def _bag_sizes(e: Emitter, seg, mask, bags: int, elt: str):
    """Non-padding rows per bag, in ``elt``."""
    counts = e.cast(mask, elt) if mask is not None else e.splat(1, seg.tensor_type.with_element_type(elt))
    zeros = e.splat(0, seg.tensor_type.with_shape((bags,)).with_element_type(elt))
    return e.create(T.IndexPutOp, [zeros, seg, counts], {"accumulate": True})


def _acc_type(elt: str) -> str:
    return "f32" if elt in ("f16", "bf16") else elt


# torch-mlir imports _embedding_bag_forward_only (no gradient needed) as embedding_bag.padding_idx, with the same
# operands (padding_idx None for none) and outputs
@handles(A + "_embedding_bag", A + "_embedding_bag_forward_only", A + "embedding_bag.padding_idx")
def _embedding_bag(e: Emitter):
    # (weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
    #  include_last_offset, padding_idx) -> (output, offset2bag, bag_size, max_indices)
    w, ids, offsets = e.tensor(0), e.tensor(1), e.tensor(2)
    mode, last, pad = _mode(e, 4), bool(e.const(7, False)), _padding(e, 8)
    psw = e.raw(6) if e.num_operands > 6 else None
    if mode == 2:
        if psw is not None:
            raise e.unsupported("with per_sample_weights in mode 'max' (PyTorch allows them with 'sum' only)")
        op = e.b.create(T.EmbeddingBagMaxOp, [w, ids, offsets], {"include_last_offset": last, "padding_idx": pad},
                        location=e.loc)
        e.created.append(op)
        return [op.results[0], _BOOKKEEPING, _BOOKKEEPING, op.results[1]]
    if psw is not None and mode != 0:
        raise e.unsupported("with per_sample_weights in mode 'mean' (PyTorch allows them with 'sum' only)")
    wt = w.tensor_type
    acc = _acc_type(wt.element_type)
    seg, bags = _bags(e, ids, offsets, last)
    rows = e.cast(e.create(T.EmbeddingOp, [w, ids]), acc)
    if psw is not None:
        rows = e.create(T.MulOp, [rows, _column(e, e.cast(e.as_value(psw), acc), wt.shape[1])])
    mask = _mask(e, ids, pad)
    rows = _drop_padding(e, rows, mask)
    zeros = e.splat(0, wt.with_shape((bags, wt.shape[1])).with_element_type(acc))
    out = e.create(T.IndexPutOp, [zeros, seg, rows], {"accumulate": True})
    if mode == 1:
        sizes = e.create(T.MaximumOp, [_bag_sizes(e, seg, mask, bags, acc), e.scalar(1, acc)])
        out = e.create(T.DivOp, [out, _column(e, sizes, wt.shape[1])])
    return [e.cast(out, wt.element_type), _BOOKKEEPING, _BOOKKEEPING, _BOOKKEEPING]


@handles(A + "_embedding_bag_backward")
def _embedding_bag_backward(e: Emitter):
    # (grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
    #  mode, sparse, per_sample_weights, padding_idx)
    if e.const(9, False):
        raise e.unsupported("with sparse=True: spmdc's gradients are dense tensors")
    grad, ids, offsets = e.tensor(0), e.tensor(1), e.tensor(2)
    num_weights, mode, pad = int(e.const(6)), _mode(e, 8), _padding(e, 11)
    gt = grad.tensor_type
    table = gt.with_shape((num_weights, gt.shape[1]))
    if mode == 2:   # each non-empty bag's gradient goes to the rows its maxima came from (PyTorch's max
        # kernels ignore scale_grad_by_freq)
        return [_max_backward(e, grad, ids, offsets, e.tensor(5), table, pad)]
    if e.const(7, False):
        raise e.unsupported(SCALE_BY_FREQ)
    last = offsets.tensor_type.shape[0] == gt.shape[0] + 1   # include_last_offset
    acc = _acc_type(gt.element_type)
    seg, bags = _bags(e, ids, offsets, last)
    mask = _mask(e, ids, pad)
    scale = None
    psw = e.raw(10)
    if psw is not None:
        scale = e.cast(e.as_value(psw), acc)
    if mode == 1:   # 1 / (the bag's non-padding rows)
        sizes = e.create(T.MaximumOp, [_bag_sizes(e, seg, mask, bags, acc), e.scalar(1, acc)])
        per_row = e.create(T.DivOp, [e.scalar(1, acc), e.create(T.GatherOp, [sizes, seg], {"dim": 0})])
        scale = per_row if scale is None else e.create(T.MulOp, [scale, per_row])
    rows = e.cast(e.create(T.EmbeddingOp, [grad, seg]), acc)
    if scale is not None:
        rows = e.create(T.MulOp, [rows, _column(e, scale, gt.shape[1])])
    rows = _drop_padding(e, rows, mask)
    out = e.create(T.IndexPutOp, [e.splat(0, table.with_element_type(acc)), ids, rows], {"accumulate": True})
    return [e.cast(out, gt.element_type)]


def _max_backward(e: Emitter, grad, ids, offsets, max_indices, table, pad: int):
    gt = grad.tensor_type
    last = offsets.tensor_type.shape[0] == gt.shape[0] + 1
    seg, bags = _bags(e, ids, offsets, last)
    sizes = _bag_sizes(e, seg, _mask(e, ids, pad), bags, "i64")
    full = e.create(T.CompareOp, [sizes, e.scalar(0, "i64")], {"predicate": "gt"})
    full = e.broadcast(e.reshape(full, (bags, 1)), gt.shape)
    src = e.create(T.SelectOp, [full, grad, e.scalar(0, gt.element_type)])
    where = e.create(T.SelectOp, [full, max_indices, e.scalar(0, max_indices.tensor_type.element_type)])
    zeros = e.splat(0, table)
    return e.create(T.ScatterOp, [zeros, e.cast(where, "i64"), src], {"dim": 0, "reduce": "add"})


@handles(A + "_embedding_bag_per_sample_weights_backward")
def _psw_backward(e: Emitter):
    # (grad, weight, indices, offsets, offset2bag, mode, padding_idx): per index, the dot product of
    # its row with its bag's gradient (zero for padding)
    grad, w, ids, offsets = e.tensor(0), e.tensor(1), e.tensor(2), e.tensor(3)
    if _mode(e, 5) != 0:
        raise e.unsupported("outside mode 'sum' (PyTorch allows per_sample_weights with 'sum' only)")
    pad = _padding(e, 6)
    gt = grad.tensor_type
    last = offsets.tensor_type.shape[0] == gt.shape[0] + 1
    seg, _ = _bags(e, ids, offsets, last)
    acc = _acc_type(gt.element_type)
    prod = e.create(T.MulOp, [e.cast(e.create(T.EmbeddingOp, [grad, seg]), acc),
                              e.cast(e.create(T.EmbeddingOp, [w, ids]), acc)])
    dot = e.create(T.SumOp, [prod], {"dims": [1], "keepdim": False})
    mask = _mask(e, ids, pad)
    if mask is not None:
        dot = e.create(T.SelectOp, [mask, dot, e.scalar(0, acc)])
    return [e.cast(dot, gt.element_type)]
