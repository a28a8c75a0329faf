"""Matrix products.

    %0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = tensor.matmul %q, %k : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
"""

from __future__ import annotations

from typing import Any

from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType
from spmdc.dialects.tensor.base import TensorOp, broadcast_shapes, same_element_type, tensor_types, torch_module


class MatmulOp(TensorOp):
    """``torch.matmul`` on operands of rank >= 2; batch dims broadcast."""

    name = "tensor.matmul"
    num_operands = 2
    num_results = 1

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

    def reference(self, a: Any, b: Any) -> Any:
        return torch_module().matmul(a, b)


OPS = [MatmulOp]
