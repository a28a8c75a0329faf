"""What one rank's program will cost: memory, communication and time, read from its IR.

The dry run (``spmdc plan``) compiles a job without ranks and calls :func:`predict` on each
distinct rank program::

    p = predict(prog_module, step, mesh, device_profile("h100"), optimizer="adamw")
    p.memory.total            # bytes: parameters + optimizer state + the step's peak
    p.comm                    # [CommRow(axes="dp", kind="comm.all_gather_bucket", count, bytes, seconds)]
    p.step_seconds            # compute (roofline per op) + collectives not hidden by overlap

**Memory** (bytes per rank): the parameters and buffers the rank stores (its arguments of kind
``param:``), the optimizer's state for them (measured once per optimizer class on a small tensor:
bytes per parameter element and per tensor), and the step's peak from the static liveness walk
of :mod:`spmdc.passes.memory`, with each collective's staging buffers (the runtime packs a
bucket into one send buffer and receives into one buffer before unpacking: operand + result
bytes while it runs) added at the op that uses them. The peak's live values are split into
gradients (results of kind ``grad:``), communication (collective results and buffers) and
activations (the rest).

**Bytes** per mesh axis and collective kind are what the runtime records for each call
(:class:`~spmdc.runtime.collectives.CommStats`: the payload operand bytes), so a measured run's
table equals the prediction for every collective whose sizes are static (an expert dispatch's
rows depend on the routing: its capacity bound is given, marked ``≤``).

**Time**: every op a roofline ``max(flops / peak, bytes / HBM) + launch``; every collective
``α-β`` over its axes' link (:class:`~spmdc.sharding.cost.AxisCost`; on a calibrated profile as
measured per kind and group size, a bucketed call plus its members' packing); a program scheduled with
overlap (``comm.*_start``/``comm.wait``) hides collectives behind compute up to the compute time,
a synchronous one adds them; each of the program's :func:`sync_points` (a wait on peers after
computing alone) adds the device's ``sync_us`` (ranks sharing cores; 0 for a device per rank).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from spmdc.ir.core import Operation, Value
from spmdc.ir.types import HandleType, TensorType
from spmdc.passes.memory import staging_bytes, staging_spans  # noqa: F401  (re-exported)

__all__ = ["CommRow", "MemoryBreakdown", "Prediction", "all_reduce_seconds", "optimizer_ops", "optimizer_seconds",
           "optimizer_state", "predict"]


@dataclass
class CommRow:
    """One mesh axis (or axes) and collective kind: calls and payload bytes per step, predicted seconds."""

    axes: str
    kind: str
    count: int = 0
    bytes: int = 0
    seconds: float = 0.0
    bound: bool = False      # bytes are an upper bound (data-dependent rows: expert dispatch)


@dataclass
class MemoryBreakdown:
    """Peak bytes per rank, by what holds them."""

    parameters: int = 0
    optimizer: int = 0
    gradients: int = 0       # gradients alive at the step's peak
    activations: int = 0     # other tensors alive at the step's peak
    comm_buffers: int = 0    # collective results and staging buffers alive at the peak
    optimizer_step: int = 0  # the optimizer update's temporaries, when the peak is reached there
    whole_gradients: int = 0  # gradients gathered whole after the program (an optimizer storing
    #                           parameters whole), with one gather's buffer, when the peak is there
    peak_op: str = ""        # where the step's peak is reached

    @property
    def step_peak(self) -> int:
        """What the step allocates beyond the stored parameters and optimizer state."""
        return self.gradients + self.activations + self.comm_buffers + self.optimizer_step + self.whole_gradients

    @property
    def total(self) -> int:
        return self.parameters + self.optimizer + self.step_peak


@dataclass
class Prediction:
    """One rank program's predicted memory, collectives and step time."""

    memory: MemoryBreakdown
    comm: list[CommRow] = field(default_factory=list)
    flops: float = 0.0
    hbm_bytes: float = 0.0
    kernels: int = 0
    compute_seconds: float = 0.0
    comm_seconds: float = 0.0
    overlapped: bool = False
    bubble_seconds: float = 0.0   # a pipeline stage's wait for the others (fill, drain, a slower stage)
    overlap: float = 1.0          # the device's share of collective time hidden behind compute
    update_seconds: float = 0.0   # the optimizer's update after the program (torch.optim on the parameters)
    stage_seconds: float = 0.0    # a pipeline's slowest stage micro-batch (its fill and drain: pp - 1 of them)
    sync_points: int = 0          # waits on peers after computing alone (:func:`sync_points`), each priced sync_us

    @property
    def collectives(self) -> int:
        return sum(r.count for r in self.comm)

    @property
    def comm_bytes(self) -> int:
        return sum(r.bytes for r in self.comm)

    def by_kind(self) -> tuple[dict[str, int], dict[str, int]]:
        """(calls, bytes) per collective kind over all axes: what the runtime's
        :class:`~spmdc.runtime.collectives.CommStats` of one step holds."""
        counts: dict[str, int] = {}
        nbytes: dict[str, int] = {}
        for r in self.comm:
            counts[r.kind] = counts.get(r.kind, 0) + r.count
            nbytes[r.kind] = nbytes.get(r.kind, 0) + r.bytes
        return counts, nbytes

    @property
    def step_seconds(self) -> float:
        busy = self.compute_seconds + self.comm_seconds
        if self.overlapped:
            busy -= self.overlap * min(self.compute_seconds, self.comm_seconds)
        busy += self.update_seconds
        return busy + self.bubble_seconds


# -- memory ----------------------------------------------------------------------------------------

@functools.cache
def optimizer_state(name: str | None, shape: tuple[int, ...] = (64, 8), dtype: str = "float32") -> int:
    """Bytes of ``torch.optim``'s ``name`` state (as ``spmdc run --optimizer`` names it) for one
    parameter of ``shape``: the optimizer built over a meta-device parameter and stepped once (no
    memory; AdamW: two moments like the parameter and a 4-byte step counter). A class that cannot
    step on meta tensors (Adafactor reads values) is stepped on a real tensor, or, above 4M
    elements, on one with every dim capped at 2048 and scaled by the element ratio (an estimate)."""
    if name is None:
        return 0
    import torch

    from spmdc.runtime.optimizers import make_optimizer

    def state(shape: tuple[int, ...], device: str) -> int:
        p = torch.nn.Parameter(torch.zeros(shape, dtype=getattr(torch, dtype), device=device))
        opt = make_optimizer(name, [p])
        p.grad = torch.zeros_like(p)
        opt.step()
        return sum(t.numel() * t.element_size() for t in opt.state[p].values() if isinstance(t, torch.Tensor))

    try:
        return state(shape, "meta")
    except (RuntimeError, NotImplementedError):
        pass
    if math.prod(shape) <= 1 << 22:
        return state(shape, "cpu")
    small = tuple(min(d, 2048) for d in shape)
    return int(state(small, "cpu") * math.prod(shape) / max(1, math.prod(small)))


def _torch_dtype(element_type: str) -> str:
    """torch's dtype name for an IR element type (``f32`` → ``float32``)."""
    from spmdc.ir.types import ELEMENT_TYPE_INFO

    return ELEMENT_TYPE_INFO[element_type].torch


def _tensor_bytes(v: Value) -> int:
    return v.type.num_bytes if isinstance(v.type, (TensorType, HandleType)) else 0   # type: ignore[attr-defined]


@functools.cache
def _optimizer_temporaries(name: str) -> tuple[float, bool]:
    """(peak bytes of one update per parameter byte, whether the update holds them for every tensor
    at once, as a foreach implementation does): measured on float32 tensors, over one and over two
    of them, at the second update (state already allocated)."""
    import torch

    def peak(shapes: list[tuple[int, int]]) -> int:
        from spmdc.runtime.memory import measure_peak
        from spmdc.runtime.optimizers import make_optimizer

        ps = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        opt = make_optimizer(name, ps)
        for _ in range(2):
            for p in ps:
                p.grad = torch.ones_like(p)
            with _quiet_stderr():
                _, top = measure_peak(opt.step)
        return top

    one, two = peak([(256, 16)]), peak([(256, 16), (256, 16)])
    nbytes = 256 * 16 * 4
    at_once = two > 1.5 * one
    return (two / (2 * nbytes) if at_once else one / nbytes), at_once


@functools.cache
def optimizer_ops(name: str) -> tuple[int, int]:
    """(ops per parameter tensor, ops per update besides) of one update of ``torch.optim``'s ``name``
    as spmdc builds it (:func:`~spmdc.runtime.optimizers.make_optimizer`), counted with a dispatch
    mode over one and over two float32 tensors at the second update (state already allocated)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            Count.n += 1
            return func(*args, **(kwargs or {}))

    def count(k: int) -> int:
        from spmdc.runtime.optimizers import make_optimizer

        ps = [torch.nn.Parameter(torch.zeros(16, 4)) for _ in range(k)]
        opt = make_optimizer(name, ps)
        for p in ps:
            p.grad = torch.ones_like(p)
        opt.step()
        Count.n = 0
        with Count():
            opt.step()
        return Count.n

    one, two = count(1), count(2)
    per = max(0, two - one)
    return per, max(0, one - per)


def pipeline_step(busiest: float, stage: float, groups: int, device: Any) -> float:
    """A pipeline's step: the busiest rank's time plus the fill and drain, ``(groups - 1)`` slowest
    stage micro-batches. On ranks sharing cores (the device's ``idle_speedup`` > 1, measured: ranks
    compute that much faster while half of them wait) the stages that wait free their cores: the step
    is the longer of the busiest rank's time (every rank's work at full contention) and the whole
    critical path at the idle ranks' speed::

        max(busiest, (busiest + (groups - 1) · stage) / idle_speedup)

    (a device per rank: ``idle_speedup`` 1, the usual ``busiest + (groups - 1) · stage``)."""
    speedup = max(1.0, getattr(device, "idle_speedup", 1.0))
    return max(busiest, (busiest + (groups - 1) * stage) / speedup)


def optimizer_seconds(name: str | None, param_bytes: list[int], device: Any) -> float:
    """Predicted seconds of one optimizer update over parameters of ``param_bytes``: each op on a
    parameter (a DTensor) costs the device's ``dtensor_op_us`` plus its bytes over HBM (each op
    reads and writes a parameter-sized tensor)."""
    if name is None or not param_bytes:
        return 0.0
    per, fixed = optimizer_ops(name)
    ops = per * len(param_bytes) + fixed
    return ops * device.dtensor_op_us * 1e-6 + per * 2 * sum(param_bytes) / (device.hbm_gbps * 1e9)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's native start/stop lines off the terminal (file descriptor 2) while it measures."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def optimizer_transient(name: str, param_bytes: list[int]) -> int:
    """Bytes the optimizer's update allocates over the stored state and gradients, for parameters of
    ``param_bytes`` (measured per class: :func:`_optimizer_temporaries`)."""
    if not param_bytes:
        return 0
    ratio, at_once = _optimizer_temporaries(name)
    return int(ratio * (sum(param_bytes) if at_once else max(param_bytes)))


def backend_staging(op: Operation, device: Any) -> int:
    """Bytes the collective backend of ``device`` holds of its own while ``op`` runs: a reduce-scatter's
    copy of its (packed) input on gloo (:attr:`~spmdc.compiler.devices.DeviceProfile.scatter_staging`).
    The backend frees it when the transfer ends, before spmdc waits on it: the estimate counts it at
    the op that starts the collective. (gloo's all-gather also receives into a buffer of its own, on its
    worker thread while the transfer runs; counted so, it put the estimate 11 % over the measured peak
    of llama-tiny under fsdp: not counted.)"""
    from spmdc.dialects.comm import collective_kind

    if device is None or not device.scatter_staging:
        return 0
    if collective_kind(op) in ("comm.reduce_scatter", "comm.reduce_scatter_bucket"):
        return int(device.scatter_staging * sum(_tensor_bytes(v) for v in op.operands))
    return 0


def _gathered(func: Any, step: Any, store: dict[int, int] | None) -> list[tuple[tuple[Any, ...], Value, int, int]]:
    """``(layout as returned, the returned value, argument index, whole bytes)`` of every gradient
    the runtime gathers whole after the program, when the optimizer stores parameters whole
    (``store``) and the program returns the gradient sharded or pending."""
    from spmdc.dialects.shard import SHARDING_ATTR, Replicate

    if not store or step.name != "train" or not func.body.ops:
        return []
    by_name = {k[6:]: i for i, k in enumerate(step.arg_kinds) if k.startswith("param:")}
    ret = func.body.ops[-1]
    out = []
    for r, kind in enumerate(step.result_kinds):
        i = by_name.get(kind[5:]) if kind.startswith("grad:") else None
        sharding = func.res_attrs(r).get(SHARDING_ATTR)
        if i is not None and i in store and sharding is not None and not all(
                isinstance(q, Replicate) for q in sharding.placements):
            out.append((tuple(sharding.placements), ret.operand(r), i, store[i]))
    return out


def storage_moves(func: Any, step: Any, store: dict[int, int] | None, mesh: Any) -> list[tuple[str, str, int, int]]:
    """The collectives of :func:`_gathered`'s gradients, each gathered whole by spmdc's own
    collectives (:meth:`~spmdc.api.parameter_store.ParameterStore.relayout`) in the steps of
    :func:`~spmdc.sharding.planner.plan_redistribution` to replicated: per step ``(kind, axes,
    payload bytes, whole bytes of the gradient)``, in the order they run."""
    from spmdc.dialects.shard import Replicate
    from spmdc.sharding.planner import plan_redistribution

    names = list(mesh.axis_names)
    out = []
    for layout, v, i, whole in _gathered(func, step, store):
        nbytes = _tensor_bytes(v)
        for st in plan_redistribution(layout, tuple(Replicate() for _ in layout), len(step.arg_shapes[i]), 1.0,
                                      list(mesh.shape)):
            out.append(("comm." + st.kind, ",".join(names[a] for a in st.axes), nbytes, whole))
            if st.kind == "all_gather":
                for a in st.axes:
                    nbytes *= mesh.axis_size(names[a])
    return out


def step_memory(func: Any, step: Any, optimizer: str | None, store: dict[int, int] | None = None,
                group_extra: Callable[[Operation], int] | None = None, device: Any = None) -> MemoryBreakdown:
    """The breakdown for ``func`` (a rank's ``@main``) of ``step`` (its CompiledStep): parameters
    are its ``param:`` arguments' bytes (``store``: argument index → stored bytes, when the
    storage differs from the program's argument); ``device``: its profile's backend staging
    (:func:`backend_staging`) counted with each collective's buffers."""
    from spmdc.dialects.comm import WaitOp, collective_kind
    from spmdc.passes.memory import lifetimes

    ops = list(func.body.ops)
    params = 0
    for i, a in enumerate(func.args):
        if i < len(step.arg_kinds) and step.arg_kinds[i].startswith("param:"):
            params += store.get(i, _tensor_bytes(a)) if store else _tensor_bytes(a)
    trainable = [i for i, k in enumerate(step.arg_kinds) if k.startswith("param:") and i not in step.buffers]
    opt = 0
    if step.name == "train" and optimizer is not None:
        grads = {k[5:] for k in step.result_kinds if k.startswith("grad:")}
        for i in trainable:
            if step.arg_kinds[i][6:] in grads:
                t = func.args[i].type
                whole = store is not None and i in store
                shape = tuple(step.arg_shapes[i]) if whole else tuple(t.shape)
                opt += optimizer_state(optimizer, shape, _torch_dtype(t.element_type))
    bases: dict[Value, Value] = {}
    life = lifetimes(ops, bases)
    delta = [0] * (len(ops) + 1)
    for v, (b, e) in life.items():
        delta[b] += _tensor_bytes(v)
        delta[e + 1] -= _tensor_bytes(v)
    staged = staging_spans(ops, group_extra)
    # (the backend's own buffer lives while the transfer runs, which it starts at the op: counted there)
    staged += [(i, i, n) for i, op in enumerate(ops) if (n := backend_staging(op, device))]
    for b, e, nbytes in staged:
        delta[b] += nbytes
        delta[e + 1] -= nbytes
    tail = optimizer_transient(optimizer, [(store or {}).get(i, _tensor_bytes(func.args[i])) for i in trainable]) if (
        step.name == "train" and optimizer is not None) else 0
    gathered = [(_tensor_bytes(v), whole) for _, v, _, whole in _gathered(func, step, store)]
    grown = sum(w for _, w in gathered) - sum(b for b, _ in gathered)
    live, peak, at, whole = 0, 0, 0, 0
    for i in range(len(ops)):
        live += delta[i]
        here = live + (tail + grown if i == len(ops) - 1 else 0)
        if here > peak:
            peak, at = here, i
    if gathered:   # every gradient gathered whole, the program's results still held, one gather's buffer
        here = live + sum(w for _, w in gathered) + max(w for _, w in gathered)
        if here > peak:
            peak, at, whole = here, len(ops) - 1, here - live
    ret = ops[-1] if ops else None
    grad_values = set()
    index = {op: i for i, op in enumerate(ops)}
    if ret is not None:
        for k, v in zip(step.result_kinds, ret.operands):
            if k.startswith("grad:"):
                grad_values.add(v)
                maker = v.defining_op()   # (an all-reduce's results are views of its buffer: a gradient once waited)
                if v in bases and maker in index and index[maker] <= at:
                    grad_values.add(bases[v])
    out = MemoryBreakdown(parameters=params, optimizer=opt)
    if not ops:
        return out
    out.comm_buffers = sum(n for b, e, n in staged if b <= at <= e)
    out.whole_gradients = whole
    out.optimizer_step = tail + grown if at == len(ops) - 1 and not whole else 0
    out.peak_op = f"#{at} {ops[at].name}" + (" (the optimizer's update)" if out.optimizer_step else
                                             " (gradients gathered whole)" if whole else "")
    for v, (b, e) in life.items():
        if not b <= at <= e:
            continue
        maker = v.defining_op()
        if v in grad_values:
            out.gradients += _tensor_bytes(v)
        elif isinstance(v.type, HandleType) or (maker is not None and (collective_kind(maker) is not None
                                                                      or isinstance(maker, WaitOp))):
            out.comm_buffers += _tensor_bytes(v)
        else:
            out.activations += _tensor_bytes(v)
    return out


# -- collectives -----------------------------------------------------------------------------------

def _axes_of(op: Operation) -> tuple[str, ...]:
    try:
        return tuple(getattr(op, "axes", ()))
    except (KeyError, AttributeError):   # (a collective over groups' ranks, not mesh axes)
        return ()


def payload_bytes(op: Operation) -> int:
    """The bytes the runtime records for one call of collective ``op``: its payload operands (every
    tensor operand; an expert move's routing operands are not sent)."""
    from spmdc.dialects.comm import SplitAllReduceOp

    if isinstance(op, SplitAllReduceOp):
        return sum(_tensor_bytes(v) for v in op.operands)
    sent = getattr(op, "PAYLOAD_OPERANDS", None)
    operands = list(op.operands) if sent is None else list(op.operands)[:sent]
    return sum(_tensor_bytes(v) for v in operands if isinstance(v.type, TensorType))


def _element_bytes(v: Value) -> int:
    from spmdc.ir.types import ELEMENT_TYPE_INFO

    return ELEMENT_TYPE_INFO[v.type.element_type].bytes   # type: ignore[attr-defined]


def group_tables(module: Operation) -> dict[Operation, Any]:
    """The slice tables of a program's cross-group collectives (``comm.split_all_reduce``: one
    :class:`~spmdc.sharding.slices.SplitAllReduce` per operand; ``comm.bsr``: its
    :class:`~spmdc.sharding.slices.BsrPlan`), as the runtime builds them (:mod:`spmdc.runtime.group_comm`)."""
    from spmdc.dialects.comm import BsrOp, SplitAllReduceOp
    from spmdc.dialects.shard import MeshOp
    from spmdc.sharding.slices import MeshSpec, bsr_plan, split_all_reduce_plan

    meshes = {op.sym_name: MeshSpec.of(op) for op in module.body.ops if isinstance(op, MeshOp)}
    out: dict[Operation, Any] = {}
    for op in module.walk():
        if isinstance(op, SplitAllReduceOp):
            out[op] = [split_all_reduce_plan(shape, u, meshes) for u, shape in zip(op.unions, op.global_shapes)]
        elif isinstance(op, BsrOp):
            out[op] = bsr_plan(op.global_shape, op.attributes["from"], op.attributes["to"], meshes)
    return out


def group_calls(op: Operation, table: Any, job_rank: int) -> list[tuple[int, int]]:
    """(ranks, bytes) of each collective job rank ``job_rank`` issues for a cross-group op: a split
    all-reduce issues one all-reduce per rank set it is in (its slices of every operand packed), a
    BSR one message per rank it sends to or receives from."""
    from spmdc.dialects.comm import SplitAllReduceOp
    from spmdc.sharding.slices import box_numel

    calls = []
    if isinstance(op, SplitAllReduceOp):
        sizes = [_element_bytes(v) for v in op.operands]
        sets = sorted({ranks for plan in table for ranks in plan.reductions if job_rank in ranks})
        for ranks in sets:
            calls.append((len(ranks), sum(box_numel(c) * size for plan, size in zip(table, sizes)
                                          for c in plan.reductions.get(ranks, []))))
        return calls
    size = _element_bytes(op.operand(0))
    for (src, dst), cells in table.sends.items():
        if src != dst and job_rank in (src, dst):
            calls.append((2, sum(box_numel(c) for c, _, _ in cells) * size))
    return calls


def comm_rows(func: Any, mesh: Any, device: Any, job_rank: int | None = None,
              tables: dict[Operation, Any] | None = None) -> list[CommRow]:
    """Collectives of ``func`` per (axes, kind): calls, payload bytes and α-β seconds. Cross-group
    collectives (``tables``: :func:`group_tables`) count what job rank ``job_rank`` issues."""
    from spmdc.dialects.comm import collective_kind
    from spmdc.sharding.cost import AxisCost

    rows: dict[tuple[str, str], CommRow] = {}
    for op in func.walk():
        kind = collective_kind(op)
        if kind is None:
            continue
        if tables is not None and op in tables:
            row = rows.setdefault(("(groups)", kind), CommRow("(groups)", kind))
            cost = AxisCost(latency_us=device.latency_us, bandwidth_gbps=device.inter_gbps)
            for n, nbytes in group_calls(op, tables[op], job_rank if job_rank is not None else 0):
                row.count += 1
                row.bytes += nbytes
                row.seconds += cost.all_reduce(nbytes, max(n, 2)) * 1e-6
            continue
        _add_call(rows, kind, _axes_of(op), payload_bytes(op), mesh, device, members=len(op.operands))
    return list(rows.values())


def all_reduce_seconds(nbytes: int, n: int, device: Any) -> float:
    """Seconds of one ``all_reduce`` of ``nbytes`` over a group of ``n`` ranks that is no mesh axis (a
    tied weight's stages): the calibrated call of that size where the device has one, else the ring
    model over the links between nodes."""
    from spmdc.sharding.cost import AxisCost

    measured = device.call_us("all_reduce", n, nbytes)
    if measured is not None:
        return measured * 1e-6
    return AxisCost(latency_us=device.latency_us, bandwidth_gbps=device.inter_gbps).all_reduce(nbytes, max(n, 2)) * 1e-6


def _add_call(rows: dict[tuple[str, str], CommRow], kind: str, axes: tuple[str, ...], nbytes: int, mesh: Any,
              device: Any, members: int = 1) -> None:
    """Count one call of collective ``kind`` over ``axes`` with ``nbytes`` of payload into its row,
    with its α-β seconds; a bucketed call (``comm.*_bucket``) of ``members`` tensors also with the
    host time of packing and unpacking them (the device's :meth:`~spmdc.compiler.devices.DeviceProfile.member_us`
    per member)::

        %g:2 = comm.all_gather_bucket %a, %b {axis = "dp", ...}   // one call + 2 members' packing
    """
    from spmdc.sharding.cost import AxisCost

    key = (",".join(axes) or "(groups)", kind)
    row = rows.setdefault(key, CommRow(*key))
    row.count += 1
    row.bytes += nbytes
    row.bound = row.bound or "expert" in kind
    n = 1
    for a in axes:
        if a in mesh.axis_names:
            n *= mesh.axis_size(a)
    cost = AxisCost(latency_us=device.latency_us, bandwidth_gbps=device.axis_bandwidth(mesh, axes))
    short = kind.removeprefix("comm.").removesuffix("_bucket")
    if short == "all_slice":
        return
    if kind.endswith("_bucket") and n > 1 and hasattr(device, "member_us"):
        row.seconds += members * device.member_us(short, n) * 1e-6
    measured = device.call_us("all_to_all" if short.startswith("expert_") else short, n, nbytes) if n > 1 else None
    if measured is not None:   # (a calibrated profile: what one such call took on these ranks)
        row.seconds += measured * 1e-6
        return
    if short == "all_gather":
        us = cost.all_gather(nbytes * n, n)
    elif short == "reduce_scatter":
        us = cost.reduce_scatter(nbytes, n)
    elif short in ("all_to_all", "expert_dispatch", "expert_combine"):
        us = cost.all_to_all(nbytes * n, n)
    else:   # all_reduce: as an all-reduce
        us = cost.all_reduce(nbytes, max(n, 2))
    row.seconds += us * 1e-6


# -- compute -----------------------------------------------------------------------------------------

def op_flops(op: Operation) -> float:
    """Floating-point operations of one op: 2·M·N·K for matrix products, 4·S·T·D per head for
    attention (×2.5 for its gradient), one per output element for anything else that computes."""
    name = op.name
    res = op.results[0].type if op.results else None
    out = math.prod(res.shape) if isinstance(res, TensorType) else 0
    ins = [v.type for v in op.operands if isinstance(v.type, TensorType)]
    if name in ("tensor.matmul", "tensor.linear", "tensor.grouped_matmul", "tensor.grouped_matmul_wgrad") and ins:
        k = ins[0].shape[-1] if ins[0].shape else 1
        if name == "tensor.grouped_matmul_wgrad":
            k = ins[0].shape[0] if ins[0].shape else 1
        return 2.0 * out * k
    if name in ("tensor.attention", "tensor.attention_grad") and len(ins) >= 3:
        q, k = ins[0], ins[1]
        batch_heads = math.prod(q.shape[:-2])
        f = 4.0 * batch_heads * q.shape[-2] * k.shape[-2] * q.shape[-1]
        return f * (2.5 if name.endswith("_grad") else 1.0)
    if name in ("tensor.conv", "tensor.conv_input_grad", "tensor.conv_weight_grad") and len(ins) >= 2:
        w = ins[1] if name != "tensor.conv_weight_grad" else (res if isinstance(res, TensorType) else ins[1])
        per_out = math.prod(w.shape[1:]) if name == "tensor.conv" else math.prod(w.shape[1:])
        return 2.0 * out * per_out
    return float(out)


def _computes(op: Operation) -> bool:
    """Whether ``op`` runs a kernel (not a view, constant, collective or wait)."""
    from spmdc.dialects.comm import WaitOp, collective_kind

    return not (op.has_trait("View") or collective_kind(op) is not None or isinstance(op, WaitOp)
                or op.name in ("func.return", "tensor.constant") or not op.results)


def sync_points(func: Any) -> int:
    """The times ``func`` waits for its peers after computing on its own: each synchronous collective
    or ``comm.wait`` with a kernel before it since the last such wait (the first one included: the
    ranks come from their own work). Waits back to back meet peers already together: one point::

        %a = comm.all_gather_start %w ...     // issued: no wait
        %y = tensor.matmul %x, %b ...
        %g = comm.wait %a ...                 // a point: %y was computed since the last one
        %h = comm.all_reduce %y ...           // none: nothing computed since

    At each the ranks arrive when their own work ends; on ranks sharing cores a rank the scheduler
    has descheduled keeps its peers waiting (the device's ``sync_us``, measured by ``spmdc calibrate``)."""
    from spmdc.dialects.comm import START_OPS, WaitOp, collective_kind

    starts = tuple(START_OPS.values())
    points, computed = 0, True
    for op in func.body.ops:
        if isinstance(op, WaitOp) or (collective_kind(op) is not None and not isinstance(op, starts)
                                      and collective_kind(op) != "comm.all_slice"):
            points += computed
            computed = False
        elif _computes(op):
            computed = True
    return points


def compute(func: Any, device: Any) -> tuple[float, float, int, float]:
    """(flops, HBM bytes, kernels, seconds) of ``func``'s ops: each op that computes (not a view,
    constant or collective) a roofline ``max(flops/peak, bytes/HBM)`` plus a launch."""
    flops = hbm = seconds = 0.0
    kernels = 0
    for op in func.body.ops:
        if not _computes(op):
            continue
        f = op_flops(op)
        b = sum(_tensor_bytes(v) for v in op.operands) + sum(_tensor_bytes(r) for r in op.results)
        flops += f
        hbm += b
        kernels += 1
        seconds += max(f / device.flops, b / (device.hbm_gbps * 1e9)) + device.launch_us * 1e-6
    return flops, hbm, kernels, seconds


def predict(module: Operation, step: Any, mesh: Any, device: Any, optimizer: str | None = None,
            store: dict[int, int] | None = None, job_rank: int | None = None,
            tables: dict[Operation, Any] | None = None) -> Prediction:
    """Memory, collectives and step time of one rank's program ``module`` (see the module doc);
    ``job_rank`` and ``tables`` (:func:`group_tables` of ``module``) for device groups' cross-group
    collectives, which depend on the job rank."""
    from spmdc.compiler.compilation import main_function
    from spmdc.dialects.comm import START_OPS

    func = main_function(module)
    def packed(op: Operation) -> int:   # a split all-reduce packs this rank's slices per rank set, all in flight
        return sum(b for _, b in group_calls(op, tables[op], job_rank or 0)) if tables and op in tables else 0

    memory = step_memory(func, step, optimizer, store, packed, device)
    rows = comm_rows(func, mesh, device, job_rank, tables)
    if tables is None:   # (device groups keep DTensor's moves, not counted)
        table = {(r.axes, r.kind): r for r in rows}
        for kind, axes, nbytes, _ in storage_moves(func, step, store, mesh):
            _add_call(table, kind, tuple(axes.split(",")), nbytes, mesh, device)
        rows = list(table.values())
    flops, hbm, kernels, seconds = compute(func, device)
    overlapped = any(isinstance(op, tuple(START_OPS.values())) for op in func.body.ops)
    comm_s = sum(r.seconds for r in rows) + sum(r.count for r in rows) * device.launch_us * 1e-6
    syncs = sync_points(func)
    comm_s += syncs * getattr(device, "sync_us", 0.0) * 1e-6
    update = 0.0
    if step.name == "train" and optimizer is not None:
        trainable = [i for i, k in enumerate(step.arg_kinds) if k.startswith("param:") and i not in step.buffers
                     and "grad:" + k[6:] in step.result_kinds]
        sizes = {i: n for i, n in (store or {}).items()}
        update = optimizer_seconds(optimizer, [sizes.get(i, _tensor_bytes(func.args[i])) for i in trainable],
                                   device)
    return Prediction(memory, rows, flops, hbm, kernels, seconds, comm_s, overlapped, overlap=device.overlap,
                      update_seconds=update, sync_points=syncs)
