"""Handlers for ``aten.convolution`` and ``aten.convolution_backward`` (1-D to 3-D).

``convolution(x, w, bias, ...)`` becomes ``tensor.conv`` plus a ``tensor.add`` of the bias
broadcast over ``[N, Cout, *spatial]``; the backward becomes ``tensor.conv_input_grad``,
``tensor.conv_weight_grad`` and a ``tensor.sum`` for the bias, each only when autograd asks
for it (``output_mask``). Transposed convolutions are refused with their reason.
"""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, handles

A = "torch.aten."


def _attrs(e: Emitter, first: int, groups_i: int, spatial: int) -> dict:
    stride, padding, dilation = (e.const(first + i) for i in range(3))
    attrs = {}
    for key, vals in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        if not isinstance(vals, list) or not all(isinstance(v, int) for v in vals):
            raise e.unsupported(f"with a non-constant {key} ({vals!r})")
        attrs[key] = vals * spatial if len(vals) == 1 else vals
    attrs["groups"] = int(e.const(groups_i))
    return attrs


def _refuse_transposed(e: Emitter, transposed_i: int) -> None:
    if e.const(transposed_i):
        raise e.unsupported("with transposed=True (ConvTranspose): spmdc has no transposed convolution yet")


@handles(A + "convolution")
def _convolution(e: Emitter):
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    _refuse_transposed(e, 6)
    x, w = e.tensor(0), e.tensor(1)
    y = e.create(T.ConvOp, [x, w], _attrs(e, 3, 8, x.tensor_type.rank - 2))
    bias = e.raw(2)
    if bias is None:
        return [y]
    b = e.as_value(bias)
    shape = (b.tensor_type.shape[0],) + (1,) * (y.tensor_type.rank - 2)
    column = e.create(T.ReshapeOp, [b], result_type=b.tensor_type.with_shape(shape))
    return [e.create(T.AddOp, [y, column])]


@handles(A + "convolution_backward")
def _convolution_backward(e: Emitter):
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
    #  groups, output_mask) -> (grad_input, grad_weight, grad_bias)
    _refuse_transposed(e, 7)
    dy, x, w = e.tensor(0), e.tensor(1), e.tensor(2)
    attrs = _attrs(e, 4, 9, x.tensor_type.rank - 2)
    mask = e.const(10)
    results = [None, None, None]
    if mask[0]:
        results[0] = e.create(T.ConvInputGradOp, [dy, w], attrs, result_type=x.tensor_type)
    if mask[1]:
        results[1] = e.create(T.ConvWeightGradOp, [x, dy], attrs, result_type=w.tensor_type)
    if mask[2]:
        dims = [0] + list(range(2, dy.tensor_type.rank))
        results[2] = e.create(T.SumOp, [dy], {"dims": dims, "keepdim": False})
    return results
