"""Measure what the dry run predicts: one training step per case on real ranks, every rank's
collectives, bytes, stored state and peak, to set beside :func:`~spmdc.api.dry_run.dry_run`.

    results = launch(measure_cases, 4, (cases, steps))     # cases: [(workload, mesh, plan, optimizer[, factory kw])]
    results[rank][i] == {"counts": {...}, "bytes": {...}, "stored": ..., "optimizer": ..., "peak": ..., "seconds": ...}

Each case compiles with :class:`~spmdc.api.entry.CompiledModule` (as ``spmdc run`` does), runs
``steps`` steps of ``cm.step`` (the first allocates the optimizer's state), and on the last one
records the collectives issued; the peak above the memory live at a step's start
(:func:`~spmdc.runtime.memory.measure_peak`) is the lowest of the last ``profiled`` steps' (two by
default; the profiler also sees the collective backend's own threads allocate, whose timing varies
from step to step).
``stored`` is the bytes of the rank's parameters and buffers, ``optimizer`` of its optimizer
state; ``seconds`` the median step after the first.
Used by ``tests/unit/tools/test_plan_predictions.py`` and ``bench/plan_accuracy.py``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

__all__ = ["measure_cases", "state_bytes"]


def state_bytes(cm: Any) -> tuple[int, int]:
    """(bytes of the parameters and buffers this rank stores, bytes of its optimizer state)."""
    import torch

    def local(t: Any) -> Any:
        return t.to_local() if hasattr(t, "to_local") else t

    stored = sum(local(t).numel() * local(t).element_size() for t in (*cm.parameters(), *cm.buffers()))
    if getattr(cm, "pipeline", None) is not None:   # (a pipeline's stages hold their buffers)
        stored += cm.pipeline.buffer_bytes()
    opt = 0
    if cm.optimizer is not None:
        for st in cm.optimizer.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    opt += local(v).numel() * local(v).element_size()
    return stored, opt


def measure_cases(cases: list[tuple[str, Any, Any, str | None]], steps: int = 3, lr: float = 0.01,
                  profiled: int = 2) -> list[dict]:
    """On every rank: each case's measured step (see the module doc); the peak is the lowest of the
    last ``profiled`` steps' (never the first step's: it allocates the optimizer's state)."""
    import torch
    import torch.distributed as dist

    from spmdc.api.entry import CompiledModule, Optimizer
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.memory import measure_peak

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo")
    try:
        return [_measure(case, steps, lr, CompiledModule, Optimizer, load_workload, measure_peak, torch, profiled)
                for case in cases]
    finally:
        if own:
            dist.destroy_process_group()


def _measure(case: tuple, steps: int, lr: float, CompiledModule: Any, Optimizer: Any, load_workload: Any,
             measure_peak: Any, torch: Any, profiled: int = 2) -> dict:
    out = []
    for workload, mesh, plan, optimizer, *kw in [case]:
        w = load_workload(workload, **(kw[0] if kw else {}))
        torch.manual_seed(0)
        cm = CompiledModule(w.model, tuple(w.inputs), mesh=mesh, plan=plan, train=True, loss_fn=w.loss_fn,
                            loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs,
                            optimizer=Optimizer(optimizer or "sgd", lr=lr))
        times, peaks = [], []
        for k in range(steps):
            if k >= max(1, steps - profiled):   # the last steps (the first allocates the optimizer's state)
                cm.comm.stats.counts.clear()
                cm.comm.stats.bytes.clear()
                _, top = measure_peak(cm.step, *w.inputs, *w.loss_inputs, **w.kwargs)
                peaks.append(top)
            else:
                t = time.perf_counter()
                cm.step(*w.inputs, *w.loss_inputs, **w.kwargs)
                times.append(time.perf_counter() - t)
        peak = min(peaks)
        stored, opt = state_bytes(cm)
        out.append({"counts": dict(cm.comm.stats.counts), "bytes": dict(cm.comm.stats.bytes), "stored": stored,
                    "optimizer": opt, "peak": peak, "seconds": statistics.median(times[1:] or times or [0.0])})
        if cm.pipeline is not None:   # what the stage sent to other stages in the last step
            out[-1]["pipe_sent"] = (cm.pipeline.last_messages, cm.pipeline.last_bytes_sent)
    return out[0]
