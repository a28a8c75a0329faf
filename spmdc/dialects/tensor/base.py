"""Shared pieces of ``tensor`` ops: the base class, inference helpers, lazy torch."""

from __future__ import annotations

from typing import Any, ClassVar

from spmdc.ir.attributes import Attribute
from spmdc.ir.core import InferError, Operation
from spmdc.ir.types import TensorType, Type


def torch_module() -> Any:
    """Import torch on first use (spmdc-opt never needs it)."""
    import torch

    return torch


TORCH_DTYPES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "bool",
}


def torch_dtype(element_type: str) -> Any:
    return getattr(torch_module(), TORCH_DTYPES[element_type])


class TensorOp(Operation):
    """Base of compute ops on tensors (global or local shapes).

    ``reference(*tensors)`` computes the op with torch eager ops; the interpreter
    and the generated code rely on it.
    """

    traits: ClassVar[frozenset[str]] = frozenset({"Pure"})

    def reference(self, *args: Any) -> Any:
        raise NotImplementedError(f"'{self.name}' has no reference implementation")


def tensor_types(types: list[Type], op_name: str) -> list[TensorType]:
    for t in types:
        if not isinstance(t, TensorType):
            raise InferError(f"operands must be tensors, got {t}")
    return types  # type: ignore[return-value]


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy/torch broadcasting of two shapes (trailing dims aligned)."""
    out = []
    for i in range(max(len(a), len(b))):
        da = a[-1 - i] if i < len(a) else 1
        db = b[-1 - i] if i < len(b) else 1
        if da != db and 1 not in (da, db):
            raise InferError(f"shapes {list(a)} and {list(b)} are not broadcast-compatible")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def same_element_type(types: list[TensorType]) -> str:
    elts = {t.element_type for t in types}
    if len(elts) > 1:
        raise InferError(f"operands have different element types: {', '.join(sorted(elts))}")
    return types[0].element_type


def int_list(attrs: dict[str, Attribute], key: str) -> list[int]:
    a = attrs.get(key)
    try:
        vals = [v.value for v in a.values]  # type: ignore[union-attr]
    except AttributeError:
        raise InferError(f"attribute '{key}' must be an array of integers") from None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        raise InferError(f"attribute '{key}' must be an array of integers")
    return vals


def check_dims(dims: list[int], rank: int, key: str) -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise InferError(f"{key} {d} is out of range for a rank-{rank} tensor")
    if len(set(dims)) != len(dims):
        raise InferError(f"{key} {dims} repeats a dim")
