"""What every aten handler uses: the handler registry, errors and the :class:`Emitter`.

A handler translates one torch-dialect op (an :class:`~spmdc.frontend.torch_mlir_bridge.OpRecord`)
into ``tensor`` ops and returns one entry per torch result: a :class:`Value`, or a Python
list of them for ``!torch.list<vtensor>`` results::

    @handles("torch.aten.mm", "torch.aten.bmm")
    def _mm(e: Emitter):
        return [e.create(MatmulOp, [e.tensor(0), e.tensor(1)])]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spmdc.ir.attributes import DenseAttr
from spmdc.ir.core import Operation, Value
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.location import Location, NameLoc
from spmdc.ir.rewriter import Builder
from spmdc.ir.types import FLOAT_TYPES, TensorType, element_type_of_torch_mlir

Handler = Callable[["Emitter"], list]
HANDLERS: dict[str, Handler] = {}

def handles(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler for the given torch-mlir op names (``torch.aten.mm`` ...)."""

    def deco(fn: Handler) -> Handler:
        for n in names:
            assert n not in HANDLERS, f"two handlers for {n}"
            HANDLERS[n] = fn
        return fn

    return deco


class UnsupportedOpError(DiagnosticError):
    """A model uses a PyTorch op (or a form of one) that spmdc cannot translate exactly."""

    def __init__(self, op: str, module_path: str | None, *, fx_node: str | None = None,
                 module_type: str | None = None, source: str | None = None, reason: str | None = None,
                 location: Location | None = None):
        self.op, self.module_path, self.fx_node, self.source = op, module_path, fx_node, source
        self.reason = reason
        where = f"module '{module_path}'" if module_path else "the top-level module"
        if module_type:
            where += f" ({module_type})"
        extra = []
        if fx_node:
            extra.append(f"graph node '{fx_node}'")
        if source:
            extra.append(f"source: {source}")
        detail = f" [{'; '.join(extra)}]" if extra else ""
        what = reason or "has no translation to spmdc's tensor dialect"
        msg = (f"spmdc cannot capture this model: PyTorch op '{op}' in {where}{detail} {what}. "
               "The frontend never drops or approximates an op, so capture stops here; rewrite that "
               "part of the model with supported ops (see spmdc.frontend.translate.supported_ops()) "
               "or add a handler in spmdc/frontend/aten/.")
        super().__init__(msg, location or NameLoc(f"{module_path or ''}/{op}"))


class UnsupportedOpsError(UnsupportedOpError):
    """Several unsupported ops at once: one message lists each (op, module path, source line)."""

    def __init__(self, found: list[UnsupportedOpError]):
        self.found = found
        lines = []
        for e in found:
            where = f"module '{e.module_path}'" if e.module_path else "the top-level module"
            lines.append(f"  - '{e.op}' in {where}" + (f" ({e.source})" if getattr(e, "source", None) else "")
                         + (f": {e.reason}" if getattr(e, "reason", None) else ""))
        msg = (f"spmdc cannot capture this model: {len(found)} PyTorch ops have no exact translation to spmdc's "
               "tensor dialect:\n" + "\n".join(lines) + "\nThe frontend never drops or approximates an op, so capture "
               "stops here; rewrite those parts of the model with supported ops (see "
               "spmdc.frontend.translate.supported_ops()) or add handlers in spmdc/frontend/aten/.")
        DiagnosticError.__init__(self, msg, found[0].diagnostic.location)
        self.op, self.module_path, self.fx_node = found[0].op, found[0].module_path, found[0].fx_node


class TranslationError(DiagnosticError):
    """Internal inconsistency while translating (a bug in a handler, not in the model)."""


@dataclass
class Uninitialized:
    """Result of ``aten.empty*``: only its type matters; materialised as zeros if read."""

    type: TensorType


@dataclass
class Unavailable:
    """A result spmdc does not compute (attention's log-sum-exp, used only by the backward op
    spmdc replaces): reading it anywhere else is refused, never silently zero."""

    what: str


def torch_op_label(name: str) -> str:
    """``torch.aten.add.Tensor`` -> ``aten.add.Tensor``."""
    return name[len("torch."):] if name.startswith("torch.") else name


class Emitter:
    """Builds the ``tensor`` ops of one torch op; shared state lives in the translator."""

    def __init__(self, builder: Builder, env: dict[str, Any], describe: Callable[[Any], dict],
                 node_info: Callable[[str | None], Any] = lambda name: None):
        self.b = builder
        self.env = env
        self._describe = describe
        self._node_info = node_info
        self._consts: dict[tuple, Value] = {}
        self._const_ids: set[int] = set()
        self.rec: Any = None
        self.loc: Location = NameLoc("")
        self.created: list[Operation] = []

    # -- the current record ---------------------------------------------------------
    def begin(self, rec: Any) -> None:
        self.rec = rec
        label = torch_op_label(rec.name)
        self.loc = NameLoc(f"{rec.module_path}/{label}" if rec.module_path else label)
        self.created = []

    def arg_strides(self, i: int) -> tuple[int, ...] | None:
        """Strides of tensor argument ``i`` in the traced run (None when unknown)."""
        info = self._node_info(self.rec.fx_node)
        strides = getattr(info, "arg_strides", ())
        return strides[i] if i < len(strides) else None

    @property
    def num_operands(self) -> int:
        return len(self.rec.operands)

    def is_const(self, i: int) -> bool:
        return i in self.rec.constant_operands

    def const(self, i: int, default: Any = ...) -> Any:
        """Python value of constant operand ``i`` (int, float, bool, str, None, list)."""
        if i >= self.num_operands:
            if default is ...:
                raise self.unsupported(f"has no operand #{i}")
            return default
        if i not in self.rec.constant_operands:
            raise self.unsupported(f"operand #{i} is not a compile-time constant")
        return self.rec.constant_operands[i]

    def raw(self, i: int) -> Any:
        """Operand ``i`` as translated so far: a Value, a list, a constant or Uninitialized."""
        if i in self.rec.constant_operands:
            return self.rec.constant_operands[i]
        name = self.rec.operand_names[i]
        if name not in self.env:
            raise TranslationError(f"operand {name} of '{self.rec.name}' was never defined", self.loc)
        return self.env[name]

    def tensor(self, i: int) -> Value:
        return self.as_value(self.raw(i))

    def as_value(self, v: Any) -> Value:
        if isinstance(v, Uninitialized):
            return self.splat(0, v.type)
        if isinstance(v, Unavailable):
            raise self.unsupported(f"reads the {v.what}, which spmdc does not compute")
        if not isinstance(v, Value):
            raise self.unsupported(f"expects a tensor here, got {type(v).__name__} {v!r}")
        return v

    def out_type(self, j: int = 0) -> TensorType:
        shape, dtype = self.rec.result_types[j]
        if shape is None or any(d < 0 for d in shape):
            raise self.unsupported(f"result #{j} has no static tensor type ({dtype})")
        elt = element_type_of_torch_mlir(dtype) if dtype else None
        if elt is None:
            raise self.unsupported(f"produces element type {dtype}, which spmdc does not support")
        return TensorType(tuple(shape), elt)

    # -- building ----------------------------------------------------------------------
    def create(self, cls: type[Operation], operands: list[Value], attrs: dict[str, object] | None = None,
               result_type: TensorType | None = None) -> Value:
        op = self.b.create(cls, operands, attrs, None if result_type is None else [result_type],
                           location=self.loc)
        self.created.append(op)
        return op.result

    def splat(self, value: Any, t: TensorType) -> Value:
        """A (cached) dense constant of type ``t`` filled with ``value``."""
        value = _coerce(value, t.element_type)
        key = (t, repr(value))
        v = self._consts.get(key)
        if v is None:
            from spmdc.dialects.tensor import ConstantOp

            v = self.create(ConstantOp, [], {"value": DenseAttr(t, (value,))})
            self._consts[key] = v
            self._const_ids.add(id(v))
        return v

    def is_cached_constant(self, v: Value) -> bool:
        """Whether ``v`` is a splat constant shared by several ops (so not named after one)."""
        return id(v) in self._const_ids

    def scalar(self, value: Any, elt: str) -> Value:
        return self.splat(value, TensorType((), elt))

    def dense(self, values: list, t: TensorType) -> Value:
        from spmdc.dialects.tensor import ConstantOp

        return self.create(ConstantOp, [], {"value": DenseAttr(t, tuple(_coerce(x, t.element_type) for x in values))})

    def cast(self, v: Value, elt: str) -> Value:
        if v.tensor_type.element_type == elt:
            return v
        from spmdc.dialects.tensor import CastOp

        return self.create(CastOp, [v], result_type=v.tensor_type.with_element_type(elt))

    def reshape(self, v: Value, shape: tuple[int, ...]) -> Value:
        if v.tensor_type.shape == tuple(shape):
            return v
        from spmdc.dialects.tensor import ReshapeOp

        return self.create(ReshapeOp, [v], result_type=v.tensor_type.with_shape(shape))

    def broadcast(self, v: Value, shape: tuple[int, ...]) -> Value:
        if v.tensor_type.shape == tuple(shape):
            return v
        from spmdc.dialects.tensor import BroadcastOp

        return self.create(BroadcastOp, [v], result_type=v.tensor_type.with_shape(shape))

    def operand_or_scalar(self, i: int, elt: str) -> Value:
        """Tensor operand ``i`` cast to ``elt``, or a rank-0 constant for a Python scalar."""
        raw = self.raw(i)
        if isinstance(raw, (int, float, bool)):
            return self.scalar(raw, elt)
        return self.cast(self.as_value(raw), elt)

    # -- errors ------------------------------------------------------------------------
    def unsupported(self, reason: str) -> UnsupportedOpError:
        d = self._describe(self.rec)
        return UnsupportedOpError(torch_op_label(self.rec.name), self.rec.module_path, reason=reason,
                                  location=self.loc, **d)


def _coerce(value: Any, elt: str) -> Any:
    if elt in FLOAT_TYPES:
        return float(value)
    if elt == "i1":
        return bool(value)
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"cannot store {value} in an {elt} tensor")
    return int(value)


def norm_dim(d: int, rank: int) -> int:
    """A possibly negative dim as a non-negative one (rank 0 counts as rank 1, like torch)."""
    r = max(rank, 1)
    if not -r <= d < r:
        raise ValueError(f"dim {d} out of range for rank {rank}")
    return d % r


def is_float_elt(elt: str) -> bool:
    return elt in FLOAT_TYPES


def promote(a: TensorType, b: TensorType) -> str:
    """torch's result dtype of a binary op on two tensors (0-dim ones count less)."""
    ea, eb = a.element_type, b.element_type
    if ea == eb:
        return ea

    def cat(e: str) -> int:
        return 2 if e in FLOAT_TYPES else (0 if e == "i1" else 1)

    ca, cb = cat(ea), cat(eb)
    if ca != cb:
        hi, lo = (a, b) if ca > cb else (b, a)
        if hi.rank == 0 and lo.rank > 0 and cat(hi.element_type) == 2:
            return "f32"  # a 0-dim float with an int tensor: the default dtype
        return hi.element_type
    if (a.rank == 0) != (b.rank == 0):
        return eb if a.rank == 0 else ea
    order = ["i1", "i8", "i16", "i32", "i64", "bf16", "f16", "f32", "f64"]
    return max(ea, eb, key=order.index)


def isfinite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
