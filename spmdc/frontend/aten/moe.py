"""Mixture-of-experts matmuls: ``aten._grouped_mm`` and HuggingFace's grouped-matmul custom ops
(``transformers::grouped_mm_fallback`` and its backward, what ``transformers.integrations.moe``
calls when ``torch._grouped_mm`` cannot run) -> ``tensor.grouped_matmul`` (and ``_wgrad``).

    %y = tensor.grouped_matmul %xs, %w_t, %offs
           : (tensor<64x32xf32>, tensor<4x32x128xf32>, tensor<4xi32>) -> tensor<64x128xf32>

``offs`` are the groups' cumulative ends, cast to i32; a model's own ``offs`` of another integer
type is accepted (the fallback takes int32 and int64). The ops get explicit bounds, ``starts``
(``offs`` shifted right by one, a leading 0) and ``ends`` (``offs``), so that the expert dim may be
sharded (expert parallelism: see :mod:`spmdc.dialects.tensor.grouped`)::

    %starts = tensor.pad %offs {high = [-1], low = [1], value = 0} : (tensor<4xi32>) -> tensor<4xi32>
    %y = tensor.grouped_matmul %xs, %w_t, %starts, %offs : (...) -> tensor<64x128xf32>
"""

from __future__ import annotations

import spmdc.dialects.tensor as T
from spmdc.frontend.aten.base import Emitter, handles
from spmdc.ir.core import Value


def _offs(e: Emitter, i: int) -> list[Value]:
    """``[starts, ends]`` of the groups from the cumulative ends ``offs`` (operand ``i``)."""
    offs = e.tensor(i)
    if offs.tensor_type.is_float or offs.tensor_type.rank != 1:
        raise e.unsupported(f"offs must be a rank-1 integer tensor, got {offs.tensor_type}")
    ends = e.cast(offs, "i32")
    starts = e.create(T.PadOp, [ends], {"low": [1], "high": [-1], "value": 0})
    return [starts, ends]


@handles("torch.transformers.grouped_mm_fallback")
def _hf_grouped_mm(e: Emitter):
    """``(input (S, K), weight (E, K, N), offs (E,)) -> (S, N)``."""
    return [e.create(T.GroupedMatmulOp, [e.tensor(0), e.tensor(1), *_offs(e, 2)])]


@handles("torch.transformers.grouped_mm_fallback_backward")
def _hf_grouped_mm_backward(e: Emitter):
    """``(input, weight, offs, grad_output) -> (grad_input, grad_weight)``."""
    x, w, bounds, dy = e.tensor(0), e.tensor(1), _offs(e, 2), e.tensor(3)
    dx = e.create(T.GroupedMatmulOp, [dy, w, *bounds], {"transpose_w": True})
    dw = e.create(T.GroupedMatmulWgradOp, [x, dy, *bounds])
    return [dx, dw]


@handles("torch.aten._grouped_mm")
def _grouped_mm(e: Emitter):
    """``_grouped_mm(self, mat2, offs, bias, out_dtype)``: the (2-D, 3-D) form groups the rows of
    ``self``; the (2-D, 2-D) form (the weight gradient, groups along the contracted dim) gives one
    product per group. Other forms (3-D x 3-D batched, bias, out_dtype) are refused by name."""
    if e.num_operands < 3 or e.is_const(2):
        raise e.unsupported("is called without offs (the batched form), which spmdc does not translate")
    for i, what in ((3, "bias"), (4, "out_dtype")):
        if i < e.num_operands and not (e.is_const(i) and e.const(i) is None):
            raise e.unsupported(f"is called with {what}, which spmdc does not translate")
    a, b, bounds = e.tensor(0), e.tensor(1), _offs(e, 2)
    if a.tensor_type.rank == 2 and b.tensor_type.rank == 3:
        return [e.create(T.GroupedMatmulOp, [a, b, *bounds])]
    if a.tensor_type.rank == 2 and b.tensor_type.rank == 2:   # (K, S) x (S, N) grouped over S -> (E, K, N)
        at = e.create(T.PermuteOp, [a], {"perm": [1, 0]})
        return [e.create(T.GroupedMatmulWgradOp, [at, b, *bounds])]
    raise e.unsupported(f"has operands of ranks {a.tensor_type.rank} and {b.tensor_type.rank}; spmdc translates "
                        "the (2-D, 3-D) and (2-D, 2-D) grouped forms")

