"""``as_strided`` as views: which size/stride/offset reads of a contiguous tensor are a composition
of ``reshape``, ``slice``, ``permute`` and ``broadcast``, and which views those are.

Element ``[i0, i1, ...]`` of ``as_strided(x, size, stride, offset)`` is element
``offset + sum(i_d * stride_d)`` of ``x`` flattened (``x`` contiguous, ``offset`` relative to its
first element). :func:`plan` writes that flat index in a mixed radix whose places are ``x``'s own
contiguous strides and the requested strides (each place divides the next): when every dim of
size > 1 and stride > 0 walks its own place, with a step, without carrying into the next one,
the read is ``x`` reshaped to the radix, one slice per place, a reshape that drops the fixed
places, a permute into the requested order and a broadcast of the stride-0 dims::

    >>> p = plan((3, 4), (2, 2), (1, 4), 1)      # x.t()[1:3, 0:2] read from a 3x4 x
    >>> p.radix, p.slices, p.perm
    ((3, 4), ((0, 0, 2, 1), (1, 1, 3, 1)), (1, 0))

Everything else (overlapping windows, reads past the tensor, interleaved strides) is not a
composition of views: :func:`plan` returns the reason as a string.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class StridedPlan:
    """How to read ``as_strided(x, size, stride, offset)`` with views of ``x``.

    ``radix``: the shape ``x`` is reshaped to; ``slices``: ``(dim, start, end, step)`` per dim of
    it (identity slices included); ``walked``: its dims that stay (the others are length-1
    slices), outermost first; ``perm``: result dim order of the walked dims (``walked[perm[j]]``
    is the ``j``-th active result dim); ``active``: the result dims of size > 1 and stride > 0;
    ``size``: the result shape (stride-0 dims are broadcast).
    """

    radix: tuple[int, ...]
    slices: tuple[tuple[int, int, int, int], ...]
    walked: tuple[int, ...]
    perm: tuple[int, ...]
    active: tuple[int, ...]
    size: tuple[int, ...]
    segment: tuple[int, int, int] | None = None   # first read x flattened [start:end:step], then reshape that

    @property
    def walked_shape(self) -> tuple[int, ...]:
        """The walked dims' lengths, outermost place first."""
        return tuple(_length(self.slices[w]) for w in self.walked)

    @property
    def active_shape(self) -> tuple[int, ...]:
        """The result shape with every non-active dim (size 1 or stride 0) as 1."""
        return tuple(s if d in self.active else 1 for d, s in enumerate(self.size))

    @property
    def radix_size(self) -> int:
        return math.prod(self.radix)

    @property
    def broadcasts(self) -> bool:
        return self.active_shape != self.size


def _length(sl: tuple[int, int, int, int]) -> int:
    _, start, end, step = sl
    return (end - start + step - 1) // step


def _chain(shape: tuple[int, ...]) -> list[int]:
    """``x``'s contiguous strides of its dims of size > 1, and its size: a divisor chain."""
    out, acc = {1}, 1
    for s in reversed(shape):
        acc *= s
        out.add(acc)
    return sorted(out)


def plan(shape: tuple[int, ...], size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> StridedPlan | str:
    """Views of a contiguous ``x`` of ``shape`` that read ``as_strided(x, size, stride, offset)``
    (``offset`` relative to ``x``'s first element); a string says why there are none.

    Tried on ``x`` reshaped (its own dims kept where they fit), then on a flat segment
    ``x.flatten()[offset:end:g]`` (``g`` the strides' gcd), which needs no offset digits: as long as
    the outermost dim's span, or just up to the last element read."""
    size, stride = tuple(size), tuple(stride)
    got = _plan(tuple(shape), size, stride, offset)
    active = [d for d in range(len(size)) if size[d] > 1 and stride[d] > 0]
    if not isinstance(got, str) or not active or got.startswith(("reads elements", "negative", "size ")):
        return got
    step = math.gcd(*(stride[d] for d in active))
    top = max(active, key=lambda d: stride[d])
    last = offset + sum((size[d] - 1) * stride[d] for d in active)
    for length in (size[top] * stride[top] // step, (last - offset) // step + 1):
        end = offset + (length - 1) * step + 1
        if end > math.prod(shape):
            continue
        seg = _plan((length,), size, tuple(st // step for st in stride), 0)
        if not isinstance(seg, str):
            return replace(seg, segment=(offset, end, step))
    return got


def _plan(shape: tuple[int, ...], size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> StridedPlan | str:
    """:func:`plan` on ``x`` reshaped to the places of ``x``'s strides and the requested ones."""
    if len(size) != len(stride):
        return f"size {list(size)} and stride {list(stride)} differ in length"
    if any(s < 0 for s in size) or any(s < 0 for s in stride):
        return "negative sizes or strides"
    n = math.prod(shape)
    if 0 in size:
        return StridedPlan((n,), ((0, 0, n, 1),), (), (), (), size)   # reads nothing: no slice matters
    last = offset + sum((s - 1) * st for s, st in zip(size, stride))
    if offset < 0 or last >= n:
        return (f"reads elements {offset}..{last} of a tensor of {n} elements (beyond it lies storage "
                "that spmdc does not model)")
    active = tuple(d for d in range(len(size)) if size[d] > 1 and stride[d] > 0)
    chain = _chain(shape)
    fixed = {stride[d] for d in active} | {1, n}
    for d in sorted(active, key=lambda d: -stride[d]):   # give each requested stride its own place
        _insert(chain, stride[d], fixed)
    while True:
        got = _walk(chain, size, stride, offset, active)
        if not isinstance(got, int):
            break
        if chain[got + 1] in fixed:   # a place some other dim walks (or the end): cannot merge
            return (f"dim {_carrier(chain, size, stride, offset, active, got)} carries into the next place of "
                    f"the flat index (places {chain[:-1]}): its elements are not one slice of a reshape")
        del chain[got + 1]            # merge the place with the next one (x reshaped more coarsely)
    if isinstance(got, str):
        return got
    walk, digit = got
    places = len(chain) - 1
    radix_in = [chain[i + 1] // chain[i] for i in range(places)]
    # places outermost first
    order = list(reversed(range(places)))
    radix = tuple(radix_in[i] for i in order)
    slices, walked, dims = [], [], []
    for k, i in enumerate(order):
        if i in walk:
            d, step = walk[i]
            slices.append((k, digit[i], digit[i] + (size[d] - 1) * step + 1, step))
            walked.append(k)
            dims.append(d)
        else:
            slices.append((k, digit[i], digit[i] + 1, 1))
    perm = tuple(sorted(range(len(dims)), key=lambda j: dims[j]))
    return StridedPlan(radix, tuple(slices), tuple(walked), perm, active, size)


def _insert(chain: list[int], s: int, fixed: set[int]) -> None:
    """Make ``s`` a place of ``chain`` when it divides a place above and is divided by one below,
    dropping the places of ``x`` in between (a coarser reshape) unless a requested stride is one;
    with no place above that it divides, drop the places between ``s`` and its largest divisor
    below, so that ``s`` steps through that one."""
    if s in chain:
        return
    lo = max(c for c in chain if c < s and s % c == 0)
    above = [c for c in chain if c > s and c % s == 0]
    between = [c for c in chain if lo < c < min(above)] if above else [c for c in chain if lo < c < s]
    if any(c in fixed for c in between):
        return
    chain[:] = sorted((set(chain) - set(between)) | ({s} if above else set()))


def _walk(chain: list[int], size: tuple[int, ...], stride: tuple[int, ...], offset: int,
          active: tuple[int, ...]) -> tuple[dict[int, tuple[int, int]], list[int]] | int | str:
    """Each active dim's place and step (``{place: (dim, step)}``) and the offset's digits; the place
    of a dim that carries out of it (an int); or why no dim can walk (a string)."""
    places = len(chain) - 1                       # place i: unit chain[i], radix chain[i+1] // chain[i]
    radix = [chain[i + 1] // chain[i] for i in range(places)]
    digit = [(offset // chain[i]) % radix[i] for i in range(places)]
    walk: dict[int, tuple[int, int]] = {}
    for d in sorted(active, key=lambda d: stride[d]):
        i = max(j for j, c in enumerate(chain[:-1]) if c <= stride[d])
        if stride[d] % chain[i]:
            return (f"stride {stride[d]} is not a multiple of the place {chain[i]} it falls in "
                    f"(x's contiguous strides and the requested ones: {chain[:-1]})")
        if i in walk:
            return "two dims walk the same place of the flat index (overlapping or interleaved strides)"
        step = stride[d] // chain[i]
        if digit[i] + (size[d] - 1) * step >= radix[i]:
            return i
        walk[i] = (d, step)
    return walk, digit


def _carrier(chain: list[int], size: tuple[int, ...], stride: tuple[int, ...], offset: int,
             active: tuple[int, ...], place: int) -> int:
    """The active dim walking ``place`` (for the message)."""
    return next(d for d in active if max(j for j, c in enumerate(chain[:-1]) if c <= stride[d]) == place)


def reference(x_flat: list, p: StridedPlan) -> list:
    """What the plan reads, on a flat Python list (tests compare it with ``torch.as_strided``)."""
    import torch

    t = torch.tensor(x_flat)
    if p.segment is not None:
        t = t[p.segment[0]:p.segment[1]:p.segment[2]]
    t = t.reshape(p.radix)
    for dim, start, end, step in p.slices:
        t = t.narrow(dim, start, end - start)[(slice(None),) * dim + (slice(None, None, step),)]
    t = t.reshape(p.walked_shape).permute(p.perm).reshape(p.active_shape).expand(p.size)
    return t.flatten().tolist()


def dense_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dim order (outermost first) that makes a non-overlapping, dense layout contiguous (the
    identity for a contiguous one); None when the layout has gaps or overlaps."""
    order = tuple(sorted(range(len(shape)), key=lambda d: (-strides[d], d)))
    expect = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != expect:
            return None
        expect *= shape[d]
    return order


def as_strided_decomposition(x, size, stride, storage_offset=None):
    """``aten.as_strided`` of a dense tensor as the views it amounts to (:func:`plan`), written while
    the traced tensor still has its storage layout (decomposition time): ``view``, ``slice``,
    ``permute`` and ``expand`` of ``x``, which spmdc translates. Raises
    :class:`~spmdc.frontend.aten.UnsupportedOpError` with the reason otherwise (spmdc does not model
    storage aliasing)."""
    import torch

    from spmdc.frontend.aten.base import UnsupportedOpError

    aten = torch.ops.aten
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    shape, strides = tuple(int(s) for s in x.shape), tuple(int(s) for s in x.stride())
    order = dense_order(shape, strides)

    def refuse(why: str) -> UnsupportedOpError:
        return UnsupportedOpError("aten.as_strided", None, reason=(
            f"reads size {size}, stride {stride}, storage offset {storage_offset} of a {list(shape)} tensor "
            f"(strides {list(strides)}, storage offset {x.storage_offset()}), which {why}; spmdc does not "
            "model storage aliasing"))

    if order is None:
        raise refuse("has gaps or overlaps in its storage")
    y = x if list(order) == sorted(order) else aten.permute.default(x, list(order))
    base = int(x.storage_offset())
    offset = base if storage_offset is None else int(storage_offset)
    p = plan(tuple(y.shape), tuple(size), tuple(stride), offset - base)
    if isinstance(p, str):
        raise refuse(f"is not a composition of slice, reshape, permute and expand views: {p}")
    flat = [int(y.numel())]
    if 0 in size:
        return aten.view.default(aten.slice.Tensor(aten.view.default(y, flat), 0, 0, 0), size)
    v = y
    if p.segment is not None:
        v = aten.slice.Tensor(aten.view.default(v, flat), 0, *p.segment)
    v = aten.view.default(v, list(p.radix))
    for dim, start, end, step in p.slices:
        if (start, end, step) != (0, v.shape[dim], 1):
            v = aten.slice.Tensor(v, dim, start, end, step)
    v = aten.view.default(v, list(p.walked_shape))
    if list(p.perm) != sorted(p.perm):
        v = aten.permute.default(v, list(p.perm))
    v = aten.view.default(v, list(p.active_shape))
    return aten.expand.default(v, list(p.size)) if p.broadcasts else v
