"""Handlers for data-movement aten ops: views, permutes, expand, slices, split, cat, pad, lists.

``view``/``reshape``/``(un)squeeze``/``flatten`` all become ``tensor.reshape`` (the result type
says the shape), ``expand`` becomes ``tensor.broadcast``, a split becomes one ``tensor.slice``
per piece; ops that leave the value unchanged produce no op at all.
"""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, handles, norm_dim

A = "torch.aten."


@handles(A + "view", A + "_unsafe_view", A + "reshape", A + "unsqueeze", A + "squeeze", A + "squeeze.dim",
         A + "squeeze.dims", "torch.prims.squeeze", A + "flatten.using_ints", A + "unflatten.int",
         A + "view_as", A + "reshape_as", "torch.prims.collapse_view", "torch.prims.view_of")
def _reshape(e: Emitter):
    x = e.tensor(0)
    out = e.out_type()
    if out.element_type != x.tensor_type.element_type:
        raise e.unsupported("reinterprets the element type (a bitcast view)")
    return [e.reshape(x, out.shape)]


@handles(A + "expand", A + "broadcast_to", A + "expand_as")
def _expand(e: Emitter):
    return [e.broadcast(e.tensor(0), e.out_type().shape)]


@handles("torch.prims.broadcast_in_dim")
def _broadcast_in_dim(e: Emitter):
    x, out = e.tensor(0), e.out_type()
    bdims = e.const(2)
    shape = [1] * out.rank
    for src, d in enumerate(bdims):
        shape[d] = x.tensor_type.shape[src]
    return [e.broadcast(e.reshape(x, tuple(shape)), out.shape)]


@handles(A + "permute", "torch.prims.transpose")
def _permute(e: Emitter):
    x = e.tensor(0)
    r = x.tensor_type.rank
    perm = [norm_dim(d, r) for d in e.const(1)]
    if perm == list(range(r)):
        return [x]
    return [e.create(T.PermuteOp, [x], {"perm": perm})]


@handles(A + "transpose.int", A + "t", A + "numpy_T")
def _transpose(e: Emitter):
    x = e.tensor(0)
    r = x.tensor_type.rank
    if r < 2:
        return [x]
    if e.rec.name == A + "transpose.int":
        d0, d1 = norm_dim(e.const(1), r), norm_dim(e.const(2), r)
        perm = list(range(r))
        perm[d0], perm[d1] = perm[d1], perm[d0]
    else:
        perm = list(reversed(range(r)))
    if perm == list(range(r)):
        return [x]
    return [e.create(T.PermuteOp, [x], {"perm": perm})]


def slice_value(e: Emitter, x, dim: int, start, end, step: int = 1):
    """``x[start:end:step]`` along ``dim`` with Python's clamping; identity slices vanish."""
    size = x.tensor_type.shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    end = max(end, start)
    if step < 1:
        raise e.unsupported(f"slices with step {step}")
    if (start, end, step) == (0, size, 1):
        return x
    return e.create(T.SliceOp, [x], {"dim": dim, "start": start, "end": end, "step": step})


@handles(A + "slice.Tensor")
def _slice(e: Emitter):
    x = e.tensor(0)
    dim = norm_dim(e.const(1, 0), x.tensor_type.rank)
    return [slice_value(e, x, dim, e.const(2, None), e.const(3, None), e.const(4, 1))]


@handles(A + "narrow")
def _narrow(e: Emitter):
    x = e.tensor(0)
    dim = norm_dim(e.const(1), x.tensor_type.rank)
    start = e.const(2)
    start = start + x.tensor_type.shape[dim] if start < 0 else start
    return [slice_value(e, x, dim, start, start + e.const(3))]


@handles(A + "select.int")
def _select(e: Emitter):
    x = e.tensor(0)
    dim = norm_dim(e.const(1), x.tensor_type.rank)
    i = e.const(2)
    i = i + x.tensor_type.shape[dim] if i < 0 else i
    return [e.reshape(slice_value(e, x, dim, i, i + 1), e.out_type().shape)]


@handles(A + "slice_scatter")
def _slice_scatter(e: Emitter):
    x, src = e.tensor(0), e.tensor(1)
    t = x.tensor_type
    dim = norm_dim(e.const(2, 0), t.rank)
    size = t.shape[dim]
    start, end, step = e.const(3, None), e.const(4, None), e.const(5, 1)
    start = 0 if start is None else (start + size if start < 0 else start)
    end = size if end is None else (end + size if end < 0 else end)
    start, end = min(max(start, 0), size), min(max(end, start), size)
    src = e.cast(src, t.element_type)
    if (start, end, step) == (0, size, 1):
        return [e.broadcast(src, t.shape)]
    return [e.create(T.InsertSliceOp, [x, src], {"dim": dim, "start": start, "end": end, "step": step})]


def _split(e: Emitter, x, dim: int, sizes: list[int]):
    out, start = [], 0
    for s in sizes:
        out.append(slice_value(e, x, dim, start, start + s))
        start += s
    return [out]


@handles(A + "split_with_sizes")
def _split_with_sizes(e: Emitter):
    x = e.tensor(0)
    return _split(e, x, norm_dim(e.const(2, 0), x.tensor_type.rank), list(e.const(1)))


@handles(A + "split.Tensor")
def _split_tensor(e: Emitter):
    x = e.tensor(0)
    dim = norm_dim(e.const(2, 0), x.tensor_type.rank)
    size, n = e.const(1), x.tensor_type.shape[dim]
    return _split(e, x, dim, [min(size, n - i) for i in range(0, n, size)] or [0])


@handles(A + "unbind.int")
def _unbind(e: Emitter):
    x = e.tensor(0)
    t = x.tensor_type
    dim = norm_dim(e.const(1, 0), t.rank)
    shape = t.shape[:dim] + t.shape[dim + 1:]
    return [[e.reshape(slice_value(e, x, dim, i, i + 1), shape) for i in range(t.shape[dim])]]


@handles(A + "cat", A + "concat")
def _cat(e: Emitter):
    items = e.raw(0)
    if not isinstance(items, list):
        raise e.unsupported("expects a list of tensors")
    out = e.out_type()
    vals = [e.cast(e.as_value(v), out.element_type) for v in items]
    vals = [v for v in vals if not (v.tensor_type.rank == 1 and v.tensor_type.shape[0] == 0 and out.rank != 1)]
    dim = norm_dim(e.const(1, 0), out.rank)
    if len(vals) == 1:
        return [vals[0]]
    return [e.create(T.ConcatOp, vals, {"dim": dim})]


@handles(A + "constant_pad_nd", A + "pad")
def _pad(e: Emitter):
    x = e.tensor(0)
    t = x.tensor_type
    pad = list(e.const(1))
    if e.rec.name == A + "pad" and e.const(2, "constant") != "constant":
        raise e.unsupported(f"with mode={e.const(2)!r}")
    value = e.const(2 if e.rec.name.endswith("constant_pad_nd") else 3, 0)
    value = 0 if value is None else value
    low, high = [0] * t.rank, [0] * t.rank
    for k in range(len(pad) // 2):
        low[t.rank - 1 - k], high[t.rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if not any(low) and not any(high):
        return [x]
    value = float(value) if t.is_float else int(value)
    return [e.create(T.PadOp, [x], {"low": low, "high": high, "value": value})]


@handles("torch.prim.ListConstruct")
def _list(e: Emitter):
    return [[e.raw(i) for i in range(e.num_operands)]]


@handles("torch.prim.ListUnpack")
def _unpack(e: Emitter):
    items = e.raw(0)
    if not isinstance(items, list) or len(items) != len(e.rec.results):
        raise e.unsupported("unpacks a list whose length is not known")
    return list(items)


@handles(A + "flip")
def _flip(e: Emitter):
    x = e.tensor(0)
    r = x.tensor_type.rank
    dims = sorted({norm_dim(d, r) for d in e.const(1)})
    dims = [d for d in dims if x.tensor_type.shape[d] > 1]
    if not dims:
        return [x]
    return [e.create(T.ReverseOp, [x], {"dims": dims})]


@handles(A + "repeat")
def _repeat(e: Emitter):
    """``x.repeat(r0, r1, ...)`` tiles: each dim (leading 1s added) is broadcast to ``r_i`` copies
    in front of it: reshape ``[1, s0, 1, s1, ...]``, broadcast ``[r0, s0, r1, s1, ...]``, reshape."""
    x = e.tensor(0)
    reps = [int(r) for r in e.const(1)]
    shape = (1,) * (len(reps) - x.tensor_type.rank) + x.tensor_type.shape
    if len(reps) < x.tensor_type.rank:
        raise e.unsupported("with fewer repeats than dims")
    interleaved = tuple(d for s in shape for d in (1, s))
    tiled = tuple(d for r, s in zip(reps, shape) for d in (r, s))
    return [e.reshape(e.broadcast(e.reshape(x, interleaved), tiled), e.out_type().shape)]


@handles(A + "diagonal")
def _diagonal(e: Emitter):
    x = e.tensor(0)
    r = x.tensor_type.rank
    attrs = {"offset": int(e.const(1, 0)), "dim1": norm_dim(e.const(2, 0), r), "dim2": norm_dim(e.const(3, 1), r)}
    return [e.create(T.DiagonalOp, [x], attrs)]


@handles(A + "diagonal_scatter")
def _diagonal_scatter(e: Emitter):
    x, src = e.tensor(0), e.tensor(1)
    r = x.tensor_type.rank
    attrs = {"offset": int(e.const(2, 0)), "dim1": norm_dim(e.const(3, 0), r), "dim2": norm_dim(e.const(4, 1), r)}
    return [e.create(T.DiagonalScatterOp, [x, e.cast(src, x.tensor_type.element_type)], attrs)]


# -- as_strided_scatter: storage writes as views (spmdc.frontend.aten.strided; the reads, as_strided,
# are decomposed into views before capture) --------------------------------------------------------

def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    expect = 1
    for s, st in zip(reversed(shape), reversed(strides)):
        if s != 1 and st != expect:
            return False
        expect *= s
    return True


def _contiguous_input(e: Emitter):
    """Operand 0, which must have been contiguous in the traced run: ``as_strided`` addresses its
    storage, and spmdc's values have no storage but their elements in row-major order."""
    x = e.tensor(0)
    strides = e.arg_strides(0)
    if strides is None or not _contiguous(x.tensor_type.shape, strides):
        layout = "unknown" if strides is None else f"strides {list(strides)}"
        raise e.unsupported(f"addresses the storage of a tensor whose layout is {layout}, not contiguous; "
                            "spmdc does not model storage aliasing")
    return x


def _strided_plan(e: Emitter, x, size: list[int], stride: list[int], offset: int):
    from spmdc.frontend.aten.strided import plan

    p = plan(x.tensor_type.shape, tuple(size), tuple(stride), offset)
    if isinstance(p, str):
        raise e.unsupported(f"addresses size {size}, stride {stride}, offset {offset} of a contiguous "
                            f"{list(x.tensor_type.shape)} tensor, which is not a composition of slice, reshape, "
                            f"permute and expand views: {p}; spmdc does not model storage aliasing")
    return p


def _permuted(e: Emitter, v, perm: tuple[int, ...]):
    return v if list(perm) == sorted(perm) else e.create(T.PermuteOp, [v], {"perm": list(perm)})


@handles(A + "as_strided_scatter")
def _as_strided_scatter(e: Emitter):
    """``as_strided_scatter(x, src, ...)``: a copy of contiguous ``x`` (fresh storage, offset 0) with
    the elements of the strided view replaced by ``src``: nested ``insert_slice``s of the views."""
    x = _contiguous_input(e)
    t = x.tensor_type
    src = e.cast(e.tensor(1), t.element_type)
    size, stride, offset = list(e.const(2)), list(e.const(3)), e.const(4, None)
    p = _strided_plan(e, x, size, stride, offset or 0)
    if 0 in size:
        return [x]
    if p.broadcasts:
        raise e.unsupported(f"writes through stride-0 dims (stride {stride}): the writes overlap")
    flat = None
    if p.segment is not None:
        flat = e.reshape(x, (t.num_elements,))
        v = e.reshape(slice_value(e, flat, 0, *p.segment), p.radix)
    else:
        v = e.reshape(x, p.radix)
    levels = []   # (value sliced, its slice), outermost first
    for dim, start, end, step in p.slices:
        if (start, end, step) != (0, v.tensor_type.shape[dim], 1):
            levels.append((v, (dim, start, end, step)))
            v = slice_value(e, v, dim, start, end, step)
    inv = tuple(sorted(range(len(p.perm)), key=lambda j: p.perm[j]))
    walked = _permuted(e, e.reshape(src, tuple(p.size[d] for d in p.active)), inv)
    cur = e.reshape(walked, v.tensor_type.shape)
    for parent, (dim, start, end, step) in reversed(levels):
        cur = e.create(T.InsertSliceOp, [parent, cur], {"dim": dim, "start": start, "end": end, "step": step})
    if flat is not None:
        start, end, step = p.segment
        cur = e.reshape(cur, (p.radix_size,))
        if (start, end, step) != (0, t.num_elements, 1):
            cur = e.create(T.InsertSliceOp, [flat, cur], {"dim": 0, "start": start, "end": end, "step": step})
    return [e.reshape(cur, t.shape)]
