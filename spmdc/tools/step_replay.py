"""``--check``'s step-by-step opinion under mixed precision: every step replayed by eager PyTorch
from the state the run itself had before it.

Over several steps of Adam at a high learning rate, low-precision training is chaotic: the
elements whose gradient is zero up to bf16 rounding move ``±lr`` whoever computes them, and
the parameters of two correct runs that round in another order part further every step
(HF Llama tiny, batch 8, AdamW at lr 0.05 in bf16: eager bf16 with the batch whole, in 2, 4 or
8 pieces ends step 4 at losses 5.25-5.32, spmdc on dp=4 at 4.92, on one rank at 5.10). Comparing
the trajectories then says nothing about the run. So the ranks save the whole state before
every step (parameters and optimizer state: a checkpoint, ``run_K`` in a temporary folder), and
``--check`` asks, step by step: from the run's state before step K, does eager PyTorch (the same
batch, seed, micro-batches and clipping, the optimizer state loaded from the run's) compute the
loss the run reported, and an update that lands where the run's did, up to the rounding noise
eager float32 and eager low precision with the batch in the ranks' pieces have from the same
state (:func:`spmdc.tools.reference.judge_by_float32`)? A wrong gradient, a wrong optimizer update
or another dropout mask shows at the step it happens; rounding amplified by training does not. ::

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


@dataclass
class StateTrail:
    """The folder holding the run's state before each step: ``run_K``, a checkpoint
    (:meth:`CompiledModule.save <spmdc.api.compiled_module.CompiledModule.save>`: parameters and
    optimizer state, any layout kind), and the replays' results beside it."""

    folder: str
    stopped: bool = False   # (this rank's copy: a state was not recorded, nor are the next ones)

    @classmethod
    def create(cls) -> StateTrail | None:
        """A new folder; under torchrun every local rank names the same one (their launcher's
        process id), and a job over several nodes gets none (its ranks could not write one folder)."""
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return cls(tempfile.mkdtemp(prefix="spmdc-check-states-"))
        if os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]) != os.environ["WORLD_SIZE"]:
            return None
        folder = os.path.join(tempfile.gettempdir(), f"spmdc-check-states-{os.getppid()}-"
                                                     f"{os.environ.get('MASTER_PORT', '')}")
        os.makedirs(folder, exist_ok=True)
        return cls(folder)

    def path(self, who: str, k: int) -> str:
        return os.path.join(self.folder, f"{who}_{k}")

    def record(self, module: Any, k: int, rank: int) -> None:
        """The state of ``module`` before step ``k``: a collective every rank calls (a checkpoint);
        not written when the disk would keep less than twice its size free, nor when the module
        cannot be saved: the trail is then marked incomplete, with the reason, and ``--check`` says so."""
        import math

        from spmdc.runtime.checkpointing import agreed

        if self.stopped:
            return

        size = sum(4 * math.prod(shape) for _, _, shape in module.state_holdings().values())
        why = None
        if shutil.disk_usage(self.folder).free < 2 * 3 * size + (64 << 20):   # (parameters and two states each)
            why = f"less than twice the {3 * size:,} bytes of a state free on disk"
        try:
            agreed(module.checkpoint_view(), why)   # (every rank saves, or none)
            module.save(self.path("run", k))
        except Exception as e:  # noqa: BLE001 - whatever stops the save, the run goes on unjudged
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if why is not None:   # (every rank alike: the error was agreed)
            self.stopped = True
            if rank == 0:
                with open(os.path.join(self.folder, _INCOMPLETE), "w") as f:
                    f.write(why)

    def missing(self, steps: int) -> str | None:
        """Why the states of ``steps`` steps are not all there (None: they are)."""
        marker = os.path.join(self.folder, _INCOMPLETE)
        if os.path.exists(marker):
            with open(marker) as f:
                return f.read()
        gone = [k for k in range(steps) if not os.path.isdir(self.path("run", k))]
        return f"no state before step {gone[0] + 1}" if gone else None

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class _Replay:
    """The hooks :func:`spmdc.tools.reference.eager_reference` calls around each compared step:
    the run's state (parameters, buffers, optimizer state) loaded into the eager model and
    optimizer before it; the loss and state after it kept on disk (``keep``) or handed to ``judge``."""

    def __init__(self, trail: StateTrail, keep: str | None = None,
                 judge: Callable[[int, dict[str, Any]], None] | None = None):
        self.trail, self.keep, self.judge = trail, keep, judge

    def before(self, k: int, model: Any, optimizer: Any) -> None:
        import torch

        from spmdc.runtime.checkpointing import read_whole

        state, slots = read_whole(self.trail.path("run", k))
        with torch.no_grad():
            for name, value in model.state_dict().items():   # in place: the optimizer holds these tensors
                if name in state:
                    value.copy_(state[name])
        params = dict(model.named_parameters())
        optimizer.state.clear()
        for fqn, entries in slots.items():
            if fqn in params:
                optimizer.state[params[fqn]] = {s: v.clone() if isinstance(v, torch.Tensor) else v
                                                for s, v in entries.items()}

    def after(self, k: int, loss: float, model: Any) -> None:
        import torch

        result = {"losses": [loss], "state": {n: v.detach().clone() for n, v in model.state_dict().items()}}
        if self.keep:
            torch.save(result, self.trail.path(self.keep, k) + ".pt")
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

    from spmdc.runtime.checkpointing import read_whole
    from spmdc.tools.reference import compare, eager_reference, judge_by_float32
    from spmdc.tools.run_cmd import workload_args

    steps = len(r0["losses"])
    why = trail.missing(steps) if r0.get("state") is not None else "no final state"
    if why is not None:
        console.print(Text(f"--check: the run's state before each step was not recorded ({why}), so its steps "
                           "cannot be replayed one by one", style="yellow"))
        return False
    args = workload_args(cfg)

    def replay(s: Any, hooks: _Replay) -> None:
        eager_reference(cfg.workload, steps, True, seed, s, before, workload_args=args, replay=hooks)

    def run_after(k: int) -> dict[str, Any]:
        state = read_whole(trail.path("run", k + 1))[0] if k + 1 < steps else r0["state"]
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
        low, got = torch.load(trail.path("low", k) + ".pt"), run_after(k)
        ok, rows = compare(low, got, rtol, atol)
        if not ok:
            pieces = split and torch.load(trail.path(split, k) + ".pt")
            if not judge_by_float32(rows, low, fp32, got, rtol, atol, pieces):
                # spmdc rounds bf16 otherwise than eager (its own decompositions), independently: the
                # float32 step as the truth, is the run's step as close to it as eager bf16's is?
                _, truth = compare(fp32, got, rtol, atol)
                judge_by_float32(truth, fp32, low, got, rtol, atol, pieces)
                for r, t in zip(rows[1:], truth[1:]):   # (the loss stays judged against eager bf16's)
                    if not r.ok and t.ok:
                        r.ok, r.noise = True, f"{t.noise} vs float32"
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
