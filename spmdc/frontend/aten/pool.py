"""Handlers for pooling, nearest upsampling, grid sampling and replication padding's gradient.

``avg_pool{2,3}d`` and their backward become ``tensor.avg_pool`` / ``tensor.avg_pool_grad``;
``max_pool{2,3}d_with_indices`` ``tensor.max_pool``, whose backward scatters the output gradient
to the recorded indices (a ``tensor.scatter`` with ``reduce = "add"`` on the flattened planes,
which is what PyTorch's kernel does); the adaptive average pools (1-D to 3-D) and their
gradients ``tensor.adaptive_avg_pool`` / ``tensor.adaptive_avg_pool_grad``, except pooling to
one cell (global average pooling), which is a ``tensor.mean`` over the spatial dims (and its
gradient a broadcast divided by their size);
``upsample_nearest2d.vec`` ``tensor.upsample_nearest``; ``grid_sampler_2d`` and its backward
``tensor.grid_sample`` / ``tensor.grid_sample_grad``. The backward of replication padding sums
the gradient of each padded border into the edge element it copies (slices, sums and pads).
"""

from __future__ import annotations

import math

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, handles

A = "torch.aten."


def _ints(e: Emitter, i: int, d: int, what: str, default: list[int] | None = None) -> list[int]:
    """A constant int list argument spread to ``d`` entries (a single entry repeats)."""
    v = e.const(i, default)
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise e.unsupported(f"with a non-constant {what} ({v!r})")
    if len(v) == 1:
        v = v * d
    if len(v) != d:
        raise e.unsupported(f"with {what} {v} for {d} spatial dims")
    return v


def _window(e: Emitter, d: int, first: int) -> dict:
    kernel = _ints(e, first, d, "kernel_size")
    stride = _ints(e, first + 1, d, "stride", []) if e.const(first + 1, []) else kernel
    return {"kernel": kernel, "stride": stride, "padding": _ints(e, first + 2, d, "padding", [0])}


def _avg_attrs(e: Emitter, d: int, first: int) -> dict:
    attrs = _window(e, d, first)
    attrs["ceil_mode"] = bool(e.const(first + 3, False))
    attrs["count_include_pad"] = bool(e.const(first + 4, True))
    div = e.const(first + 5, None)
    if div is not None:
        attrs["divisor_override"] = int(div)
    return attrs


def _avg_pool(d: int):
    def handler(e: Emitter):
        # (self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        return [e.create(T.AvgPoolOp, [e.tensor(0)], _avg_attrs(e, d, 1))]
    return handler


def _avg_pool_backward(d: int):
    def handler(e: Emitter):
        # (grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        x = e.tensor(1)
        return [e.create(T.AvgPoolGradOp, [e.tensor(0)], _avg_attrs(e, d, 2), result_type=x.tensor_type)]
    return handler


def _max_attrs(e: Emitter, d: int, first: int) -> dict:
    attrs = _window(e, d, first)
    attrs["dilation"] = _ints(e, first + 3, d, "dilation", [1])
    attrs["ceil_mode"] = bool(e.const(first + 4, False))
    return attrs


def _max_pool(d: int):
    def handler(e: Emitter):
        # (self, kernel_size, stride, padding, dilation, ceil_mode) -> (values, indices)
        op = e.b.create(T.MaxPoolOp, [e.tensor(0)], _max_attrs(e, d, 1), location=e.loc)
        e.created.append(op)
        return list(op.results)
    return handler


def _max_pool_backward(d: int):
    def handler(e: Emitter):
        # (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices): each output
        # gradient is added to the input element its window's maximum came from
        dy, x, idx = e.tensor(0), e.tensor(1), e.tensor(7)
        xt = x.tensor_type
        lead = xt.shape[:xt.rank - d]
        plane = (*lead, math.prod(dy.tensor_type.shape[xt.rank - d:]))
        zeros = e.splat(0, dy.tensor_type.with_shape((*lead, math.prod(xt.shape[xt.rank - d:]))))
        flat = e.create(T.ScatterOp, [zeros, e.reshape(idx, plane), e.reshape(dy, plane)],
                        {"dim": len(lead), "reduce": "add"})
        return [e.reshape(flat, xt.shape)]
    return handler


def _adaptive(d: int):
    def handler(e: Emitter):
        # (self, output_size); pooling to one cell is the mean over the spatial dims (which shard as a mean)
        x = e.tensor(0)
        size = _ints(e, 1, d, "output_size")
        rank = x.tensor_type.rank
        if size == [1] * d and x.tensor_type.is_float:
            return [e.create(T.MeanOp, [x], {"dims": list(range(rank - d, rank)), "keepdim": True})]
        return [e.create(T.AdaptiveAvgPoolOp, [x], {"output_size": size})]
    return handler


def _adaptive_backward(d: int):
    def handler(e: Emitter):
        # (grad_output, self); from one cell, every input element gets grad / (number of elements)
        dy, xt = e.tensor(0), e.tensor(1).tensor_type
        if dy.tensor_type.shape[xt.rank - d:] == (1,) * d and xt.is_float:
            n = math.prod(xt.shape[xt.rank - d:])
            return [e.create(T.DivOp, [e.broadcast(dy, xt.shape), e.scalar(n, xt.element_type)])]
        return [e.create(T.AdaptiveAvgPoolGradOp, [dy], {"spatial_dims": d}, result_type=xt)]
    return handler


for _d in (2, 3):
    handles(A + f"avg_pool{_d}d")(_avg_pool(_d))
    handles(A + f"avg_pool{_d}d_backward")(_avg_pool_backward(_d))
    handles(A + f"max_pool{_d}d_with_indices")(_max_pool(_d))
    handles(A + f"max_pool{_d}d_with_indices_backward")(_max_pool_backward(_d))
    handles(A + f"_adaptive_avg_pool{_d}d")(_adaptive(_d))
    handles(A + f"_adaptive_avg_pool{_d}d_backward")(_adaptive_backward(_d))
handles(A + "adaptive_avg_pool1d")(_adaptive(1))


@handles(A + "upsample_nearest2d.vec")
def _upsample_nearest_vec(e: Emitter):
    # (input, output_size?, scale_factors?): with scale factors the output size is floor(size * scale)
    # and the factors themselves (not the size ratio) set the source rows
    out = e.out_type(0)
    attrs: dict = {"output_size": list(out.shape[2:])}
    scales = e.const(2, None)
    if scales is not None:
        if not isinstance(scales, list) or len(scales) != 2:
            raise e.unsupported(f"with scale factors {scales!r}")
        attrs["scales"] = [float(s) for s in scales]
    return [e.create(T.UpsampleNearestOp, [e.tensor(0)], attrs)]


def _grid_attrs(e: Emitter) -> dict:
    return {"interpolation_mode": int(e.const(2)), "padding_mode": int(e.const(3)),
            "align_corners": bool(e.const(4))}


@handles(A + "grid_sampler_2d")
def _grid_sampler(e: Emitter):
    # (input, grid, interpolation_mode, padding_mode, align_corners)
    return [e.create(T.GridSampleOp, [e.tensor(0), e.tensor(1)], _grid_attrs(e))]


@handles(A + "grid_sampler_2d_backward")
def _grid_sampler_backward(e: Emitter):
    # (grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask)
    attrs = {"interpolation_mode": int(e.const(3)), "padding_mode": int(e.const(4)),
             "align_corners": bool(e.const(5))}
    op = e.b.create(T.GridSampleGradOp, [e.tensor(0), e.tensor(1), e.tensor(2)], attrs, location=e.loc)
    e.created.append(op)
    mask = e.const(6, [True, True])
    return [r if m else None for r, m in zip(op.results, mask)]


def _replication_pad_backward(e: Emitter):
    # (grad_output, self, padding): padding lists (left, right) pairs from the last dim backwards
    g, x = e.tensor(0), e.tensor(1)
    xt = x.tensor_type
    pads = e.const(2)
    if not isinstance(pads, list) or len(pads) % 2 or any(not isinstance(p, int) or p < 0 for p in pads):
        raise e.unsupported(f"with padding {pads!r} (only constant, non-negative padding)")
    for k in range(len(pads) // 2):
        dim, lo, hi = xt.rank - 1 - k, pads[2 * k], pads[2 * k + 1]
        n = xt.shape[dim]
        g = _border_sums(e, g, dim, lo, hi, n)
    return [g]


def _border_sums(e: Emitter, g, dim: int, lo: int, hi: int, n: int):
    """The gradient along ``dim`` of copying the first element ``lo`` and the last ``hi`` times."""
    if not lo and not hi:
        return g
    mid = _slice(e, g, dim, lo, lo + n)
    rank = g.tensor_type.rank
    for start, end, low in ((0, lo, 0), (lo + n, lo + n + hi, n - 1)):
        if start == end:
            continue
        part = e.create(T.SumOp, [_slice(e, g, dim, start, end)], {"dims": [dim], "keepdim": True})
        low_pad, high_pad = [0] * rank, [0] * rank
        low_pad[dim], high_pad[dim] = low, n - 1 - low
        edge = e.create(T.PadOp, [part], {"low": low_pad, "high": high_pad, "value": 0.0})
        mid = e.create(T.AddOp, [mid, edge])
    return mid


def _slice(e: Emitter, v, dim: int, start: int, end: int):
    return e.create(T.SliceOp, [v], {"dim": dim, "start": start, "end": end, "step": 1})


for _d in (1, 2, 3):
    handles(A + f"replication_pad{_d}d_backward")(_replication_pad_backward)
