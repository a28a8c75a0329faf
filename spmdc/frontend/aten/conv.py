"""Handlers for ``aten.convolution`` and ``aten.convolution_backward`` (1-D to 3-D).

``convolution(x, w, bias, ...)`` becomes ``tensor.conv`` plus a ``tensor.add`` of the bias
broadcast over ``[N, Cout, *spatial]``; the backward becomes ``tensor.conv_input_grad``,
``tensor.conv_weight_grad`` and a ``tensor.sum`` for the bias, each only when autograd asks
for it (``output_mask``).

A transposed convolution (``ConvTranspose``, and the double backward of a convolution) is the
gradient of a convolution for its input: with weight ``[Cin, Cout / groups, *kernel]`` it is
``tensor.conv_input_grad`` of ``x`` by ``w`` whose result type (given by ``output_padding``) is
the output's; its backward swaps the roles: the input gradient is ``tensor.conv`` of the output
gradient by ``w``, the weight gradient ``tensor.conv_weight_grad`` of the output gradient (as
the convolution's input) and ``x`` (as its output gradient). An ``output_padding`` that the
convolution of the output would not give back (one not below the stride) is refused.
"""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.dialects.tensor.conv import conv_output_shape
from spmdc.frontend.aten.base import Emitter, handles
from spmdc.ir.attributes import attr as to_attr
from spmdc.ir.core import InferError

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


def _transposed_fits(e: Emitter, x, w, out, attrs: dict) -> None:
    """A transposed convolution is exact as a gradient when convolving its output gives ``x`` back."""
    try:
        back = conv_output_shape(out, w.tensor_type, {k: to_attr(v) for k, v in attrs.items()})
    except InferError as err:
        raise e.unsupported(f"transposed: {err}") from None
    if back != x.tensor_type.shape:
        raise e.unsupported(f"transposed with output_padding {e.const(7)!r}: convolving the output {out} gives "
                            f"{list(back)}, not the input {x.tensor_type} (output_padding must stay below the stride)")


@handles(A + "convolution")
def _convolution(e: Emitter):
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    x, w = e.tensor(0), e.tensor(1)
    attrs = _attrs(e, 3, 8, x.tensor_type.rank - 2)
    if e.const(6):
        out = e.out_type(0).with_element_type(x.tensor_type.element_type)
        _transposed_fits(e, x, w, out, attrs)
        y = e.create(T.ConvInputGradOp, [x, w], attrs, result_type=out)
    else:
        y = e.create(T.ConvOp, [x, w], attrs)
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
    dy, x, w = e.tensor(0), e.tensor(1), e.tensor(2)
    attrs = _attrs(e, 4, 9, x.tensor_type.rank - 2)
    mask = e.const(10)
    transposed = bool(e.const(7))
    if transposed:
        _transposed_fits(e, x, w, dy.tensor_type, attrs)
    results = [None, None, None]
    if mask[0]:
        results[0] = (e.create(T.ConvOp, [dy, w], attrs) if transposed else
                      e.create(T.ConvInputGradOp, [dy, w], attrs, result_type=x.tensor_type))
    if mask[1]:
        operands = [dy, x] if transposed else [x, dy]
        results[1] = e.create(T.ConvWeightGradOp, operands, attrs, result_type=w.tensor_type)
    if mask[2]:
        dims = [0] + list(range(2, dy.tensor_type.rank))
        results[2] = e.create(T.SumOp, [dy], {"dims": dims, "keepdim": False})
    return results
