"""Grid sampling (``F.grid_sample`` on 4-D inputs) and its gradient.

    %y = tensor.grid_sample %x, %grid {align_corners = false, interpolation_mode = 0, padding_mode = 0}
           : (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
    %dx, %dg = tensor.grid_sample_grad %dy, %x, %grid {align_corners = false, interpolation_mode = 0,
           padding_mode = 0} : (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>)
           -> (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>)

Both are PyTorch's kernels (``aten.grid_sampler_2d`` and its backward), so the modes, the corner
alignment and the padding are PyTorch's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TensorOp, same_element_type, tensor_types
from spmdc.dialects.tensor.helpers import bool_attr, int_attr, require_float
from spmdc.ir.attributes import BoolAttr, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType

_GRID_ATTRS = {"interpolation_mode": IntegerAttr, "padding_mode": IntegerAttr, "align_corners": BoolAttr}


class _GridBase(TensorOp):
    required_attrs = _GRID_ATTRS
    kernel = "none"

    def _modes(self) -> str:
        i, p = int_attr(self.attributes, "interpolation_mode"), int_attr(self.attributes, "padding_mode")
        if i not in (0, 1, 2) or p not in (0, 1, 2):
            raise self.emit_error(f"interpolation_mode and padding_mode must be 0, 1 or 2, got {i} and {p}")
        return f"{literal(i)}, {literal(p)}, {literal(bool_attr(self.attributes, 'align_corners'))}"

    @staticmethod
    def check(x: TensorType, grid: TensorType) -> TensorType:
        same_element_type([x, grid])
        require_float(x, "tensor")
        if x.rank != 4 or grid.rank != 4 or grid.shape[0] != x.shape[0] or grid.shape[3] != 2:
            raise InferError(f"expects input [N, C, H, W] and grid [N, Ho, Wo, 2], got {x} and {grid}")
        return x.with_shape((x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]))

    def _factors(self) -> tuple[RuleBuilder, dict[str, int], list[int]]:
        x, grid = self.operand(self.x_index).tensor_type, self.operand(self.x_index + 1).tensor_type
        b = RuleBuilder()
        f = {"n": b.factor(x.shape[0]), "c": b.factor(x.shape[1]), "h": b.factor(x.shape[2]),
             "w": b.factor(x.shape[3]), "ho": b.factor(grid.shape[1]), "wo": b.factor(grid.shape[2]),
             "two": b.factor(2)}
        return b, f, [f["h"], f["w"], f["ho"], f["wo"], f["two"]]

    x_index = 0


class GridSampleOp(_GridBase):
    """Sample ``x`` at the normalised ``grid`` locations (``aten.grid_sampler_2d``; modes as
    PyTorch numbers them: interpolation 0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros,
    1 border, 2 reflection).

    ``%y = tensor.grid_sample %x, %g {align_corners = false, interpolation_mode = 0, padding_mode = 0}
    : (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>``

    Sharding rule: batch and channels parallel, the rest replicated; linear in ``x``.
    """

    name = "tensor.grid_sample"
    num_operands = 2
    num_results = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        x, grid = tensor_types(operand_types, cls.name)
        return [cls.check(x, grid)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.grid_sampler_2d({ins[0]}, {ins[1]}, {self._modes()})"

    def sharding_rule(self) -> OpShardingRule:
        b, f, blocked = self._factors()
        return b.build([[f["n"], f["c"], f["h"], f["w"]], [f["n"], f["ho"], f["wo"], f["two"]]],
                       [[f["n"], f["c"], f["ho"], f["wo"]]], blocked=frozenset(blocked), partial_one=(0,))


class GridSampleGradOp(_GridBase):
    """The gradients of ``tensor.grid_sample`` for ``x`` and ``grid``, from the output gradient
    (``aten.grid_sampler_2d_backward``, both computed).

    ``%dx, %dg = tensor.grid_sample_grad %dy, %x, %g {align_corners = false, interpolation_mode = 0,
    padding_mode = 0} : (tensor<2x3x4x5xf32>, tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>)
    -> (tensor<2x3x6x6xf32>, tensor<2x4x5x2xf32>)``

    Sharding rule: batch parallel; channels parallel for ``dx`` and a sum for ``dgrid`` (each
    channel adds its part of the grid's gradient); the rest replicated.
    """

    name = "tensor.grid_sample_grad"
    num_operands = 3
    num_results = 2
    x_index = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        dy, x, grid = tensor_types(operand_types, cls.name)
        if cls.check(x, grid) != dy:
            raise InferError(f"output gradient {dy} does not match sampling {x} at {grid}")
        return [x, grid]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.ops.aten.grid_sampler_2d_backward({ins[0]}, {ins[1]}, {ins[2]}, {self._modes()}, [True, True])"

    def sharding_rule(self) -> OpShardingRule:
        b, f, blocked = self._factors()
        xd, gd = [f["n"], f["c"], f["h"], f["w"]], [f["n"], f["ho"], f["wo"], f["two"]]
        return b.build([[f["n"], f["c"], f["ho"], f["wo"]], xd, gd], [xd, gd], blocked=frozenset(blocked),
                       reductions=((f["c"], "sum"),))


OPS = [GridSampleOp, GridSampleGradOp]
__all__ = [op.__name__ for op in OPS]
