"""Matrix products.

    %0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = tensor.matmul %q, %k : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
"""

from __future__ import annotations

from spmdc.dialects.shard.rules import OpShardingRule, matmul_rule
from spmdc.dialects.tensor.base import TensorOp, broadcast_shapes, same_element_type, tensor_types
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


class MatmulOp(TensorOp):
    """``torch.matmul`` on operands of rank >= 2; batch dims broadcast:
    ``%r = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>``.

    Sharding: ``([..., m, k], [..., k, n]) -> ([..., m, n])``, ``k`` a sum (sharding it
    leaves ``P(sum)``); a ``P(sum)`` operand passes through when the other is replicated.
    """

    name = "tensor.matmul"
    num_operands = 2
    num_results = 1
    torch = "torch.matmul({0}, {1})"
    kernel = "matmul"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        a, b = tensor_types(operand_types, cls.name)
        if a.rank < 2 or b.rank < 2:
            raise InferError(f"operands must have rank >= 2, got {a} and {b}")
        elt = same_element_type([a, b])
        if a.shape[-1] != b.shape[-2]:
            raise InferError(f"contracting dims differ: {a.shape[-1]} (lhs dim {a.rank - 1}) vs "
                             f"{b.shape[-2]} (rhs dim {b.rank - 2})")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return [TensorType(batch + (a.shape[-2], b.shape[-1]), elt)]

    def sharding_rule(self) -> OpShardingRule:
        return matmul_rule(self.operand(0).tensor_type, self.operand(1).tensor_type, self.result.tensor_type)

    def kernel_role(self) -> str | None:
        return "matmul" if self.result.tensor_type.is_float else None


OPS = [MatmulOp]
