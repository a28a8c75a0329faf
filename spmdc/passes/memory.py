"""How much memory a program allocates beyond its arguments: a static liveness estimate.

Walking the function in order, a tensor produced by an op is alive from that op to its last
use (the generated code deletes it there: :mod:`spmdc.codegen.python_emitter`); views
(``View`` ops: reshape, permute, broadcast, slices) allocate nothing and keep their base
alive as long as they are used. Arguments (parameters, inputs) are not counted. The peak of
the live bytes is what activation checkpointing lowers: the forward's activations die in the
forward, and the backward recomputes them one region at a time.

    peak_bytes(rank_program.module)      # bytes, for the function @main
    step_peak_bytes(rank_program.module) # with the collectives' staging buffers while they run
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spmdc.ir.core import Operation, Value
from spmdc.ir.types import HandleType, TensorType

__all__ = ["Profile", "live_at", "peak_bytes", "profile", "staging_bytes", "staging_spans", "step_peak_bytes"]


def peak_bytes(module: Operation, func_name: str = "main") -> int:
    """Peak bytes of tensors the function allocates while it runs (static estimate)."""
    return profile(function(module, func_name).body.ops).peak


def step_peak_bytes(module: Operation, func_name: str = "main") -> int:
    """:func:`peak_bytes` with every collective's staging buffers while it runs (:func:`staging_spans`:
    a bucket's packed send buffer, a gather's receive buffer, gloo's transfer buffer of a started
    gather): the estimate of what running the step allocates beyond its arguments, that a measured
    peak is compared with."""
    ops = list(function(module, func_name).body.ops)
    delta = [0] * (len(ops) + 1)
    for v, (b, e) in lifetimes(ops).items():
        delta[b] += v.type.num_bytes   # type: ignore[attr-defined]
        delta[e + 1] -= v.type.num_bytes   # type: ignore[attr-defined]
    for b, e, n in staging_spans(ops):
        delta[b] += n
        delta[e + 1] -= n
    live = peak = 0
    for d in delta[:-1]:
        live += d
        peak = max(peak, live)
    return peak


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


def _nbytes(v: Value) -> int:
    return v.type.num_bytes if isinstance(v.type, (TensorType, HandleType)) else 0   # type: ignore[attr-defined]


def staging_bytes(op: Operation) -> int:
    """Bytes a collective's runtime allocates while it runs besides its operands and results: a
    send buffer packing the operands and a receive buffer the size of the results (expert moves,
    a started gather bucket's until its wait), or a receive buffer (a plain gather or reduce, a
    synchronous gather bucket: its pack is gone before the results are unpacked); an all-reduce bucket packs its
    operands into one flat buffer reduced in place, whose views are its results, and a
    reduce-scatter packs its operands (which it no longer needs) and receives into its result:
    nothing besides them."""
    from spmdc.dialects.comm import START_OPS, BucketOp, collective_kind

    kind = collective_kind(op)
    if kind is None or kind == "comm.all_slice":
        return 0
    results = sum(_nbytes(r) for r in op.results if isinstance(r.type, TensorType))
    if isinstance(op, tuple(START_OPS.values())):   # the handle (counted as a value) is the receive buffer
        results = 0
    operands = sum(_nbytes(v) for v in op.operands)
    if kind == "comm.all_reduce_bucket":   # one flat buffer reduced in place: the results (or handle) are its views
        return 0
    if kind in ("comm.reduce_scatter", "comm.reduce_scatter_bucket"):
        # the runtime packs the operands when it starts (their bytes, kept until the wait by the
        # estimate's lifetimes, stand for the pack afterwards) and receives into the handle's bytes
        # (spmdc.runtime.collectives.scatter_packed: on gloo the pack itself, reduced in place);
        # while it packs, the operands and the pack are both alive: the pack, at the op only, less
        # the handle's (or results') bytes the estimate counts from the op but gloo's pairwise
        # exchange allocates only when waited (NCCL's reduce_scatter_tensor: when started)
        received = sum(_nbytes(r) for r in op.results)
        return max(0, operands - received)
    if kind == "comm.all_gather_bucket" and results:
        # a synchronous gather bucket: its pack goes once the transfer is done (before the receive
        # buffer is unpacked into the results), so the two never overlap: the receive buffer alone
        return results
    if isinstance(op, BucketOp) or getattr(op, "SYNC", None) is not None and issubclass(op.SYNC, BucketOp):
        return operands + results
    return results


def staging_spans(ops: list[Operation], extra: Callable[[Operation], int] | None = None
                  ) -> list[tuple[int, int, int]]:
    """(first op index, last op index, bytes) of every collective's staging buffers: a synchronous
    collective's at its op, a started one's from its ``comm.*_start`` to its ``comm.wait`` (a gather
    bucket's pack to the op before its wait: the runtime drops it before unpacking the result; a
    gather receives straight into its buffer, :mod:`spmdc.runtime.pairwise` on gloo)."""
    from spmdc.dialects.comm import WaitOp

    index = {op: i for i, op in enumerate(ops)}
    waits: dict[Operation, int] = {}
    for i, op in enumerate(ops):
        if isinstance(op, WaitOp):
            start = op.operand(0).defining_op()
            if start is not None:
                waits[start] = i

    from spmdc.dialects.comm import START_OPS, collective_kind

    out = []
    for op, i in index.items():
        n = staging_bytes(op) + (extra(op) if extra is not None else 0)
        if n:
            w = waits.get(op, i)
            kind = collective_kind(op)
            if kind in ("comm.reduce_scatter", "comm.reduce_scatter_bucket"):
                w = i   # (the pack while the operands are alive: at the op; then the operands stand for it)
            elif w > i and isinstance(op, tuple(START_OPS.values())) and kind == "comm.all_gather_bucket":
                w -= 1   # (a started gather bucket's pack goes when it is waited, before the unpacking)
            out.append((i, w, n))
    return out
