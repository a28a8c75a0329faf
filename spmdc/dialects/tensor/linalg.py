"""Matrix products.

    %0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = tensor.matmul %q, %k : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
    %2 = tensor.linear %a, %b, %bias : (tensor<8x16xbf16>, tensor<16x32xbf16>, tensor<32xbf16>) -> tensor<8x32xbf16>
"""

from __future__ import annotations

from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder, matmul_rule
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


class LinearOp(TensorOp):
    """``a @ b + bias`` rounded once (``torch.addmm``), as eager PyTorch's linear layer computes it:
    the bias added to the product in the kernel's float32 accumulator. ``tensor.matmul`` then
    ``tensor.add`` round the product to bf16 before the bias is added — twice where eager rounds
    once, and where the bias nearly cancels the product the sum keeps the product's whole rounding
    error (gpt2-tiny's gradients 2x further from float64 than eager bf16's). Made on a rank's
    program by ``fuse-bias-add``::

        %r = tensor.linear %a, %b, %bias : (tensor<8x16xbf16>, tensor<16x32xbf16>, tensor<32xbf16>)
                                           -> tensor<8x32xbf16>

    Sharding: ``([m, k], [k, n], [n]) -> ([m, n])`` with ``k`` needing replication (a partial sum
    of the product would add the bias on every rank)."""

    name = "tensor.linear"
    num_operands = 3
    num_results = 1
    torch = "torch.addmm({2}, {0}, {1})"
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        a, b, bias = tensor_types(operand_types, cls.name)
        if a.rank != 2 or b.rank != 2:
            raise InferError(f"operands must be matrices, got {a} and {b}")
        elt = same_element_type([a, b, bias])
        if a.shape[1] != b.shape[0]:
            raise InferError(f"contracting dims differ: {a.shape[1]} (lhs dim 1) vs {b.shape[0]} (rhs dim 0)")
        out = (a.shape[0], b.shape[1])
        if bias.rank != 1 or bias.shape[0] != out[1]:
            raise InferError(f"bias must be a vector of {out[1]} elements (the product's columns), got {bias}")
        return [TensorType(out, elt)]

    def sharding_rule(self) -> OpShardingRule:
        b = RuleBuilder()
        a = self.operand(0).tensor_type
        m, k, n = b.factor(a.shape[0]), b.factor(a.shape[1]), b.factor(self.result.tensor_type.shape[1])
        return b.build([[m, k], [k, n], [n]], [[m, n]], blocked=frozenset({k}))


OPS = [MatmulOp, LinearOp]
