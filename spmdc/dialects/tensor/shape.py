"""Ops that move data without arithmetic: permute, reshape, broadcast, constant.

    %0 = tensor.permute %x {perm = [1, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>
    %1 = tensor.reshape %0 : (tensor<16x8xf32>) -> tensor<2x8x8xf32>
    %2 = tensor.broadcast %b : (tensor<16xf32>) -> tensor<8x16xf32>
    %3 = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
"""

from __future__ import annotations

from typing import Any

from spmdc.ir.attributes import ArrayAttr, DenseAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType
from spmdc.dialects.tensor.base import TensorOp, check_dims, int_list, tensor_types, torch_dtype, torch_module


class PermuteOp(TensorOp):
    """Reorder dims: result dim ``i`` is operand dim ``perm[i]``."""

    name = "tensor.permute"
    num_operands = 1
    num_results = 1
    required_attrs = {"perm": ArrayAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        perm = int_list(attrs, "perm")
        if len(perm) != a.rank:
            raise InferError(f"perm {perm} has {len(perm)} entries for a rank-{a.rank} tensor")
        check_dims(perm, a.rank, "perm entry")
        return [TensorType(tuple(a.shape[p] for p in perm), a.element_type)]

    @property
    def perm(self) -> list[int]:
        return [p.value for p in self.attributes["perm"]]  # type: ignore[attr-defined]

    def reference(self, a: Any) -> Any:
        return a.permute(*self.perm)


class ReshapeOp(TensorOp):
    """Same elements in row-major order, new shape (given by the result type)."""

    name = "tensor.reshape"
    num_operands = 1
    num_results = 1

    def verify_(self) -> None:
        src, dst = self.operand(0).type, self.result.type
        if not isinstance(src, TensorType) or not isinstance(dst, TensorType):
            raise self.emit_error("operates on tensors only")
        if src.element_type != dst.element_type:
            raise self.emit_error(f"element types differ: {src.element_type} vs {dst.element_type}")
        if src.num_elements != dst.num_elements:
            raise self.emit_error(f"cannot reshape {src} ({src.num_elements} elements) to {dst} "
                                  f"({dst.num_elements} elements)")

    def reference(self, a: Any) -> Any:
        return a.reshape(self.result.tensor_type.shape)


class BroadcastOp(TensorOp):
    """Broadcast to the result shape with torch's rules (trailing dims aligned)."""

    name = "tensor.broadcast"
    num_operands = 1
    num_results = 1

    def verify_(self) -> None:
        src, dst = self.operand(0).type, self.result.type
        if not isinstance(src, TensorType) or not isinstance(dst, TensorType):
            raise self.emit_error("operates on tensors only")
        if src.element_type != dst.element_type:
            raise self.emit_error(f"element types differ: {src.element_type} vs {dst.element_type}")
        ok = src.rank <= dst.rank and all(
            s in (1, d) for s, d in zip(reversed(src.shape), reversed(dst.shape)))
        if not ok:
            raise self.emit_error(f"cannot broadcast {src} to {dst}")

    def reference(self, a: Any) -> Any:
        return a.expand(self.result.tensor_type.shape)


class ConstantOp(TensorOp):
    """A dense constant; its type is the value's type."""

    name = "tensor.constant"
    num_operands = 0
    num_results = 1
    required_attrs = {"value": DenseAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        v = attrs.get("value")
        if not isinstance(v, DenseAttr):
            raise InferError("attribute 'value' must be a dense<...> attribute")
        return [v.type]

    @property
    def value(self) -> DenseAttr:
        return self.attributes["value"]  # type: ignore[return-value]

    def reference(self) -> Any:
        v = self.value
        torch = torch_module()
        return torch.tensor(v.flat_values(), dtype=torch_dtype(v.type.element_type)).reshape(v.type.shape)


OPS = [PermuteOp, ReshapeOp, BroadcastOp, ConstantOp]
