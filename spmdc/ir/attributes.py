"""Attributes of the spmdc IR: immutable, hashable values attached to ops.

Textual forms (see docs/ir.md)::

    4   -1   1.5   true   "text"   [1, 2]   {k = v}   @symbol   unit-key
    tensor<4xf32>                              // a type used as an attribute
    dense<[1.0, 2.0]> : tensor<2xf32>          // dense elements
    #shard<@mesh, [S(0), R]>                   // a dialect attribute (spmdc.dialects.shard)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

from spmdc.ir.types import FLOAT_TYPES, TensorType, Type


class Attribute:
    """Base class; every attribute is a frozen dataclass printable with ``str``."""

    def __str__(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


@dataclass(frozen=True)
class IntegerAttr(Attribute):
    value: int

    def __str__(self) -> str:
        return str(self.value)


def format_float(value: float) -> str:
    """Shortest text that reads back as the same float (always has '.' or 'e')."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(float(value))
    return text if any(c in text for c in ".e") else text + ".0"


@dataclass(frozen=True)
class FloatAttr(Attribute):
    value: float

    def __str__(self) -> str:
        return format_float(self.value)


@dataclass(frozen=True)
class BoolAttr(Attribute):
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass(frozen=True)
class StringAttr(Attribute):
    value: str

    def __str__(self) -> str:
        return quote(self.value)


@dataclass(frozen=True)
class UnitAttr(Attribute):
    """Presence-only attribute: printed as the bare key in a dictionary."""

    def __str__(self) -> str:
        return "unit"


@dataclass(frozen=True)
class SymbolRefAttr(Attribute):
    name: str

    def __str__(self) -> str:
        return "@" + format_symbol(self.name)


@dataclass(frozen=True)
class TypeAttr(Attribute):
    type: Type

    def __str__(self) -> str:
        return str(self.type)


@dataclass(frozen=True)
class ArrayAttr(Attribute):
    values: tuple[Attribute, ...]

    def __iter__(self) -> Iterator[Attribute]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> Attribute:
        return self.values[i]

    def __str__(self) -> str:
        return "[" + ", ".join(str(v) for v in self.values) + "]"


@dataclass(frozen=True)
class DictAttr(Attribute):
    """An ordered dictionary attribute ``{a = 1, b}``; keys print sorted."""

    entries: tuple[tuple[str, Attribute], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(sorted(self.entries, key=lambda kv: kv[0])))

    @staticmethod
    def of(mapping: dict[str, Attribute]) -> DictAttr:
        return DictAttr(tuple(mapping.items()))

    def as_dict(self) -> dict[str, Attribute]:
        return dict(self.entries)

    def get(self, key: str) -> Attribute | None:
        return self.as_dict().get(key)

    def __str__(self) -> str:
        return format_attr_dict(dict(self.entries))


@dataclass(frozen=True)
class DenseAttr(Attribute):
    """Dense elements ``dense<[[1.0, 2.0]]> : tensor<1x2xf32>``; a splat holds one value."""

    type: TensorType
    values: tuple[float | int | bool, ...]

    def __post_init__(self) -> None:
        vals = tuple(_normalize(v, self.type.element_type) for v in self.values)
        n = self.type.num_elements
        # splat only when every value prints the same (keeps -0.0 next to 0.0, folds nans)
        if len(vals) > 1 and all(_format_scalar(v) == _format_scalar(vals[0]) for v in vals):
            vals = (vals[0],)
        if len(vals) not in (1, n):
            raise ValueError(f"dense attribute has {len(vals)} values for {n} elements")
        object.__setattr__(self, "values", vals)

    @property
    def is_splat(self) -> bool:
        return len(self.values) == 1 and self.type.num_elements != 1

    def flat_values(self) -> list[float | int | bool]:
        if len(self.values) == 1:
            return list(self.values) * self.type.num_elements
        return list(self.values)

    def __str__(self) -> str:
        fmt = _format_scalar
        if self.is_splat or self.type.rank == 0:
            body = fmt(self.values[0])
        else:
            body = _nest([fmt(v) for v in self.flat_values()], self.type.shape)
        return f"dense<{body}> : {self.type}"


def _normalize(v: float | int | bool, element_type: str) -> float | int | bool:
    if element_type in FLOAT_TYPES:
        return float(v)
    if element_type == "i1":
        return bool(v)
    return int(v)


def _format_scalar(v: float | int | bool) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return format_float(v)
    return str(v)


def _nest(items: list[str], shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return "[" + ", ".join(items) + "]"
    step = len(items) // shape[0] if shape[0] else 0
    parts = [_nest(items[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]
    return "[" + ", ".join(parts) + "]"


_BARE_KEY_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$")


def is_bare_identifier(text: str, extra: str = "-") -> bool:
    """Whether ``text`` prints unquoted: a symbol (``@a-b``) may hold ``-``, a key may not."""
    return (bool(text) and text[0] in _BARE_KEY_CHARS and not text[0].isdigit() and text[0] not in ".$"
            and all(c in _BARE_KEY_CHARS or c in extra for c in text))


def quote(text: str) -> str:
    """A double-quoted string literal with JSON escapes (what the parser reads)."""
    return json.dumps(text, ensure_ascii=False)


def format_symbol(name: str) -> str:
    return name if is_bare_identifier(name) else quote(name)


def format_attr_dict(attrs: dict[str, Attribute]) -> str:
    """``{a = 1, b = "x", flag}`` with keys sorted; empty dict prints ``{}``."""
    parts = []
    for key in sorted(attrs):
        value = attrs[key]
        k = key if is_bare_identifier(key, extra="") else quote(key)
        parts.append(k if isinstance(value, UnitAttr) else f"{k} = {value}")
    return "{" + ", ".join(parts) + "}"


# -- small conveniences for building attributes from Python values -----------------

def attr(value: object) -> Attribute:
    """Wrap a plain Python value: int, float, bool, str, list/tuple, dict, Type, Attribute."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, bool):
        return BoolAttr(value)
    if isinstance(value, int):
        return IntegerAttr(value)
    if isinstance(value, float):
        return FloatAttr(value)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, (list, tuple)):
        return ArrayAttr(tuple(attr(v) for v in value))
    if isinstance(value, dict):
        return DictAttr.of({k: attr(v) for k, v in value.items()})
    if isinstance(value, Type):
        return TypeAttr(value)
    raise TypeError(f"cannot make an attribute of {type(value).__name__}")


def unwrap(a: Attribute) -> object:
    """The plain Python value of a scalar/array/string attribute."""
    if isinstance(a, (IntegerAttr, FloatAttr, BoolAttr, StringAttr)):
        return a.value
    if isinstance(a, ArrayAttr):
        return [unwrap(v) for v in a.values]
    if isinstance(a, SymbolRefAttr):
        return a.name
    if isinstance(a, DictAttr):
        return {k: unwrap(v) for k, v in a.entries}
    if isinstance(a, TypeAttr):
        return a.type
    return a
