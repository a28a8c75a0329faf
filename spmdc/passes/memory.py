"""How much memory a program allocates beyond its arguments: a static liveness estimate.

Walking the function in order, a tensor produced by an op is alive from that op to its last
use (the generated code deletes it there: :mod:`spmdc.codegen.python_emitter`); views
(``View`` ops: reshape, permute, broadcast, slices) allocate nothing and keep their base
alive as long as they are used. Arguments (parameters, inputs) are not counted. The peak of
the live bytes is what activation checkpointing lowers: the forward's activations die in the
forward, and the backward recomputes them one region at a time.

    peak_bytes(rank_program.module)      # bytes, for the function @main
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spmdc.ir.core import Operation, Value
from spmdc.ir.types import HandleType, TensorType

__all__ = ["Profile", "live_at", "peak_bytes", "profile"]


def peak_bytes(module: Operation, func_name: str = "main") -> int:
    """Peak bytes of tensors the function allocates while it runs (static estimate)."""
    return profile(function(module, func_name).body.ops).peak


def function(module: Operation, func_name: str = "main") -> Any:
    from spmdc.dialects.func import FuncOp

    func = next((op for op in module.body.ops if isinstance(op, FuncOp) and op.sym_name == func_name), None)
    if func is None:
        raise ValueError(f"no function @{func_name} in the module")
    return func


@dataclass(frozen=True)
class Profile:
    """Live bytes over a schedule: ``peak`` bytes, reached at op ``at`` (index in the list)."""

    peak: int
    at: int
    live: tuple[int, ...]   # live bytes after each op


def lifetimes(ops: list[Operation], bases: dict[Value, Value] | None = None) -> dict[Value, tuple[int, int]]:
    """Every allocation made by ``ops`` (one block, in this order) → (index of the op making
    it, index of its last direct or view use).

    An async collective (``comm.*_start``) allocates its receive buffers (the handle's bytes)
    when it starts and keeps its operands alive until its ``comm.wait``, whose results are
    new tensors, but for an all-reduce's (not ``avg``): the buffer it reduced in place, the
    handle's (views of it). ``bases``, when given, is filled with each view's allocation."""
    from spmdc.dialects.comm.async_ops import WaitOp, collective_kind
    from spmdc.dialects.tensor.elementwise import inplace_operand

    base: dict[Value, Value] = bases if bases is not None else {}   # a view's value -> the allocation it reads
    life: dict[Value, list[int]] = {}
    for i, op in enumerate(ops):
        uses = list(op.operands)
        start = op.operand(0).defining_op() if isinstance(op, WaitOp) else None
        if start is not None:
            uses += list(start.operands)
        for v in uses:
            b = base.get(v, v)
            if b in life:
                life[b][1] = max(life[b][1], i)
        in_place = start is not None and collective_kind(start) in ("comm.all_reduce", "comm.all_reduce_bucket") \
            and start.attr_value("op") != "avg"
        written = inplace_operand(op)   # (an elementwise op writing into a dying operand: no allocation)
        for r in op.results:
            if in_place:
                base[r] = op.operand(0)
            elif written is not None:
                base[r] = base.get(op.operand(written), op.operand(written))
            elif op.has_trait("View") and op.operands:
                base[r] = base.get(op.operand(0), op.operand(0))
            elif isinstance(r.type, (TensorType, HandleType)):
                life[r] = [i, i]
    return {v: (b, e) for v, (b, e) in life.items()}


def profile(ops: list[Operation]) -> Profile:
    """Live tensor bytes after each op of ``ops`` (see :func:`lifetimes`)."""
    delta = [0] * (len(ops) + 1)
    for v, (b, e) in lifetimes(ops).items():
        delta[b] += v.type.num_bytes   # type: ignore[attr-defined]
        delta[e + 1] -= v.type.num_bytes   # type: ignore[attr-defined]
    live = peak = at = 0
    after = []
    for i, d in enumerate(delta[:-1]):
        live += d
        after.append(live)
        if live > peak:
            peak, at = live, i
    return Profile(peak, at, tuple(after))


def live_at(ops: list[Operation], index: int) -> list[Value]:
    """The allocations (tensors, collective handles) alive right after ``ops[index]``."""
    return [v for v, (b, e) in lifetimes(ops).items() if b <= index <= e]
