"""Attribute readers shared by the frontend-driven ``tensor`` ops (dims, numbers, flags)."""

from __future__ import annotations

from spmdc.ir.attributes import Attribute, BoolAttr, FloatAttr, IntegerAttr, StringAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


def int_attr(attrs: dict[str, Attribute], key: str, default: int | None = None) -> int:
    a = attrs.get(key)
    if a is None and default is not None:
        return default
    if not isinstance(a, IntegerAttr):
        raise InferError(f"attribute '{key}' must be an integer")
    return a.value


def number_attr(attrs: dict[str, Attribute], key: str) -> int | float | None:
    """An optional integer or float attribute (e.g. clamp bounds, pad value)."""
    a = attrs.get(key)
    if a is None:
        return None
    if not isinstance(a, (IntegerAttr, FloatAttr)):
        raise InferError(f"attribute '{key}' must be a number")
    return a.value


def bool_attr(attrs: dict[str, Attribute], key: str, default: bool = False) -> bool:
    a = attrs.get(key)
    return bool(a.value) if isinstance(a, BoolAttr) else default


def str_attr(attrs: dict[str, Attribute], key: str, allowed: tuple[str, ...], default: str | None = None) -> str:
    a = attrs.get(key)
    if a is None and default is not None:
        return default
    if not isinstance(a, StringAttr) or a.value not in allowed:
        raise InferError(f"attribute '{key}' must be one of {', '.join(repr(x) for x in allowed)}")
    return a.value


def check_dim(dim: int, rank: int, key: str = "dim") -> None:
    if not 0 <= dim < rank:
        raise InferError(f"{key} {dim} is out of range for a rank-{rank} tensor")


def require_int(t: TensorType, what: str) -> None:
    """An index tensor: i32 or i64 (torch rejects narrower integers; an i1 index would be a mask)."""
    if t.is_float:
        raise InferError(f"{what} must be an integer tensor, got {t}")
    if t.element_type not in ("i32", "i64"):
        raise InferError(f"{what} must be an i32 or i64 tensor, got {t}")


def require_float(t: TensorType, what: str = "operand") -> None:
    if not t.is_float:
        raise InferError(f"expects a floating-point {what}, got {t}")
