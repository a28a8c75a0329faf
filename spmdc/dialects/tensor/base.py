"""What every ``tensor`` op declares, in one place beside its class.

A ``tensor`` op class carries everything the compiler needs to know about it:

* shape/dtype inference (``infer_result_types``) and a verifier (``verify_``);
* its torch implementation: ``torch`` (a template) or ``torch_expr()`` — the one semantics
  that the interpreter evaluates and the Python codegen writes (:mod:`spmdc.dialects.pyexpr`);
* its sharding rule: ``sharding_rule()`` returning an einsum-like factor rule
  (:mod:`spmdc.dialects.shard.rules`), or ``replicated_rule`` said explicitly;
* how it enters a Triton kernel, ``kernel``: ``"elementwise"`` (then ``triton`` or
  ``triton_expr()`` gives the expression on blocks), ``"row"`` (a reduction or normaliser
  along the last dim: ``row_kernel`` names the template), ``"matmul"``, or ``"none"``;
* traits: ``Pure``, ``Commutative``, ``SameOperandsAndResultType``, ``View`` (moves no data
  in torch: reshape, permute, broadcast, slice), ``StridedView`` (always a strided view),
  ``Random`` (draws from a generator: not ``Pure``, never merged, removed or reordered).

Tables elsewhere (fusable ops, Triton lowering, view ops, Partial linearity) are derived
from these declarations; ``tests/unit/dialects/test_op_definitions.py`` fails when an op
lacks one.

    %0 = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from spmdc.dialects.pyexpr import TorchImpl
from spmdc.dialects.shard.rules import OpShardingRule
from spmdc.dialects.shard.rules import replicated_rule as _replicated
from spmdc.ir.attributes import Attribute
from spmdc.ir.core import InferError, Operation
from spmdc.ir.types import ELEMENT_TYPE_INFO, TensorType, Type

KERNEL_FORMS = ("elementwise", "row", "matmul", "none")
TRAITS = frozenset({"Pure", "Commutative", "SameOperandsAndResultType", "View", "StridedView", "Random"})

# Triton helper functions that ``triton`` templates may call (emitted once per program when used)
TRITON_HELPERS: dict[str, str] = {
    "_tanh": '''@triton.jit
def _tanh(x):
    # tanh(x) = sign(x) * (1 - e) / (1 + e), e = exp(-2|x|); a Taylor series near 0 avoids cancellation
    ax = tl.abs(x)
    e = tl.exp(-2.0 * ax)
    big = (1.0 - e) / (1.0 + e)
    x2 = x * x
    small = ax * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333 + x2 * -0.05396825396825397)))
    t = tl.where(ax < 0.125, small, big)
    return tl.where(x < 0, -t, t)''',
}


def torch_module() -> Any:
    """Import torch on first use (spmdc-opt never needs it)."""
    import torch

    return torch


def torch_dtype(element_type: str) -> Any:
    return getattr(torch_module(), ELEMENT_TYPE_INFO[element_type].torch)


def dtype_source(t: TensorType | str) -> str:
    """``torch.float32`` for a tensor type or element type name (generated code's spelling)."""
    name = t if isinstance(t, str) else t.element_type
    return ELEMENT_TYPE_INFO[name].torch_dtype_source


def triton_type(t: TensorType | str) -> str:
    """``tl.float32`` for a tensor type or element type name."""
    name = t if isinstance(t, str) else t.element_type
    return ELEMENT_TYPE_INFO[name].triton


class TensorOp(TorchImpl, Operation):
    """Base of compute ops on tensors (global or local shapes); see the module doc."""

    traits: ClassVar[frozenset[str]] = frozenset({"Pure"})
    kernel: ClassVar[str] = ""             # one of KERNEL_FORMS; "" means undeclared
    triton: ClassVar[str | None] = None    # elementwise: template over the operands' block values
    row_kernel: ClassVar[str | None] = None

    def sharding_rule(self) -> OpShardingRule:
        """The op's factor rule; every concrete op declares it (or ``replicated_rule``)."""
        raise NotImplementedError(f"'{self.name}' declares no sharding rule")

    def triton_expr(self, ins: Sequence[str]) -> str | None:
        """The op on Triton block values ``ins`` (elementwise kernels); None if not expressible."""
        return None if self.triton is None else self.triton.format(*ins)

    def kernel_role(self) -> str | None:
        """``"elementwise"``, ``"row"`` or ``"matmul"`` when this instance can be part of a
        ``kernel.fused`` region of that kind (types and attributes permitting); else None."""
        if self.kernel != "elementwise" or len(self.results) != 1:
            return None
        if not all(isinstance(v.type, TensorType) for v in (*self.operands, self.result)):
            return None
        return "elementwise" if self.triton_expr([f"_{i}" for i in range(len(self.operands))]) else None

    def _row_role(self, dims: Sequence[int]) -> str | None:
        """Row ops qualify when they work along exactly the last dim of a float tensor."""
        src = self.operand(0).type
        if not isinstance(src, TensorType) or src.rank == 0 or not src.is_float:
            return None
        return "row" if list(dims) == [src.rank - 1] else None


def replicated_rule(op: Operation) -> OpShardingRule:
    """The explicit "runs replicated" rule: every dim of every value stays whole."""
    return _replicated([v.type for v in op.operands], [r.type for r in op.results])


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
