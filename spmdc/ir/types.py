"""Types of the spmdc IR.

Only ranked, statically shaped tensors and function types exist::

    tensor<8x16xf32>     // rank 2
    tensor<f32>          // rank 0
    (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ELEMENT_TYPES: tuple[str, ...] = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "i1")
FLOAT_TYPES = frozenset({"f64", "f32", "f16", "bf16"})
INT_TYPES = frozenset({"i64", "i32", "i16", "i8", "i1"})

_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1}


class Type:
    """Base class of every IR type; subclasses are frozen dataclasses."""

    def __str__(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


@dataclass(frozen=True)
class TensorType(Type):
    """A ranked tensor with a static shape: ``tensor<8x16xf32>``."""

    shape: tuple[int, ...]
    element_type: str

    def __post_init__(self) -> None:
        if self.element_type not in ELEMENT_TYPES:
            raise ValueError(f"unknown element type '{self.element_type}'")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def num_bytes(self) -> int:
        return self.num_elements * _BYTES[self.element_type]

    @property
    def is_float(self) -> bool:
        return self.element_type in FLOAT_TYPES

    def with_shape(self, shape: tuple[int, ...] | list[int]) -> "TensorType":
        return TensorType(tuple(shape), self.element_type)

    def with_element_type(self, element_type: str) -> "TensorType":
        return TensorType(self.shape, element_type)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{self.element_type}>"


@dataclass(frozen=True)
class FunctionType(Type):
    """``(tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>)``."""

    inputs: tuple[Type, ...]
    results: tuple[Type, ...]

    def __str__(self) -> str:
        ins = ", ".join(str(t) for t in self.inputs)
        if len(self.results) == 1 and not isinstance(self.results[0], FunctionType):
            return f"({ins}) -> {self.results[0]}"
        outs = ", ".join(str(t) for t in self.results)
        return f"({ins}) -> ({outs})"


def element_type_bytes(element_type: str) -> int:
    """Bytes per element of ``element_type`` (``i1`` counts as one byte)."""
    return _BYTES[element_type]
