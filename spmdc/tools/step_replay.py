"""``--check``'s step-by-step opinion under mixed precision: every step replayed by eager PyTorch
from the state the run itself had before it.

Over several steps of Adam at a high learning rate, low-precision training is chaotic: the
elements whose gradient is zero up to bf16 rounding move ``±lr`` whoever computes them, and
the parameters of two correct runs that round in another order part further every step
(HF Llama tiny, batch 8, AdamW at lr 0.05 in bf16: eager bf16 with the batch whole, in 2, 4 or
8 pieces ends step 4 at losses 5.25-5.32, spmdc on dp=4 at 4.92, on one rank at 5.10). Comparing
the trajectories then says nothing about the run. So each rank records the whole state before
every step (rank 0 writes it, ``run_K.pt`` in a temporary folder), and ``--check`` asks, step by
step: from the run's state before step K, does eager PyTorch (the same batch, seed, optimizer,
micro-batches and clipping; its own optimizer state, driven by its own gradients at the run's
parameters) compute the loss the run reported, and an update that lands where the run's did, up
to the rounding noise eager float32 and eager low precision with the batch in the ranks' pieces
have from the same state (:func:`spmdc.tools.reference.judge_by_float32`)? A wrong gradient, a
wrong optimizer update or another dropout mask shows at the step it happens; rounding amplified
by training does not. ::

    trail = StateTrail.create()          # the CLI, when --check trains under mixed precision
    trail.record(module, k, rank)        # every rank, before step k (a collective)
    ok = judge_step_by_step(console, cfg, seed, settings, before, r0, rtol, atol, pieces, trail)
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

__all__ = ["StateTrail", "judge_step_by_step"]

_INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class StateTrail:
    """The folder holding the run's state before each step (``run_K.pt``, written by rank 0)."""

    folder: str

    @classmethod
    def create(cls) -> StateTrail:
        return cls(tempfile.mkdtemp(prefix="spmdc-check-states-"))

    def path(self, who: str, k: int) -> str:
        return os.path.join(self.folder, f"{who}_{k}.pt")

    def record(self, module: Any, k: int, rank: int) -> None:
        """The state of ``module`` (any layout kind) before step ``k``: a collective every rank
        calls; rank 0 writes it, unless the disk would be left with less than twice its size
        (the trail is then marked incomplete and ``--check`` says so)."""
        import torch

        state = module.full_state_dict()
        if rank != 0 or os.path.exists(os.path.join(self.folder, _INCOMPLETE)):
            return
        size = sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))
        if shutil.disk_usage(self.folder).free < 2 * size + (64 << 20):
            open(os.path.join(self.folder, _INCOMPLETE), "w").close()
            return
        torch.save(state, self.path("run", k))

    def complete(self, steps: int) -> bool:
        return not os.path.exists(os.path.join(self.folder, _INCOMPLETE)) and \
            all(os.path.exists(self.path("run", k)) for k in range(steps))

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class _Replay:
    """The hooks :func:`spmdc.tools.reference.eager_reference` calls around each compared step:
    the run's state loaded into the eager model before it; the loss and state after it kept on
    disk (``keep``) or handed to ``judge``."""

    def __init__(self, trail: StateTrail, keep: str | None = None,
                 judge: Callable[[int, dict[str, Any]], None] | None = None):
        self.trail, self.keep, self.judge = trail, keep, judge

    def before(self, k: int, model: Any) -> None:
        import torch

        state = torch.load(self.trail.path("run", k))
        with torch.no_grad():
            for name, value in model.state_dict().items():   # in place: the optimizer holds these tensors
                if name in state:
                    value.copy_(state[name])

    def after(self, k: int, loss: float, model: Any) -> None:
        import torch

        result = {"losses": [loss], "state": {n: v.detach().clone() for n, v in model.state_dict().items()}}
        if self.keep:
            torch.save(result, self.trail.path(self.keep, k))
        if self.judge:
            self.judge(k, result)


@dataclass
class _StepVerdict:
    step: int
    loss_run: float
    loss_eager: float
    loss_ok: bool
    noise: list[str] = dataclasses.field(default_factory=list)   # parameters over tolerance, passed as noise
    bad: list[str] = dataclasses.field(default_factory=list)     # parameters over tolerance beyond noise


def judge_step_by_step(console: Any, cfg: Any, seed: int, settings: Any, before: Any, r0: dict[str, Any],
                       rtol: float, atol: float, pieces: int, trail: StateTrail) -> bool:
    """Every compared step replayed by eager PyTorch from the run's state before it (see the
    module doc); prints one row per step and returns whether every step matched."""
    import torch

    from spmdc.tools.reference import compare, eager_reference, judge_by_float32
    from spmdc.tools.run_cmd import workload_args

    steps = len(r0["losses"])
    if not trail.complete(steps) or r0.get("state") is None:
        console.print(Text("--check: the run's states before each step were not all recorded (disk space), so "
                           "its steps cannot be replayed one by one", style="yellow"))
        return False
    args = workload_args(cfg)

    def replay(s: Any, hooks: _Replay) -> None:
        eager_reference(cfg.workload, steps, True, seed, s, before, workload_args=args, replay=hooks)

    def run_after(k: int) -> dict[str, Any]:
        state = torch.load(trail.path("run", k + 1)) if k + 1 < steps else r0["state"]
        return {"losses": [r0["losses"][k]], "state": state}

    replay(settings, _Replay(trail, keep="low"))
    split = None
    if pieces > 1:
        try:
            replay(dataclasses.replace(settings, grad_accum=settings.grad_accum * pieces), _Replay(trail, keep="split"))
            split = "split"
        except ValueError:   # (a batch the pieces do not divide evenly: not replayed)
            split = None
    verdicts: list[_StepVerdict] = []

    def judge(k: int, fp32: dict[str, Any]) -> None:
        low, got = torch.load(trail.path("low", k)), run_after(k)
        ok, rows = compare(low, got, rtol, atol)
        if not ok:
            judge_by_float32(rows, low, fp32, got, rtol, atol, split and torch.load(trail.path(split, k)))
        v = _StepVerdict(k, got["losses"][0], low["losses"][0], rows[0].ok)
        v.noise = [r.name for r in rows[1:] if r.ok and r.noise]
        v.bad = [f"{r.name} ({r.noise or f'{r.max_abs:.1e} off'})" for r in rows[1:] if not r.ok]
        verdicts.append(v)

    replay(dataclasses.replace(settings, mixed_precision=None), _Replay(trail, judge=judge))
    _print(console, cfg, verdicts, r0.get("start_step", 0), pieces if split else 1)
    return all(v.loss_ok and not v.bad for v in verdicts)


def _print(console: Any, cfg: Any, verdicts: list[_StepVerdict], start: int, pieces: int) -> None:
    table = Table(title=f"--check step by step: eager {cfg.mixed_precision or 'PyTorch'} from the run's state "
                        "before each step")
    for col in ("step", "loss (run)", "loss (eager, same state)", "parameters over tolerance", "ok"):
        table.add_column(col, justify="left" if col == "parameters over tolerance" else "right")
    for v in verdicts:
        over = ", ".join(v.bad) if v.bad else (f"{len(v.noise)} as noise" if v.noise else "none")
        good = v.loss_ok and not v.bad
        table.add_row(str(start + v.step + 1), f"{v.loss_run:.6f}", f"{v.loss_eager:.6f}", over,
                      "yes" if good else Text("NO", style="red"))
    console.print(table)
    split = f" or eager with the batch in the ranks' {pieces} pieces" if pieces > 1 else ""
    console.print("every step starts from the run's own parameters: its loss must be eager's there (within "
                  "tolerance), its update eager's up to the noise eager float32" + split + " has from the same "
                  "state (elements over tolerance within 2x + 2); the trajectories part by rounding amplified over "
                  "the steps, not by what one step computes")
