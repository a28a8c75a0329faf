"""Pooling and nearest upsampling over the trailing spatial dims.

    %y = tensor.avg_pool %x {ceil_mode = true, count_include_pad = false, kernel = [3, 3], padding = [1, 1],
           stride = [2, 2]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x4xf32>
    %v, %i = tensor.max_pool %x {ceil_mode = false, dilation = [1, 1], kernel = [2, 2], padding = [0, 0],
           stride = [2, 2]} : (tensor<2x3x6x6xf32>) -> (tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>)
    %a = tensor.adaptive_avg_pool %x {output_size = [4, 5]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x5xf32>
    %u = tensor.upsample_nearest %x {output_size = [12, 12]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x12x12xf32>

A value is ``[*lead, *spatial]``: one or two leading dims (channels, or batch and channels)
and as many spatial dims as the op's ``kernel`` / ``output_size`` has entries. Each op is
PyTorch's kernel (``torch.ops.aten.*``), so ``ceil_mode``, ``count_include_pad``,
``divisor_override``, padding, dilation and the flat per-plane indices of a max pool are
PyTorch's own. The gradients take the input's type as their result type.

Sharding rule: the leading dims are parallel (every plane is pooled on its own); the spatial
dims need replication (a window would need its neighbours' halo). The average pools, the
nearest upsampling and their gradients are linear (a ``P(sum)`` operand stays ``P(sum)``).
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.pyexpr import literal, shape_literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TensorOp, int_list, tensor_types
from spmdc.dialects.tensor.helpers import bool_attr, int_attr, require_float
from spmdc.ir.attributes import ArrayAttr, Attribute, BoolAttr, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


def pool_output_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape``: windows that start in the padding on the right are dropped."""
    eff = d * (k - 1) + 1
    out = (n + 2 * p - eff + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _spatial(t: TensorType, d: int, name: str) -> tuple[int, ...]:
    if d not in (1, 2, 3) or t.rank - d not in (1, 2):
        raise InferError(f"{name} expects [C, *spatial] or [N, C, *spatial] with 1-3 spatial dims, got {t} "
                         f"for {d} spatial dims")
    return t.shape[t.rank - d:]


def pool_shape(t: TensorType, attrs: dict[str, Attribute], dilation: bool) -> tuple[int, ...]:
    """The pooled shape of ``t`` for ``kernel``/``stride``/``padding`` (and ``dilation``)."""
    kernel = int_list(attrs, "kernel")
    d = len(kernel)
    spatial = _spatial(t, d, "pooling")
    stride, padding = int_list(attrs, "stride"), int_list(attrs, "padding")
    dil = int_list(attrs, "dilation") if dilation else [1] * d
    if not len(stride) == len(padding) == len(dil) == d:
        raise InferError(f"kernel {kernel}, stride {stride}, padding {padding} and dilation {dil} need one "
                         "entry per spatial dim each")
    ceil = bool_attr(attrs, "ceil_mode")
    out = []
    for n, k, s, p, di in zip(spatial, kernel, stride, padding, dil):
        if k < 1 or s < 1 or di < 1 or p < 0 or 2 * p > di * (k - 1) + 1:
            raise InferError(f"invalid window: kernel {kernel}, stride {stride}, padding {padding} (at most half "
                             f"the window), dilation {dil}")
        size = pool_output_size(n, k, s, p, di, ceil)
        if size < 1:
            raise InferError(f"kernel {kernel} does not fit the spatial dims {list(spatial)}")
        out.append(size)
    return t.shape[:t.rank - d] + tuple(out)


def plane_rule(operands: Sequence[TensorType], results: Sequence[TensorType], d: int,
               linear: bool = False) -> OpShardingRule:
    """Leading dims (all but the last ``d``) one parallel factor each, shared by every value of
    that rank; every spatial dim its own factor, blocked."""
    b = RuleBuilder()
    lead = [b.factor(s) for s in results[0].shape[:results[0].rank - d]]
    blocked: set[int] = set()

    def dims(t: TensorType) -> list[int | None]:
        fs = [b.factor(s) for s in t.shape[t.rank - d:]]
        blocked.update(fs)
        return lead[len(lead) - (t.rank - d):] + fs

    return b.build([dims(t) for t in operands], [dims(t) for t in results], blocked=frozenset(blocked),
                   partial_one=(0,) if linear else ())


class _PlaneOp(TensorOp):
    num_operands = 1
    num_results = 1
    kernel = "none"
    linear = True

    @property
    def spatial_dims(self) -> int:
        return len(self.attr_value("kernel"))  # type: ignore[arg-type]

    def sharding_rule(self) -> OpShardingRule:
        return plane_rule([v.tensor_type for v in self.operands], [r.tensor_type for r in self.results],
                          self.spatial_dims, linear=self.linear)

    def _window(self, *keys: str) -> str:
        return ", ".join(literal(self.attr_value(k)) for k in keys)


_AVG_ATTRS = {"kernel": ArrayAttr, "stride": ArrayAttr, "padding": ArrayAttr}
_AVG_OPT = {"ceil_mode": BoolAttr, "count_include_pad": BoolAttr, "divisor_override": IntegerAttr}


class _AvgBase(_PlaneOp):
    required_attrs = _AVG_ATTRS
    optional_attrs = _AVG_OPT

    def _avg_args(self) -> str:
        div = self.attr_value("divisor_override")
        ceil = bool_attr(self.attributes, "ceil_mode")
        cip = bool_attr(self.attributes, "count_include_pad", True)
        return f"{self._window('kernel', 'stride', 'padding')}, {literal(ceil)}, {literal(cip)}, {literal(div)}"

    @classmethod
    def _check(cls, t: TensorType, attrs: dict[str, Attribute]) -> tuple[int, ...]:
        require_float(t, "tensor")
        if len(int_list(attrs, "kernel")) not in (2, 3):
            raise InferError("average pooling has 2 or 3 spatial dims (1-D pooling is 2-D pooling of one row)")
        if "divisor_override" in attrs and int_attr(attrs, "divisor_override") == 0:
            raise InferError("divisor_override must be non-zero")
        return pool_shape(t, attrs, dilation=False)


class AvgPoolOp(_AvgBase):
    """Average over each window (``F.avg_pool2d`` / ``avg_pool3d``): the sum divided by
    ``divisor_override``, else by the window's size (``count_include_pad``) or the number of its
    elements inside the input.

    ``%y = tensor.avg_pool %x {kernel = [2, 2], padding = [0, 0], stride = [2, 2]}
    : (tensor<2x3x6x6xf32>) -> tensor<2x3x3x3xf32>``
    """

    name = "tensor.avg_pool"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (x,) = tensor_types(operand_types, cls.name)
        return [x.with_shape(cls._check(x, attrs))]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.ops.aten.avg_pool{self.spatial_dims}d({ins[0]}, {self._avg_args()})"


class AvgPoolGradOp(_AvgBase):
    """The gradient of ``tensor.avg_pool`` for its input (``aten.avg_pool2d_backward``): the
    result type is the input's.

    ``%dx = tensor.avg_pool_grad %dy {kernel = [2, 2], padding = [0, 0], stride = [2, 2]}
    : (tensor<2x3x3x3xf32>) -> tensor<2x3x6x6xf32>``
    """

    name = "tensor.avg_pool_grad"

    def verify_(self) -> None:
        dy, x = self.operand(0).type, self.result.type
        if not isinstance(dy, TensorType) or not isinstance(x, TensorType):
            raise self.emit_error("operates on tensors only")
        try:
            want = self._check(x, self.attributes)
        except InferError as e:
            raise self.emit_error(str(e)) from None
        if dy.shape != want or dy.element_type != x.element_type:
            raise self.emit_error(f"output gradient {dy} does not match pooling {x}")

    def torch_expr(self, ins: Sequence[str]) -> str:
        shape = shape_literal(self.result.tensor_type.shape)
        return (f"torch.ops.aten.avg_pool{self.spatial_dims}d_backward({ins[0]}, {ins[0]}.new_empty({shape}), "
                f"{self._avg_args()})")


class MaxPoolOp(_PlaneOp):
    """Maximum over each window and its flat index within the input plane
    (``aten.max_pool2d_with_indices`` / ``max_pool3d_with_indices``; padding counts as -inf).

    ``%v, %i = tensor.max_pool %x {dilation = [1, 1], kernel = [2, 2], padding = [0, 0], stride = [2, 2]}
    : (tensor<2x3x6x6xf32>) -> (tensor<2x3x3x3xf32>, tensor<2x3x3x3xi64>)``
    """

    name = "tensor.max_pool"
    num_results = 2
    required_attrs = {**_AVG_ATTRS, "dilation": ArrayAttr}
    optional_attrs = {"ceil_mode": BoolAttr}
    linear = False

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (x,) = tensor_types(operand_types, cls.name)
        require_float(x, "tensor")
        if len(int_list(attrs, "kernel")) not in (2, 3):
            raise InferError("max pooling has 2 or 3 spatial dims (1-D pooling is 2-D pooling of one row)")
        shape = pool_shape(x, attrs, dilation=True)
        return [x.with_shape(shape), TensorType(shape, "i64")]

    def torch_expr(self, ins: Sequence[str]) -> str:
        ceil = literal(bool_attr(self.attributes, "ceil_mode"))
        return (f"torch.ops.aten.max_pool{self.spatial_dims}d_with_indices({ins[0]}, "
                f"{self._window('kernel', 'stride', 'padding', 'dilation')}, {ceil})")


class AdaptiveAvgPoolOp(_PlaneOp):
    """Average over PyTorch's adaptive windows: output cell ``i`` of a dim of size ``n`` pooled to
    ``m`` averages input ``[floor(i n / m), ceil((i + 1) n / m))`` (``F.adaptive_avg_pool{1,2,3}d``).

    ``%y = tensor.adaptive_avg_pool %x {output_size = [4, 5]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x4x5xf32>``
    """

    name = "tensor.adaptive_avg_pool"
    required_attrs = {"output_size": ArrayAttr}

    @property
    def spatial_dims(self) -> int:
        return len(self.attr_value("output_size"))  # type: ignore[arg-type]

    @staticmethod
    def pooled(x: TensorType, attrs: dict[str, Attribute]) -> tuple[int, ...]:
        out = int_list(attrs, "output_size")
        _spatial(x, len(out), "adaptive pooling")
        require_float(x, "tensor")
        if any(s < 1 for s in out):
            raise InferError(f"output_size {out} must be positive")
        return x.shape[:x.rank - len(out)] + tuple(out)

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (x,) = tensor_types(operand_types, cls.name)
        return [x.with_shape(cls.pooled(x, attrs))]

    def torch_expr(self, ins: Sequence[str]) -> str:
        d = self.spatial_dims
        return f"torch.nn.functional.adaptive_avg_pool{d}d({ins[0]}, {literal(self.attr_value('output_size'))})"


class AdaptiveAvgPoolGradOp(_PlaneOp):
    """The gradient of ``tensor.adaptive_avg_pool`` for its input
    (``aten._adaptive_avg_pool{2,3}d_backward``); the result type is the input's, and the windows
    are those pooling it to the gradient's spatial shape.

    ``%dx = tensor.adaptive_avg_pool_grad %dy {spatial_dims = 2} : (tensor<2x3x4x5xf32>) -> tensor<2x3x6x6xf32>``
    """

    name = "tensor.adaptive_avg_pool_grad"
    required_attrs = {"spatial_dims": IntegerAttr}

    @property
    def spatial_dims(self) -> int:
        return int(self.attr_value("spatial_dims"))  # type: ignore[arg-type]

    def verify_(self) -> None:
        dy, x = self.operand(0).type, self.result.type
        if not isinstance(dy, TensorType) or not isinstance(x, TensorType):
            raise self.emit_error("operates on tensors only")
        d = self.spatial_dims
        if d not in (2, 3) or x.rank - d not in (1, 2) or dy.rank != x.rank or not x.is_float:
            raise self.emit_error(f"expects float [C or N, C, *spatial] gradients with 2 or 3 spatial dims, got "
                                  f"{dy} -> {x}")
        if dy.shape[:x.rank - d] != x.shape[:x.rank - d] or dy.element_type != x.element_type:
            raise self.emit_error(f"output gradient {dy} does not match pooling {x}")

    def torch_expr(self, ins: Sequence[str]) -> str:
        shape = shape_literal(self.result.tensor_type.shape)
        return (f"torch.ops.aten._adaptive_avg_pool{self.spatial_dims}d_backward({ins[0]}, "
                f"{ins[0]}.new_empty({shape}))")


class UpsampleNearestOp(_PlaneOp):
    """Nearest-neighbour resize to ``output_size`` (``aten.upsample_nearest{1,2,3}d``): output
    index ``o`` reads input ``min(floor(o * s), n - 1)`` with ``s = 1 / scales[i]`` when
    ``scales`` is given (the caller's scale factors), else ``n / output_size[i]``.

    ``%y = tensor.upsample_nearest %x {output_size = [9, 4]} : (tensor<2x3x6x6xf32>) -> tensor<2x3x9x4xf32>``
    """

    name = "tensor.upsample_nearest"
    required_attrs = {"output_size": ArrayAttr}
    optional_attrs = {"scales": ArrayAttr}

    @property
    def spatial_dims(self) -> int:
        return len(self.attr_value("output_size"))  # type: ignore[arg-type]

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (x,) = tensor_types(operand_types, cls.name)
        out = int_list(attrs, "output_size")
        _spatial(x, len(out), "nearest upsampling")
        if x.rank - len(out) != 2 or any(s < 1 for s in out):
            raise InferError(f"expects [N, C, *spatial] and a positive output_size, got {x} and {out}")
        scales = attrs.get("scales")
        if scales is not None:
            vals = [getattr(v, "value", None) for v in getattr(scales, "values", ())]
            if len(vals) != len(out) or not all(isinstance(v, (int, float)) and v > 0 for v in vals):
                raise InferError(f"scales must be {len(out)} positive numbers, got {scales}")
        return [x.with_shape(x.shape[:2] + tuple(out))]

    def torch_expr(self, ins: Sequence[str]) -> str:
        d = self.spatial_dims
        scales = self.attr_value("scales") or [None] * d
        extra = ", ".join(literal(None if s is None else float(s)) for s in scales)  # type: ignore[union-attr]
        return f"torch.ops.aten.upsample_nearest{d}d({ins[0]}, {literal(self.attr_value('output_size'))}, {extra})"


OPS = [AvgPoolOp, AvgPoolGradOp, MaxPoolOp, AdaptiveAvgPoolOp, AdaptiveAvgPoolGradOp, UpsampleNearestOp]
__all__ = [op.__name__ for op in OPS]
