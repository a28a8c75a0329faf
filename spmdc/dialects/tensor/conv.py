"""Convolution (1-D, 2-D, 3-D; groups, stride, padding, dilation) and its two gradients.

    %y = tensor.conv %x, %w {dilation = [1, 1], groups = 1, padding = [1, 1], stride = [1, 1]}
           : (tensor<2x3x16x16xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x16x16xf32>
    %dx = tensor.conv_input_grad %dy, %w {dilation = [1, 1], groups = 1, padding = [1, 1], stride = [1, 1]}
           : (tensor<2x8x16x16xf32>, tensor<8x3x3x3xf32>) -> tensor<2x3x16x16xf32>
    %dw = tensor.conv_weight_grad %x, %dy {dilation = [1, 1], groups = 1, padding = [1, 1], stride = [1, 1]}
           : (tensor<2x3x16x16xf32>, tensor<2x8x16x16xf32>) -> tensor<8x3x3x3xf32>

``x`` is ``[N, Cin, *spatial]``, ``w`` ``[Cout, Cin / groups, *kernel]``, ``y`` ``[N, Cout, *out]`` with
``out = (in + 2 padding - dilation (kernel - 1) - 1) // stride + 1``. A bias is a separate
``tensor.add`` (the frontend splits ``aten.convolution``), so a sharded input-channel sum
never counts it twice. The input gradient's type is its result type (strided convolutions
lose the last rows: the result type says which shape the input had). A transposed convolution
(``ConvTranspose``, weight ``[Cin, Cout / groups, *kernel]``) is ``tensor.conv_input_grad`` of its
input by its weight, with its output's type (the frontend checks that the output padding keeps
it the gradient of a convolution).

Sharding rule (``groups = 1``): batch and output channels are parallel factors, input
channels a sum (sharding them leaves ``P(sum)``, as a row-parallel matmul does); spatial and
kernel dims need replication (a piece would need its neighbours' halo). With ``groups > 1``
the channels need replication too. In the input gradient the output channels are the sum; in
the weight gradient the batch is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdc.dialects.pyexpr import literal, shape_literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TensorOp, int_list, same_element_type, tensor_types
from spmdc.dialects.tensor.helpers import int_attr
from spmdc.ir.attributes import ArrayAttr, Attribute, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


def conv_params(attrs: dict[str, Attribute], spatial: int) -> tuple[list[int], list[int], list[int], int]:
    """``(stride, padding, dilation, groups)`` checked against the number of spatial dims."""
    out = []
    for key in ("stride", "padding", "dilation"):
        vals = int_list(attrs, key)
        if len(vals) != spatial:
            raise InferError(f"attribute '{key}' needs {spatial} values (one per spatial dim), got {vals}")
        if any(v < (0 if key == "padding" else 1) for v in vals):
            raise InferError(f"attribute '{key}' has an invalid value in {vals}")
        out.append(vals)
    groups = int_attr(attrs, "groups", 1)
    if groups < 1:
        raise InferError(f"groups must be positive, got {groups}")
    return out[0], out[1], out[2], groups


def conv_output_shape(x: TensorType, w: TensorType, attrs: dict[str, Attribute]) -> tuple[int, ...]:
    if x.rank not in (3, 4, 5) or w.rank != x.rank:
        raise InferError(f"expects input [N, C, *spatial] and weight [Cout, Cin/groups, *kernel] with 1-3 "
                         f"spatial dims, got {x} and {w}")
    stride, padding, dilation, groups = conv_params(attrs, x.rank - 2)
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise InferError(f"input channels {x.shape[1]} and weight {w} do not fit groups = {groups}")
    spatial = []
    for n, k, s, p, d in zip(x.shape[2:], w.shape[2:], stride, padding, dilation):
        size = (n + 2 * p - d * (k - 1) - 1) // s + 1
        if size < 1:
            raise InferError(f"kernel {list(w.shape[2:])} does not fit input {list(x.shape[2:])}")
        spatial.append(size)
    return (x.shape[0], w.shape[0], *spatial)


class _ConvBase(TensorOp):
    num_operands = 2
    num_results = 1
    required_attrs = {"stride": ArrayAttr, "padding": ArrayAttr, "dilation": ArrayAttr}
    optional_attrs = {"groups": IntegerAttr}
    kernel = "none"

    def _params(self) -> str:
        spatial = self.result.tensor_type.rank - 2
        stride, padding, dilation, groups = conv_params(self.attributes, spatial)
        return f"{literal(stride)}, {literal(padding)}, {literal(dilation)}, {literal(groups)}"

    def _verify_gradient(self, x: Any, w: Any, dy: Any) -> None:
        """A gradient op: ``dy`` must be what convolving ``x`` with ``w`` gives."""
        if not all(isinstance(t, TensorType) for t in (dy, w, x)):
            raise self.emit_error("operates on tensors only")
        try:
            want = conv_output_shape(x, w, self.attributes)
        except InferError as e:
            raise self.emit_error(str(e)) from None
        if tuple(dy.shape) != want or len({dy.element_type, w.element_type, x.element_type}) != 1:
            raise self.emit_error(f"output gradient {dy} does not match convolving {x} with {w}")

    @property
    def groups(self) -> int:
        return int_attr(self.attributes, "groups", 1)

    def _factors(self, x: TensorType, w: TensorType, y: TensorType) -> tuple[RuleBuilder, dict[str, Any]]:
        b = RuleBuilder()
        f: dict[str, Any] = {"n": b.factor(x.shape[0]), "cin": b.factor(x.shape[1]), "cout": b.factor(w.shape[0]),
                             "win": b.factor(w.shape[1]) if self.groups > 1 else None}
        f["in"] = [b.factor(s) for s in x.shape[2:]]
        f["out"] = [b.factor(s) for s in y.shape[2:]]
        f["k"] = [b.factor(s) for s in w.shape[2:]]
        if f["win"] is None:
            f["win"] = f["cin"]
        f["blocked"] = set(f["in"] + f["out"] + f["k"])
        if self.groups > 1:
            f["blocked"] |= {f["cin"], f["cout"], f["win"]}
        return b, f


class ConvOp(_ConvBase):
    """``F.conv{1,2,3}d(x, w)`` without bias.

    ``%y = tensor.conv %x, %w {dilation = [1], groups = 1, padding = [0], stride = [1]}
    : (tensor<2x4x16xf32>, tensor<8x4x3xf32>) -> tensor<2x8x14xf32>``
    """

    name = "tensor.conv"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        x, w = tensor_types(operand_types, cls.name)
        elt = same_element_type([x, w])
        if not x.is_float:
            raise InferError(f"expects floating-point tensors, got {x}")
        return [TensorType(conv_output_shape(x, w, attrs), elt)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        d = self.result.tensor_type.rank - 2
        return f"torch.nn.functional.conv{d}d({ins[0]}, {ins[1]}, None, {self._params()})"

    def sharding_rule(self) -> OpShardingRule:
        x, w, y = self.operand(0).tensor_type, self.operand(1).tensor_type, self.result.tensor_type
        b, f = self._factors(x, w, y)
        return b.build([[f["n"], f["cin"], *f["in"]], [f["cout"], f["win"], *f["k"]]],
                       [[f["n"], f["cout"], *f["out"]]], blocked=frozenset(f["blocked"]),
                       reductions=((f["cin"], "sum"),) if self.groups == 1 else (),
                       partial_one=(0, 1))


class ConvInputGradOp(_ConvBase):
    """The gradient of ``tensor.conv`` for its input, from ``dy`` and the weight; the result type
    is the input's.

    ``%dx = tensor.conv_input_grad %dy, %w {dilation = [1], groups = 1, padding = [0], stride = [1]}
    : (tensor<2x8x14xf32>, tensor<8x4x3xf32>) -> tensor<2x4x16xf32>``
    """

    name = "tensor.conv_input_grad"

    def verify_(self) -> None:
        self._verify_gradient(x=self.result.type, w=self.operand(1).type, dy=self.operand(0).type)

    def torch_expr(self, ins: Sequence[str]) -> str:
        d = self.result.tensor_type.rank - 2
        return (f"torch.nn.grad.conv{d}d_input({shape_literal(self.result.tensor_type.shape)}, {ins[1]}, {ins[0]}, "
                f"{self._params()})")

    def sharding_rule(self) -> OpShardingRule:
        dy, w, x = self.operand(0).tensor_type, self.operand(1).tensor_type, self.result.tensor_type
        b, f = self._factors(x, w, dy)
        return b.build([[f["n"], f["cout"], *f["out"]], [f["cout"], f["win"], *f["k"]]],
                       [[f["n"], f["cin"], *f["in"]]], blocked=frozenset(f["blocked"]),
                       reductions=((f["cout"], "sum"),) if self.groups == 1 else (),
                       partial_one=(0, 1))


class ConvWeightGradOp(_ConvBase):
    """The gradient of ``tensor.conv`` for its weight, from the input and ``dy``; the result type
    is the weight's.

    ``%dw = tensor.conv_weight_grad %x, %dy {dilation = [1], groups = 1, padding = [0], stride = [1]}
    : (tensor<2x4x16xf32>, tensor<2x8x14xf32>) -> tensor<8x4x3xf32>``
    """

    name = "tensor.conv_weight_grad"

    def verify_(self) -> None:
        self._verify_gradient(x=self.operand(0).type, w=self.result.type, dy=self.operand(1).type)

    def torch_expr(self, ins: Sequence[str]) -> str:
        d = self.result.tensor_type.rank - 2
        return (f"torch.nn.grad.conv{d}d_weight({ins[0]}, {shape_literal(self.result.tensor_type.shape)}, {ins[1]}, "
                f"{self._params()})")

    def sharding_rule(self) -> OpShardingRule:
        x, dy, w = self.operand(0).tensor_type, self.operand(1).tensor_type, self.result.tensor_type
        b, f = self._factors(x, w, dy)
        return b.build([[f["n"], f["cin"], *f["in"]], [f["n"], f["cout"], *f["out"]]],
                       [[f["cout"], f["win"], *f["k"]]], blocked=frozenset(f["blocked"]),
                       reductions=((f["n"], "sum"),), partial_one=(0, 1))


OPS = [ConvOp, ConvInputGradOp, ConvWeightGradOp]
