"""Handlers for tensor creation with static shapes: they all become ``tensor.constant``s (but a
large integer ``arange``: ``tensor.iota``).

``empty*`` results carry no values; they become :class:`Uninitialized` and cost nothing
unless an op actually reads them (then they read as zeros).
"""

from __future__ import annotations

from spmdc.frontend.aten.base import Emitter, Uninitialized, handles

A = "torch.aten."


@handles(A + "full_like", A + "full", A + "new_full")
def _full(e: Emitter):
    value_index = {"torch.aten.full": 1, "torch.aten.full_like": 1, "torch.aten.new_full": 2}[e.rec.name]
    return [e.splat(e.const(value_index), e.out_type())]


@handles(A + "zeros_like", A + "zeros", A + "new_zeros")
def _zeros(e: Emitter):
    return [e.splat(0, e.out_type())]


@handles(A + "ones_like", A + "ones", A + "new_ones")
def _ones(e: Emitter):
    return [e.splat(1, e.out_type())]


@handles(A + "empty_strided", A + "empty_like", A + "empty.memory_format", A + "new_empty",
         A + "new_empty_strided", A + "empty_permuted")
def _empty(e: Emitter):
    return [Uninitialized(e.out_type())]


@handles(A + "scalar_tensor", "torch.prim.NumToTensor.Scalar")
def _scalar_tensor(e: Emitter):
    return [e.splat(e.const(0), e.out_type())]


IOTA_MIN_ELEMENTS = 1 << 16
"""An integer ``arange`` of at least this many elements is a ``tensor.iota`` (its start and step), not
a dense constant of its values (a MoE router's ``arange`` over the token assignments of a real-size
batch: millions of numbers in the IR)."""


@handles(A + "arange", A + "arange.start", A + "arange.start_step")
def _arange(e: Emitter):
    import torch

    from spmdc.dialects.tensor import IotaOp
    from spmdc.dialects.tensor.base import torch_dtype
    from spmdc.ir.attributes import IntegerAttr
    from spmdc.ir.types import INT_TYPES

    out = e.out_type()
    n = {"torch.aten.arange": 1, "torch.aten.arange.start": 2, "torch.aten.arange.start_step": 3}[e.rec.name]
    args = [e.const(i) for i in range(n)]
    start, end, step = (0, args[0], 1) if n == 1 else (args[0], args[1], 1) if n == 2 else tuple(args)
    if out.element_type in INT_TYPES and out.element_type != "i1" and out.rank == 1 \
            and out.num_elements >= IOTA_MIN_ELEMENTS and all(float(x).is_integer() for x in (start, end, step)):
        got = len(range(int(start), int(end), int(step)))
        if got != out.num_elements:
            raise e.unsupported(f"gives {got} values for a result of type {out}")
        return [e.create(IotaOp, [], {"start": IntegerAttr(int(start)), "step": IntegerAttr(int(step))},
                         result_type=out)]
    vals = torch.arange(*args, dtype=torch_dtype(out.element_type)).tolist()
    if len(vals) != out.num_elements:
        raise e.unsupported(f"gives {len(vals)} values for a result of type {out}")
    return [e.dense(vals, out)]
