"""Attributes of the spmdc IR: immutable, hashable values attached to ops.

Textual forms (see docs/ir.md)::

    4   -1   1.5   true   "text"   [1, 2]   {k = v}   @symbol   unit-key
    tensor<4xf32>                              // a type used as an attribute
    dense<[1.0, 2.0]> : tensor<2xf32>          // dense elements
    #shard<@mesh, [S(0), R]>                   // a dialect attribute (spmdc.dialects.shard)

``str(attr)`` is the custom form; :meth:`Attribute.generic` is the generic form, text that
upstream MLIR's parser also reads (docs/ir.md, "Generic form and upstream MLIR"): the same
except ``inf``/``nan`` (hexadecimal bits), integers beyond 64 bits (``N : i65``) and symbols
that are not bare identifiers upstream (``@"a-b"``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from spmdc.ir.types import ELEMENT_TYPE_INFO, FLOAT_TYPES, TensorType, Type


class Attribute:
    """Base class; every attribute is a frozen dataclass printable with ``str``."""

    def __str__(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def generic(self) -> str:
        """The generic form (what upstream MLIR reads); the custom form unless a subclass differs."""
        return str(self)


# what upstream MLIR reads as an integer attribute without a type (an i64, or its unsigned reading)
_TYPELESS_INT_RANGE = range(-(1 << 63), 1 << 64)


@dataclass(frozen=True)
class IntegerAttr(Attribute):
    value: int

    def __str__(self) -> str:
        return str(self.value)

    def generic(self) -> str:
        """``4``; beyond 64 bits with the signless type that holds it: ``-18446744073709551616 : i65``."""
        if self.value in _TYPELESS_INT_RANGE:
            return str(self.value)
        return f"{self.value} : i{self.value.bit_length() + 1}"


def format_float(value: float) -> str:
    """Shortest text that reads back as the same float, in MLIR's spelling: a '.' always
    (``1.0e-05``, never ``1e-05``); ``inf``, ``-inf`` and ``nan`` in the custom form."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(float(value))
    mantissa, e, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + e + exponent


# bit layout of each float element type: struct format of the IEEE type it is stored as, bytes kept
_FLOAT_BITS = {"f64": (">d", 8), "f32": (">f", 4), "f16": (">e", 2), "bf16": (">f", 2)}


def float_bits(value: float, element_type: str) -> str:
    """``0x7F800000``: the bits of ``value`` as ``element_type``, as MLIR spells inf and nan."""
    fmt, keep = _FLOAT_BITS[element_type]
    raw = struct.pack(fmt, value)[:keep]  # bf16 is the upper half of an f32
    return "0x" + raw.hex().upper()


def float_of_bits(bits: int, element_type: str) -> float:
    """The float whose ``element_type`` bits are ``bits`` (the inverse of :func:`float_bits`);
    ValueError when ``bits`` does not fit the type."""
    fmt, keep = _FLOAT_BITS[element_type]
    if bits < 0 or bits >= 1 << (8 * keep):
        raise ValueError(f"hexadecimal float 0x{bits:X} does not fit {element_type} ({8 * keep} bits)")
    raw = bits.to_bytes(keep, "big") + bytes(struct.calcsize(fmt) - keep)
    return struct.unpack(fmt, raw)[0]


def format_float_generic(value: float, element_type: str) -> str:
    """A finite float as :func:`format_float`; inf and nan as their bits (``0x7FC00000``)."""
    return format_float(value) if math.isfinite(value) else float_bits(value, element_type)


@dataclass(frozen=True)
class FloatAttr(Attribute):
    """A float (an f64 to upstream MLIR, which reads an untyped float literal as f64)."""

    value: float

    def __str__(self) -> str:
        return format_float(self.value)

    def generic(self) -> str:
        """``1.5``; inf and nan as MLIR spells them: ``0x7FF0000000000000 : f64``."""
        if math.isfinite(self.value):
            return format_float(self.value)
        return float_bits(self.value, "f64") + " : f64"


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

    def generic(self) -> str:
        """Upstream's bare symbols hold no '-': ``@"a-b"`` (the custom form prints ``@a-b``)."""
        return "@" + (self.name if is_bare_identifier(self.name, extra="") else quote(self.name))


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

    def generic(self) -> str:
        return "[" + ", ".join(v.generic() for v in self.values) + "]"


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

    def generic(self) -> str:
        return format_attr_dict(dict(self.entries), generic=True)


@dataclass(frozen=True)
class DenseAttr(Attribute):
    """Dense elements ``dense<[[1.0, 2.0]]> : tensor<1x2xf32>``; a splat holds one value."""

    type: TensorType
    values: tuple[float | int | bool, ...]

    def __post_init__(self) -> None:
        vals = tuple(_normalize(v, self.type.element_type) for v in self.values)
        _check_int_range(vals, self.type.element_type)
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
        return self._format(_format_scalar)

    def generic(self) -> str:
        """As the custom form, but inf and nan as the element type's bits (``dense<0xFF800000>``)
        and no elements as ``dense<>`` (upstream reads ``[]`` as a shape ``[0]``)."""
        elt = self.type.element_type
        if self.type.num_elements == 0:
            return f"dense<> : {self.type}"
        if elt not in FLOAT_TYPES:
            return str(self)
        return self._format(lambda v: format_float_generic(v, elt))  # type: ignore[arg-type]

    def _format(self, fmt: Callable[[float | int | bool], str]) -> str:
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


def _check_int_range(values: tuple[float | int | bool, ...], element_type: str) -> None:
    """Integers must fit their element type (signed, or its unsigned reading, as MLIR takes them)."""
    if element_type in FLOAT_TYPES or element_type == "i1":
        return
    bits = ELEMENT_TYPE_INFO[element_type].bytes * 8
    for v in values:
        if not -(1 << (bits - 1)) <= v < 1 << bits:  # type: ignore[operator]
            raise ValueError(f"dense attribute value {v} is out of range for {element_type}")


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
    """A double-quoted string literal with MLIR's escapes (what both parsers read): ``\\"``,
    ``\\\\``, ``\\n``, ``\\t``, and ``\\XX`` (hex) for each UTF-8 byte of any other unprintable
    character; printable characters, non-ASCII ones included, print as they are."""
    return '"' + "".join(_escape(c) for c in text) + '"'


_NAMED_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t"}


def _escape(c: str) -> str:
    named = _NAMED_ESCAPES.get(c)
    if named is not None:
        return named
    if c.isprintable():
        return c
    return "".join(f"\\{b:02X}" for b in c.encode("utf-8", "surrogatepass"))


def unescape(body: str) -> str:
    """The text of a string literal's body (between the quotes), MLIR's escapes decoded;
    ValueError naming an unknown escape. ``\\XX`` are bytes: the result is their UTF-8 text."""
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8", "surrogatepass")
            i += 1
            continue
        nxt = body[i + 1:i + 2]
        pair = body[i + 1:i + 3]
        if nxt in ('"', "\\"):
            out += nxt.encode()
            i += 2
        elif nxt in ("n", "t"):
            out += b"\n" if nxt == "n" else b"\t"
            i += 2
        elif len(pair) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in pair):
            out.append(int(pair, 16))
            i += 3
        else:
            raise ValueError(f"unknown escape '\\{nxt}' (escapes are \\\", \\\\, \\n, \\t and \\XX hex)")
    return out.decode("utf-8", "surrogatepass")


def format_symbol(name: str) -> str:
    return name if is_bare_identifier(name) else quote(name)


def format_attr_dict(attrs: dict[str, Attribute], generic: bool = False) -> str:
    """``{a = 1, b = "x", flag}`` with keys sorted; empty dict prints ``{}``; ``generic``: every
    value in its generic form (:meth:`Attribute.generic`)."""
    parts = []
    for key in sorted(attrs):
        value = attrs[key]
        k = key if is_bare_identifier(key, extra="") else quote(key)
        text = value.generic() if generic else str(value)
        parts.append(k if isinstance(value, UnitAttr) else f"{k} = {text}")
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
