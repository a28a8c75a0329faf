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
state; ``seconds`` the median step after the first. With ``rounds`` > 1 (``bench/auto_plan.py``)
the cases take turns and each also reports its step's parts: ``program_seconds`` (forward and
backward), ``update_seconds`` (the optimizer), ``comm_seconds`` (the time spmdc's collective calls
and waits held the program, a pipeline stage's waits for its peer stage's messages among them as
``recv``, :attr:`~spmdc.runtime.collectives.CommStats.seconds`), ``comm_seconds_by_kind`` and
``cpu_seconds`` (the CPU time the rank's process used in a step, every thread counted: on ranks
sharing cores the step lasts about the job's CPU time over the cores).
Used by ``tests/unit/tools/test_plan_predictions.py``, ``bench/plan_accuracy.py`` and ``bench/auto_plan.py``.
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
                  profiled: int = 2, rounds: int = 1) -> list[dict]:
    """On every rank: each case's measured step (see the module doc); the peak is the lowest of the
    last ``profiled`` steps' (never the first step's: it allocates the optimizer's state).

    ``rounds`` > 1: every case is compiled first and its steps are timed in ``rounds`` rounds of
    ``steps`` steps, the cases taking turns (each round in another order), so that a burst of other
    work on the machine slows every case a little instead of one case a lot; ``seconds`` is then the
    median over every timed step, and ``round_seconds`` each round's step times (in the order the
    rounds ran), from which a bench can tell how well the measurement agrees with itself."""
    import torch
    import torch.distributed as dist

    from spmdc.api.entry import CompiledModule, Optimizer
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.memory import measure_peak

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo")
    try:
        if rounds <= 1:
            return [_measure(case, steps, lr, CompiledModule, Optimizer, load_workload, measure_peak, torch, profiled)
                    for case in cases]
        return _interleaved(cases, steps, lr, profiled, rounds, CompiledModule, Optimizer, load_workload, measure_peak,
                            torch)
    finally:
        if own:
            dist.destroy_process_group()


def _compiled(case: tuple, lr: float, CompiledModule: Any, Optimizer: Any, load_workload: Any, torch: Any) -> Any:
    workload, mesh, plan, optimizer, *kw = case
    w = load_workload(workload, **(kw[0] if kw else {}))
    torch.manual_seed(0)
    cm = CompiledModule(w.model, tuple(w.inputs), mesh=mesh, plan=plan, train=True, loss_fn=w.loss_fn,
                        loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs,
                        optimizer=Optimizer(optimizer or "sgd", lr=lr))
    return w, cm


def _timed_step(cm: Any, w: Any) -> tuple[float, float, float, float, dict[str, float], float]:
    """One ``cm.step`` as its parts: (step, program (forward and backward), update, held by collectives)
    seconds, the seconds held per collective kind (and ``comm.wait``), and the CPU seconds the rank's
    process used in the step (every thread: the collective backend's too)."""
    cm.comm.stats.seconds = {}
    c0 = time.process_time()
    t0 = time.perf_counter()
    cm.zero_grad(set_to_none=True)
    cm.backward(*w.inputs, *w.loss_inputs, **w.kwargs)
    t1 = time.perf_counter()
    cm.optimizer.step()
    t2 = time.perf_counter()
    cm.zero_grad(set_to_none=True)
    t3 = time.perf_counter()
    held = cm.comm.stats.seconds
    cm.comm.stats.seconds = None
    return t3 - t0, t1 - t0, t2 - t1, sum(held.values()), held, time.process_time() - c0


def _interleaved(cases: list[tuple], steps: int, lr: float, profiled: int, rounds: int, CompiledModule: Any,
                 Optimizer: Any, load_workload: Any, measure_peak: Any, torch: Any) -> list[dict]:
    built = [_compiled(case, lr, CompiledModule, Optimizer, load_workload, torch) for case in cases]
    out = []
    for w, cm in built:
        cm.step(*w.inputs, *w.loss_inputs, **w.kwargs)   # (allocates the optimizer's state; warms up)
        peaks = []
        for _ in range(max(1, profiled)):
            cm.comm.stats.counts.clear()
            cm.comm.stats.bytes.clear()
            peaks.append(measure_peak(cm.step, *w.inputs, *w.loss_inputs, **w.kwargs)[1])
        stored, opt = state_bytes(cm)
        out.append({"counts": dict(cm.comm.stats.counts), "bytes": dict(cm.comm.stats.bytes), "stored": stored,
                    "optimizer": opt, "peak": min(peaks), "parts": [], "round_seconds": []})
        if cm.pipeline is not None:
            out[-1]["pipe_sent"] = (cm.pipeline.last_messages, cm.pipeline.last_bytes_sent)
    order = list(range(len(built)))
    for r in range(rounds):
        turn = order[r % len(order):] + order[:r % len(order)]
        for i in (turn if r % 2 == 0 else turn[::-1]):
            w, cm = built[i]
            timed = [_timed_step(cm, w) for _ in range(steps)]
            out[i]["parts"] += timed
            out[i]["round_seconds"].append([t[0] for t in timed])
    for o in out:
        parts = o.pop("parts")
        for k, key in enumerate(("seconds", "program_seconds", "update_seconds", "comm_seconds")):
            o[key] = statistics.median(p[k] for p in parts)
        o["cpu_seconds"] = statistics.median(p[5] for p in parts)
        o["comm_seconds_by_kind"] = {kind: statistics.median(p[4].get(kind, 0.0) for p in parts)
                                     for kind in {kind for p in parts for kind in p[4]}}
    return out


def _measure(case: tuple, steps: int, lr: float, CompiledModule: Any, Optimizer: Any, load_workload: Any,
             measure_peak: Any, torch: Any, profiled: int = 2) -> dict:
    w, cm = _compiled(case, lr, CompiledModule, Optimizer, load_workload, torch)
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
    stored, opt = state_bytes(cm)
    out = {"counts": dict(cm.comm.stats.counts), "bytes": dict(cm.comm.stats.bytes), "stored": stored,
           "optimizer": opt, "peak": min(peaks), "seconds": statistics.median(times[1:] or times or [0.0])}
    if cm.pipeline is not None:   # what the stage sent to other stages in the last step
        out["pipe_sent"] = (cm.pipeline.last_messages, cm.pipeline.last_bytes_sent)
    return out
