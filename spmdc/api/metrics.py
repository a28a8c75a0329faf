"""Per-step training metrics as torchtitan prints them: loss, step time, tokens/s, peak memory, MFU.

    metrics = spmdc.StepMetrics(flops_per_token=spmdc.flops_per_token(count_params(model)),
                                peak="h100", devices=world)
    for x, y in loader:
        metrics.start()
        loss = loss_fn(cm(x), y); loss.backward(); opt.step(); opt.zero_grad()
        metrics.stop(loss, tokens=x.numel() * replicas)   # the tokens of the whole job's step
    # step:  1  loss:  4.8520  time: 12.3ms  memory:  1.25GiB(1.31%)  tps: 20,512  tflops: 0.49  mfu: 0.05%

or ``with metrics.timed(tokens=n) as t: ...; t.loss = loss``. No collective is issued: the loss is
what the caller passes (average it over the ranks first for a job-wide value), tokens and samples
count the whole job's step, and the rates printed are **per device** (the count divided by the
step time and by ``devices``), as torchtitan's ``tps``.

* **Memory**: on CUDA ``torch.cuda.max_memory_allocated`` since :meth:`StepMetrics.start` (which
  resets the peak), GiB and % of the device's total memory. On CPU no peak is measured cheaply
  (:func:`spmdc.runtime.memory.measure_peak` runs torch.profiler, which costs far more than a step),
  so it reads ``n/a``.
* **MFU** = model FLOPs per token × tokens/s per device / the device's peak FLOP/s. The model's
  FLOPs per token are estimated from its parameter count (:func:`flops_per_token`: 6·N training,
  2·N forward, plus the attention term when layers, heads, head size and sequence length are
  given; embeddings excluded, as torchtitan counts). The peak comes from :data:`DEVICE_PEAKS`
  (bf16 dense, per device) by name (``"h100"``, ``"a100-40gb"``, ``"mi300x"``, ...), a number of
  FLOP/s, the environment variable ``SPMDC_PEAK_FLOPS`` (a number or a name), or else the CUDA
  device's own name (:func:`detect_device_peak`); with none of these (a CPU), no MFU is printed.
  The ``cpu`` entry is a rough guess, marked ``~`` in the line.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

GIB = 1024 ** 3
ENV_PEAK = "SPMDC_PEAK_FLOPS"

__all__ = ["DEVICE_PEAKS", "DevicePeak", "StepMetrics", "StepRecord", "count_params", "detect_device_peak",
           "device_peak", "flops_per_token", "mfu", "resolve_peak"]


@dataclass(frozen=True)
class DevicePeak:
    """A device's peak FLOP/s, what MFU divides by:
    ``DevicePeak("h100-sxm", 989e12, "NVIDIA H100 SXM, bf16 dense")``."""

    name: str
    flops: float          # FLOP/s of one device
    description: str
    rough: bool = False   # a guess, not a data-sheet figure


# bf16 dense tensor-core peaks from the vendors' data sheets (with sparsity they double), per device
DEVICE_PEAKS: dict[str, DevicePeak] = {p.name: p for p in (
    DevicePeak("h100-sxm", 989e12, "NVIDIA H100 SXM, bf16 dense"),
    DevicePeak("h100-pcie", 756e12, "NVIDIA H100 PCIe, bf16 dense"),
    DevicePeak("h100-nvl", 835e12, "NVIDIA H100 NVL, bf16 dense"),
    DevicePeak("h200", 989e12, "NVIDIA H200, bf16 dense"),
    DevicePeak("a100-80gb", 312e12, "NVIDIA A100 80GB, bf16 dense"),
    DevicePeak("a100-40gb", 312e12, "NVIDIA A100 40GB, bf16 dense"),
    DevicePeak("l4", 121e12, "NVIDIA L4, bf16 dense"),
    DevicePeak("mi300x", 1307e12, "AMD Instinct MI300X, bf16 dense"),
    DevicePeak("cpu", 1e12, "a CPU (a rough guess for a many-core server in float32)", True),
)}
ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb"}


def device_peak(name: str) -> DevicePeak:
    """The table's entry for ``name`` (case and ``_``/space insensitive; ``h100`` is the SXM part,
    ``a100`` the 80GB one). An unknown name is refused listing the nearest ones."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key in DEVICE_PEAKS:
        return DEVICE_PEAKS[key]
    known = sorted(DEVICE_PEAKS) + sorted(ALIASES)
    near = difflib.get_close_matches(key, known, n=3)
    raise ValueError(f"unknown device {name!r} for the peak FLOP/s" + (f" (did you mean {', '.join(map(repr, near))}?)"
                     if near else "") + f"; known: {', '.join(known)}; or give a number of FLOP/s per device")


def detect_device_peak(device: Any = None) -> DevicePeak | None:
    """The entry of the CUDA (or ROCm) device's name (``torch.cuda.get_device_name``), None on a CPU
    or a device the table does not know."""
    import torch

    dev = torch.device(device) if device is not None else None
    if (dev is not None and dev.type != "cuda") or not torch.cuda.is_available():
        return None
    return peak_of_device_name(torch.cuda.get_device_name(dev))


def peak_of_device_name(name: str) -> DevicePeak | None:
    """``"NVIDIA H100 80GB HBM3"`` -> h100-sxm, ``"NVIDIA A100-SXM4-40GB"`` -> a100-40gb, ...; None if unknown."""
    n = name.upper()
    if "H200" in n:
        return DEVICE_PEAKS["h200"]
    if "H100" in n:
        return DEVICE_PEAKS["h100-pcie" if "PCIE" in n else "h100-nvl" if "NVL" in n else "h100-sxm"]
    if "A100" in n:
        return DEVICE_PEAKS["a100-40gb" if "40GB" in n else "a100-80gb"]
    if "MI300X" in n:
        return DEVICE_PEAKS["mi300x"]
    if any(w == "L4" for w in n.replace("-", " ").split()):
        return DEVICE_PEAKS["l4"]
    return None


def resolve_peak(peak: float | str | DevicePeak | None = None, device: Any = None) -> DevicePeak | None:
    """The peak FLOP/s per device to compute MFU against: ``peak`` (a number, a number as text, a
    table name or a :class:`DevicePeak`), else ``$SPMDC_PEAK_FLOPS`` (a number or a name), else the
    CUDA device's entry, else None (no MFU)."""
    if isinstance(peak, DevicePeak):
        return peak
    source = "the given peak"
    if peak is None and os.environ.get(ENV_PEAK, "").strip():
        peak, source = os.environ[ENV_PEAK].strip(), f"${ENV_PEAK}"
    if peak is None:
        return detect_device_peak(device)
    if isinstance(peak, str):
        try:
            peak = float(peak)
        except ValueError:
            return device_peak(peak)
    value = float(peak)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"peak FLOP/s ({source}) must be a positive number, got {peak!r}")
    return DevicePeak(f"{value:.3g} FLOP/s", value, source)


def count_params(model: Any, *, embeddings: bool = False) -> int:
    """The model's parameters, each tensor once (tied weights once), global sizes (a DTensor's
    ``numel`` is the whole tensor's; meta tensors count). ``embeddings=False`` (torchtitan's count)
    leaves out weights only ``nn.Embedding`` modules hold: a lookup costs no multiply; a tied LM
    head's weight, also held by a Linear, is counted."""
    import torch.nn as nn

    in_embedding: set[int] = set()
    elsewhere: set[int] = set()
    for m in model.modules():
        for p in m.parameters(recurse=False):
            (in_embedding if isinstance(m, nn.Embedding) else elsewhere).add(id(p))
    seen: set[int] = set()
    total = 0
    for p in model.parameters():   # (each tensor once)
        if id(p) in seen or (not embeddings and id(p) in in_embedding and id(p) not in elsewhere):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def flops_per_token(n_params: int, *, training: bool = True, n_layers: int | None = None,
                    n_heads: int | None = None, head_dim: int | None = None, seq_len: int | None = None) -> float:
    """Model FLOPs per token (or per sample of a model that uses each weight once per sample): 2·N
    for the forward (a multiply and an add per weight), 6·N for training (the backward twice the
    forward). With ``n_layers``, ``n_heads``, ``head_dim`` and ``seq_len`` all given, plus the
    attention scores and their weighted sum, 4·l·h·d·t forward (12·l·h·d·t training), as torchtitan
    counts (causal masking not discounted)::

        flops_per_token(1_000_000)                                               # 6e6
        flops_per_token(1_000_000, n_layers=2, n_heads=4, head_dim=8, seq_len=16)   # 6e6 + 12*2*4*8*16
    """
    if n_params < 0:
        raise ValueError(f"flops_per_token: n_params must be >= 0, got {n_params}")
    attn = (n_layers, n_heads, head_dim, seq_len)
    if any(a is not None for a in attn) and not all(a is not None for a in attn):
        raise ValueError("flops_per_token: the attention term needs n_layers, n_heads, head_dim and seq_len together")
    factor = 3 if training else 1
    flops = 2.0 * factor * n_params
    if all(a is not None for a in attn):
        flops += 4.0 * factor * n_layers * n_heads * head_dim * seq_len   # type: ignore[operator]
    return flops


def mfu(flops_per_item: float, items_per_s_per_device: float, peak_flops: float) -> float:
    """Model FLOPs utilization as a fraction: achieved model FLOP/s per device over its peak."""
    if peak_flops <= 0:
        raise ValueError(f"mfu: peak_flops must be > 0, got {peak_flops}")
    return flops_per_item * items_per_s_per_device / peak_flops


@dataclass
class StepRecord:
    """One step as :class:`StepMetrics` measured it. Rates are per device; ``memory`` None: not measured."""

    step: int
    loss: float | None
    seconds: float
    tokens: int | None = None       # the whole job's step
    samples: int | None = None
    per_device: float | None = None   # tokens/s per device (samples/s without tokens)
    unit: str = "tps"                 # "tps" | "sps"
    memory: int | None = None         # peak bytes allocated during the step (CUDA)
    memory_pct: float | None = None   # of the device's total memory
    tflops: float | None = None       # achieved model TFLOP/s per device
    mfu: float | None = None          # fraction of the peak
    rough: bool = False               # the peak is a guess
    grad_norm: float | None = None

    def line(self) -> str:
        """torchtitan's log line: ``step:  3  loss:  4.1234  time: 12.3ms  memory:  1.25GiB(1.31%)
        tps: 2,345  tflops: 0.12  mfu: 0.01%``."""
        parts = [f"step: {self.step:2}"]
        if self.loss is not None:
            parts.append(f"loss: {self.loss:7.4f}")
        if self.grad_norm is not None:
            parts.append(f"grad_norm: {self.grad_norm:7.4f}")
        parts.append(f"time: {1000 * self.seconds:.1f}ms")
        parts.append("memory: n/a" if self.memory is None else
                     f"memory: {self.memory / GIB:5.2f}GiB({self.memory_pct or 0:.2f}%)")
        if self.per_device is not None:
            parts.append(f"{self.unit}: {round(self.per_device):,}")
        if self.tflops is not None:
            parts.append(f"tflops: {self.tflops:,.2f}")
        if self.mfu is not None:
            parts.append(f"mfu: {'~' if self.rough else ''}{100 * self.mfu:.2f}%")
        return "  ".join(parts)


class _Memory:
    """The step's peak allocation on a CUDA device (nothing on others)."""

    def __init__(self, device: Any):
        import torch

        self.torch = torch
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def reset(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def peak(self) -> tuple[int | None, float | None]:
        if not self.cuda:
            return None, None
        peak = int(self.torch.cuda.max_memory_allocated(self.device))
        total = self.torch.cuda.get_device_properties(self.device).total_memory
        return peak, 100.0 * peak / total if total else None


@dataclass
class _Pending:
    """What a ``with metrics.timed(...) as t`` block sets: ``t.loss`` (and ``t.grad_norm``)."""

    loss: Any = None
    grad_norm: Any = None
    record: StepRecord | None = None


@dataclass
class StepMetrics:
    """Per-step metrics of a training loop (see the module doc).

    ``flops_per_token``: model FLOPs per counted token (:func:`flops_per_token`), or
    ``flops_per_sample`` per sample when steps count samples; ``peak``: the device's peak FLOP/s
    (:func:`resolve_peak`: a number, a table name, None for ``$SPMDC_PEAK_FLOPS`` or the CUDA
    device); ``devices``: the devices the step runs on (rates are per device); ``log``: called
    with each ``log_every``-th step's line (None: silent; :attr:`history` keeps every record);
    ``step``: the last step's number (a resumed run sets its start)."""

    flops_per_token: float | None = None
    flops_per_sample: float | None = None
    peak: float | str | DevicePeak | None = None
    devices: int = 1
    device: Any = None
    log: Callable[[str], Any] | None = print
    log_every: int = 1
    step: int = 0
    history: list[StepRecord] = field(default_factory=list)
    _t0: float | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.devices < 1:
            raise ValueError(f"StepMetrics: devices must be >= 1, got {self.devices}")
        self._memory = _Memory(self.device)
        self.peak = resolve_peak(self.peak, self._memory.device)

    @property
    def peak_flops(self) -> float | None:
        return self.peak.flops if isinstance(self.peak, DevicePeak) else None

    def start(self) -> None:
        """Before the step: the clock starts, the device's peak memory is reset."""
        self._memory.reset()
        self._t0 = time.perf_counter()

    def stop(self, loss: Any = None, *, tokens: int | None = None, samples: int | None = None,
             grad_norm: Any = None) -> StepRecord:
        """After the step: its record (also appended to :attr:`history`, and logged). ``loss`` and
        ``grad_norm`` may be tensors (read here, which waits for the device); ``tokens`` /
        ``samples``: what the whole job's step processed."""
        if self._t0 is None:
            raise RuntimeError("StepMetrics.stop() without start()")
        loss_value = None if loss is None else float(loss.detach() if hasattr(loss, "detach") else loss)
        norm = None if grad_norm is None else float(grad_norm.detach() if hasattr(grad_norm, "detach") else grad_norm)
        self._memory.sync()
        seconds = time.perf_counter() - self._t0
        self._t0 = None
        self.step += 1
        rec = StepRecord(self.step, loss_value, seconds, tokens, samples, grad_norm=norm)
        count, per_item, rec.unit = (tokens, self.flops_per_token, "tps") if tokens is not None else \
            (samples, self.flops_per_sample, "sps")
        if count is not None and seconds > 0:
            rec.per_device = count / seconds / self.devices
            if per_item is not None:
                rec.tflops = per_item * rec.per_device / 1e12
                if self.peak_flops:
                    rec.mfu = mfu(per_item, rec.per_device, self.peak_flops)
                    rec.rough = self.peak.rough   # type: ignore[union-attr]
        rec.memory, rec.memory_pct = self._memory.peak()
        self.history.append(rec)
        if self.log is not None and self.step % self.log_every == 0:
            self.log(rec.line())
        return rec

    @contextlib.contextmanager
    def timed(self, *, tokens: int | None = None, samples: int | None = None) -> Iterator[_Pending]:
        """``with metrics.timed(tokens=n) as t: ...; t.loss = loss`` — :meth:`start` and :meth:`stop`
        around the block (``t.record`` is the step's record afterwards)."""
        pending = _Pending()
        self.start()
        yield pending
        pending.record = self.stop(pending.loss, tokens=tokens, samples=samples, grad_norm=pending.grad_norm)

    def describe(self) -> str:
        """What MFU is computed against, in one line (empty without a peak)."""
        if not isinstance(self.peak, DevicePeak):
            return ""
        return f"MFU against {self.peak.description}: {self.peak.flops / 1e12:,.1f} TFLOP/s per device"
