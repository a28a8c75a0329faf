"""``spmdc run``'s per-step metrics and its progress indicator (the ranks' side).

    metrics, counted = workload_metrics(w, job, world)      # StepMetrics (6·N or 2·N per token / sample)
    with compile_progress(rank, "capturing and compiling"):   # a spinner on rank 0's terminal
        cm = CompiledModule(...)
    metrics.start(); loss = cm.step(...); rec = metrics.stop(loss, **counted)

A workload whose first input holds integers of two or more dims (token ids) counts tokens (its
element count), any other counts samples (its dim 0): the global batch, which every rank of
``spmdc run`` passes. The model FLOPs are the 6·N (training) or 2·N (forward) estimate of
:func:`spmdc.api.metrics.flops_per_token` per token or per sample, N the parameters without
embeddings — an estimate that undercounts a model reusing a weight along a dim (convolutions).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, TextIO


def batch_count(w: Any) -> dict[str, int]:
    """``{"tokens": n}`` for token ids ([batch, seq, ...] integers), else ``{"samples": batch}``."""
    first = next((t for t in (*w.inputs, *w.kwargs.values()) if hasattr(t, "dim") and t.dim() > 0), None)
    if first is None:
        return {}
    if not first.is_floating_point() and not first.is_complex() and first.dim() >= 2:
        return {"tokens": int(first.numel())}
    return {"samples": int(first.shape[0])}


def workload_metrics(w: Any, job: dict[str, Any], world: int) -> tuple[Any, dict[str, int]]:
    """A silent :class:`~spmdc.api.metrics.StepMetrics` for the workload (the peak from ``--peak-flops``
    / ``--device-peak``, else ``$SPMDC_PEAK_FLOPS`` or the GPU's name) and what each step counts."""
    from spmdc.api.metrics import StepMetrics, count_params, flops_per_token

    per_item = flops_per_token(count_params(w.model), training=job["train"])
    counted = batch_count(w)
    metrics = StepMetrics(flops_per_token=per_item, flops_per_sample=per_item, peak=job.get("peak"), devices=world,
                          log=None)
    return metrics, counted


def step_suffix(rec: Any) -> str:
    """The rank-0 progress line's metrics: ``  1,234 tps  memory 1.25 GiB  mfu 0.0512%``."""
    out = ""
    if rec.per_device is not None:
        out += f"  {round(rec.per_device):,} {rec.unit}"
    if rec.memory is not None:
        out += f"  memory {rec.memory / 1024 ** 3:.2f} GiB"
    if rec.mfu is not None:
        out += f"  mfu {'~' if rec.rough else ''}{100 * rec.mfu:.3g}%"
    return out


@contextlib.contextmanager
def compile_progress(rank: int, what: str, stream: TextIO | None = None) -> Iterator[None]:
    """A rich spinner with ``what`` on rank 0 while the block runs, only when ``stream`` (stdout) is
    a terminal: CI logs and pipes get no control characters and no extra line."""
    stream = stream if stream is not None else sys.stdout
    if rank != 0 or not getattr(stream, "isatty", lambda: False)():
        yield
        return
    from rich.console import Console
    from rich.text import Text

    console = Console(file=stream, force_terminal=True, markup=False, highlight=False, emoji=False)
    with console.status(Text(f"[rank 0] {what} ..."), spinner="dots"):   # (Text: "[rank 0]" is no markup)
        yield
