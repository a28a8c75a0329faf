"""Types of the spmdc IR.

Only ranked, statically shaped tensors and function types exist::

    tensor<8x16xf32>     // rank 2
    tensor<f32>          // rank 0
    (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ElementType:
    """One element type and its spellings elsewhere: the one table every layer reads.

    ``torch``: the ``torch.dtype`` attribute name; ``triton``: the ``tl`` type in kernels;
    ``torch_mlir``: the element type in torch-mlir's ``!torch.vtensor<[..],si64>``.
    """

    name: str
    bytes: int
    is_float: bool
    torch: str
    triton: str
    torch_mlir: str

    @property
    def torch_dtype_source(self) -> str:
        """``torch.float32``: how generated code names it."""
        return f"torch.{self.torch}"


ELEMENT_TYPE_INFO: dict[str, ElementType] = {e.name: e for e in (
    ElementType("f64", 8, True, "float64", "tl.float64", "f64"),
    ElementType("f32", 4, True, "float32", "tl.float32", "f32"),
    ElementType("f16", 2, True, "float16", "tl.float16", "f16"),
    ElementType("bf16", 2, True, "bfloat16", "tl.bfloat16", "bf16"),
    ElementType("i64", 8, False, "int64", "tl.int64", "si64"),
    ElementType("i32", 4, False, "int32", "tl.int32", "si32"),
    ElementType("i16", 2, False, "int16", "tl.int16", "si16"),
    ElementType("i8", 1, False, "int8", "tl.int8", "si8"),
    ElementType("i1", 1, False, "bool", "tl.int1", "i1"),
)}
ELEMENT_TYPES: tuple[str, ...] = tuple(ELEMENT_TYPE_INFO)
FLOAT_TYPES = frozenset(n for n, e in ELEMENT_TYPE_INFO.items() if e.is_float)
INT_TYPES = frozenset(n for n, e in ELEMENT_TYPE_INFO.items() if not e.is_float)
_BY_TORCH = {e.torch: e.name for e in ELEMENT_TYPE_INFO.values()}
_BY_TORCH_MLIR = {e.torch_mlir: e.name for e in ELEMENT_TYPE_INFO.values()}


def element_type(name: str) -> ElementType:
    """The table entry of ``f32``, ``i64``, ..."""
    return ELEMENT_TYPE_INFO[name]


def element_type_of_torch(dtype: object) -> str | None:
    """``torch.float32`` (or ``"float32"``) -> ``"f32"``; None when spmdc has no such type."""
    return _BY_TORCH.get(str(dtype).removeprefix("torch."))


def element_type_of_torch_mlir(name: str) -> str | None:
    """torch-mlir's ``si64`` -> ``"i64"``; None when spmdc has no such type."""
    return _BY_TORCH_MLIR.get(name)


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
        return self.num_elements * ELEMENT_TYPE_INFO[self.element_type].bytes

    @property
    def is_float(self) -> bool:
        return self.element_type in FLOAT_TYPES

    def with_shape(self, shape: tuple[int, ...] | list[int]) -> TensorType:
        return TensorType(tuple(shape), self.element_type)

    def with_element_type(self, element_type: str) -> TensorType:
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


@dataclass(frozen=True)
class HandleType(Type):
    """An in-flight asynchronous collective (``comm.*_start``), redeemed by ``comm.wait`` for
    the tensors it will produce: ``!comm.handle<tensor<8x16xf32>, tensor<16xf32>>``."""

    results: tuple[TensorType, ...]

    def __post_init__(self) -> None:
        if not self.results or not all(isinstance(t, TensorType) for t in self.results):
            raise ValueError("a handle holds one or more tensor types")

    @property
    def num_bytes(self) -> int:
        """Bytes of the buffers the collective fills (allocated when it starts)."""
        return sum(t.num_bytes for t in self.results)

    def __str__(self) -> str:
        return f"!comm.handle<{', '.join(str(t) for t in self.results)}>"


def element_type_bytes(element_type: str) -> int:
    """Bytes per element of ``element_type`` (``i1`` counts as one byte)."""
    return ELEMENT_TYPE_INFO[element_type].bytes
