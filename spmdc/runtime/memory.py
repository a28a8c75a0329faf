"""Measured peak memory of one call: what a step allocates beyond what existed before it.

The static estimate (:func:`spmdc.passes.memory.peak_bytes`) reads the program; this one
watches it run. On a GPU it is ``torch.cuda.max_memory_allocated`` above the memory
allocated before the call; on a CPU, torch.profiler's memory events (every allocation and
free, in time order), summed::

    out, peak = measure_peak(cm.step, x, y)     # peak: bytes above the live memory at entry
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["LiveTensor", "by_op", "measure_peak", "measure_peak_live", "memory_timeline", "peak_tensors"]


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
    category: str   # torch's memory profiler's: parameter, gradient, activation, temporary, optimizer_state, ...
    op: str         # the innermost op that created it ("aten::mm"; "" when none was running)


def peak_tensors(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int, list[LiveTensor]]:
    """``fn(*args, **kwargs)``, its peak as :func:`measure_peak` measures it on a CPU, and the tensors
    created during the call that were live at that peak, largest first (torch.profiler's memory
    profiler names their category; the op that created each is the innermost op running then; when
    torch's analysis of the profile fails, as it does on some programs, the list is empty)::

        out, peak, live = peak_tensors(cm.step, x, y)
        sum(t.nbytes for t in live)   # <= peak (frees of tensors older than the call lower it)
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        out = fn(*args, **kwargs)
    peak = _timeline_peak(prof)
    try:   # (a diagnostic: torch's analysis refuses some graphs, e.g. "version mismatch": no list then)
        return out, peak, _live_at_peak(memory_timeline(prof), _op_spans(prof))
    except Exception:  # noqa: BLE001
        return out, peak, []


def memory_timeline(prof: Any) -> list[tuple[int, str, Any, int, str]]:
    """The memory timeline torch.profiler's memory profiler (a private API, torch 2.13) builds from a
    finished ``profile(profile_memory=True, record_shapes=True, with_stack=True)``: ``(time ns,
    action, tensor key, bytes, category)`` in time order; action ``PREEXISTING`` / ``CREATE`` /
    ``INCREMENT_VERSION`` / ``DESTROY``, category ``parameter``, ``gradient``, ``activation``,
    ``temporary``, ``optimizer_state``, ``input``, ``autograd_detail`` or ``unknown``."""
    mp = prof._memory_profile()
    out = []
    for t, action, (key, version), size in mp.timeline:
        cat = mp._categories.get(key, version)
        out.append((int(t), action.name, key, int(size), cat.name.lower() if cat is not None else "unknown"))
    return out


def _op_spans(prof: Any) -> list[tuple[int, int, str]]:
    """(start ns, end ns, name) of the CPU ops a profile recorded, by start."""
    ops = []
    for e in prof.profiler.kineto_results.events():
        try:
            name = e.name()
        except UnicodeDecodeError:   # (an event name torch cannot decode: not an op of ours)
            continue
        if name != "[memory]" and e.device_type().name == "CPU":
            ops.append((e.start_ns(), e.end_ns(), name))
    return sorted(ops, key=lambda o: o[0])


def _live_at_peak(timeline: list[tuple[int, str, Any, int, str]], ops: list[tuple[int, int, str]]
                  ) -> list[LiveTensor]:
    starts = [o[0] for o in ops]

    def creator(t: int) -> str:
        i = bisect.bisect_right(starts, t) - 1
        while i >= 0:   # the latest-starting op still running at t: the innermost
            if ops[i][1] >= t:
                return ops[i][2]
            i -= 1
        return ""

    live: dict[Any, tuple[int, str, int]] = {}
    best: list[tuple[int, str, int]] = []
    level = top = 0
    for t, action, key, size, category in timeline:
        if action == "CREATE":
            live[key] = (size, category, t)
            level += size
        elif action == "DESTROY":
            live.pop(key, None)
            level -= size
        elif action == "INCREMENT_VERSION" and key in live:
            live[key] = (live[key][0], category, live[key][2])
        if action in ("CREATE", "DESTROY") and level > top:
            top = level
            best = list(live.values())
    return sorted((LiveTensor(n, c, creator(at)) for n, c, at in best), key=lambda x: -x.nbytes)


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
