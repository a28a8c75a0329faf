"""Measured peak memory of one call: what a step allocates beyond what existed before it.

The static estimate (:func:`spmdc.passes.memory.peak_bytes`) reads the program; this one
watches it run. On a GPU it is ``torch.cuda.max_memory_allocated`` above the memory
allocated before the call; on a CPU, torch.profiler's memory events (every allocation and
free, in time order), summed::

    out, peak = measure_peak(cm.step, x, y)     # peak: bytes above the live memory at entry
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["measure_peak"]


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
    events = prof.profiler.kineto_results.events()
    return sorted(((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"), key=lambda r: r[0])
