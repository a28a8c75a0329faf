"""Measured peak memory of one call: what a step allocates beyond what existed before it.

The static estimate (:func:`spmdc.passes.memory.peak_bytes`) reads the program; this one
watches it run. On a GPU it is ``torch.cuda.max_memory_allocated`` above the memory
allocated before the call; on a CPU, torch.profiler's memory events (every allocation and
free, in time order), summed::

    out, peak = measure_peak(cm.step, x, y)     # peak: bytes above the live memory at entry
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["LiveTensor", "by_op", "measure_peak", "measure_peak_live", "peak_tensors"]


def measure_peak(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``fn(*args, **kwargs)`` and the peak bytes it allocated on top of what was live at entry."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn(*args, **kwargs)
        torch.cuda.synchronize()
        return out, torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn(*args, **kwargs)
    return out, _timeline_peak(prof)


def _timeline_peak(prof: Any) -> int:
    """Peak of (bytes created − bytes destroyed) over the profile's memory timeline; tensors
    that existed before the call are not counted."""
    live = peak = 0
    for _, delta in memory_timeline_deltas(prof):
        live += delta
        peak = max(peak, live)
    return peak


def memory_timeline_deltas(prof: Any) -> list[tuple[int, int]]:
    """(time ns, +bytes allocated / −bytes freed) of every allocation a finished
    ``torch.profiler.profile(profile_memory=True)`` recorded, in time order (the profiler's
    raw ``[memory]`` events; frees of tensors older than the profile count as negative)."""
    out = []
    for e in prof.profiler.kineto_results.events():
        try:
            memory = e.name() == "[memory]"
        except UnicodeDecodeError:   # (an event name torch cannot decode: not a memory event)
            continue
        if memory:
            out.append((e.start_ns(), e.nbytes()))
    return sorted(out, key=lambda r: r[0])


@dataclass(frozen=True)
class LiveTensor:
    """A tensor live at the measured peak, created during the call."""

    nbytes: int
    op: str   # the innermost op that created it, allocator calls skipped ("aten::mm"; "" when none)


_ALLOCATORS = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                         "aten::new_empty_strided", "aten::resize_", "aten::zeros", "aten::new_zeros"})


def peak_tensors(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int, list[LiveTensor]]:
    """``fn(*args, **kwargs)``, its peak as :func:`measure_peak` measures it on a CPU, and the tensors
    created during the call that were live at that peak, largest first, each named by the op that
    made it (the allocation's innermost enclosing op that is not a bare allocator: the ``aten::cat``
    whose ``aten::empty`` made the buffer)::

        out, peak, live = peak_tensors(cm.step, x, y)
        sum(t.nbytes for t in live)   # <= peak (frees of tensors older than the call lower it)
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn(*args, **kwargs)
    return out, _timeline_peak(prof), _live_at_peak(_allocations(prof))


def _allocations(prof: Any) -> list[tuple[int, int, int, str]]:
    """``(time ns, address, +bytes / -bytes, creating op)`` of every allocation and free a finished
    ``profile(profile_memory=True)`` recorded (its event tree), in time order."""
    from torch._C._profiler import _EventType

    out: list[tuple[int, int, int, str]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag != _EventType.Allocation:
            continue
        fields = node.extra_fields
        if fields.device.type != "cpu":
            continue
        op, parent = "", node.parent
        while parent is not None:
            if parent.tag == _EventType.TorchOp:
                op = op or parent.name
                if parent.name not in _ALLOCATORS:
                    op = parent.name
                    break
            parent = parent.parent
        out.append((int(node.start_time_ns), int(fields.ptr), int(fields.alloc_size), op))
    return sorted(out, key=lambda r: r[0])


def _live_at_peak(allocations: list[tuple[int, int, int, str]]) -> list[LiveTensor]:
    """The allocations live when the running total of ``allocations`` was highest."""
    live: dict[int, tuple[int, str]] = {}
    best: list[tuple[int, str]] = []
    level = top = 0
    for _, ptr, size, op in allocations:
        level += size
        if size > 0:
            live[ptr] = (size, op)
        else:
            live.pop(ptr, None)
        if level > top:
            top = level
            best = list(live.values())
    return sorted((LiveTensor(n, op) for n, op in best), key=lambda x: -x.nbytes)


def measure_peak_live(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, tuple[int, list[LiveTensor]]]:
    """``(fn(...), (peak, live tensors at it))``: :func:`peak_tensors` on a CPU; on a GPU the peak
    of :func:`measure_peak` and no tensor list."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out, peak = measure_peak(fn, *args, **kwargs)
        return out, (peak, [])
    out, peak, live = peak_tensors(fn, *args, **kwargs)
    return out, (peak, live)


def by_op(live: list[LiveTensor]) -> list[tuple[str, int, int]]:
    """``(creating op, tensors, bytes)`` of ``live``, most bytes first."""
    rows: dict[str, list[int]] = {}
    for t in live:
        row = rows.setdefault(t.op or "(no op)", [0, 0])
        row[0] += 1
        row[1] += t.nbytes
    return sorted(((op, n, b) for op, (n, b) in rows.items()), key=lambda r: (-r[2], r[0]))
