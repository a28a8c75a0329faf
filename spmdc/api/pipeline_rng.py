"""Random numbers in pipeline stages, equal to one device's: each stage draws at its place in the model's order.

    rng = StageRandomness(split, stage=1, device=torch.device("cpu"))   # refuses an order stages cannot keep
    rng.begin(n_micro)     # at the start of a step: where each micro-batch's draws of this stage begin
    rng.enter(j)           # before this stage's forward of micro-batch j, and before its backward (recompute)
    rng.end()              # after the step: the generator as one device leaves it

The single-device reference of a pipelined step is the model run on the same micro-batches one
after the other (a gradient-accumulation loop): micro-batch 0 draws stage 0's masks, then stage
1's, ..., then micro-batch 1 draws. With ``rng="eager"`` every program draws exactly what eager
PyTorch draws from the default generator for the same op and shape, so a stage's forward of
micro-batch ``j`` gives one device's masks when the generator starts where one device's would:
after every draw of micro-batches ``< j`` and of the earlier stages of ``j``. Every rank finds
those states by replaying the model's random ops (each on zeros of its operand's shape: the
generator advances exactly as the op advances it; no model computation) at the start of the
step; it sets the state before each forward, and before the backward, whose recomputed forward
thus draws the very masks the forward used. Every rank ends the step with the generator one
device has after the whole batch, so the next step (and anything the user draws) continues alike.

Cost: each rank draws the random numbers of every stage once more per step (a dropout mask per
dropout of the model), nothing when the model has no random op. Refused: a model whose random
ops do not run stage after stage in the model's order (a stage's draw between two of an earlier
stage's), which no per-stage program can reproduce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from spmdc.frontend.stages import ORDER_META, StageSplit, random_nodes


@dataclass(frozen=True)
class Draw:
    """One random op of the model: its stage, its place in the model's order, how to replay it."""

    stage: int
    order: int
    what: str
    replay: Callable[[torch.device], Any]


def _zeros_like_meta(node: Any) -> Callable[[torch.device], Any]:
    val = node.meta.get("val")
    if val is None or not isinstance(val, torch.Tensor):
        raise NotImplementedError(f"random op input '{node.name}' has no recorded shape: its draw cannot be replayed")
    shape, dtype = tuple(val.shape), val.dtype
    return lambda device: torch.zeros(shape, dtype=dtype, device=device)


def _replayer(node: Any) -> Callable[[torch.device], Any]:
    """Call ``node``'s op with its tensor operands replaced by zeros of their shapes."""
    def arg(a: Any) -> Callable[[torch.device], Any]:
        if isinstance(a, torch.fx.Node):
            return _zeros_like_meta(a)
        if isinstance(a, (list, tuple)):
            parts = [arg(x) for x in a]
            return lambda device: type(a)(p(device) for p in parts)
        return lambda device: a

    args = [arg(a) for a in node.args]
    kwargs = {k: arg(v) for k, v in node.kwargs.items()}
    target = node.target

    def run(device: torch.device) -> Any:
        with torch.no_grad():
            return target(*[a(device) for a in args], **{k: v(device) for k, v in kwargs.items()})
    return run


def model_draws(split: StageSplit) -> list[Draw]:
    """Every random op of every stage, in the model's order; refused when the stages would draw
    out of that order."""
    draws = []
    for s in split.stages:
        for node, what in random_nodes(s.module):
            draws.append(Draw(s.index, int(node.meta.get(ORDER_META, -1)), what, _replayer(node)))
    if any(d.order < 0 for d in draws):
        raise NotImplementedError("a random op of a pipeline stage lost its place in the model's order")
    draws.sort(key=lambda d: d.order)
    for a, b in zip(draws, draws[1:]):
        if b.stage < a.stage:
            raise NotImplementedError(
                f"the model draws random numbers for stage {b.stage} ({b.what}) after stage {a.stage} drew ({a.what}): "
                "a pipeline stage draws all of its random numbers in its own forward, so the masks would differ from "
                "one device's; cut the stages so that random ops run stage after stage")
    return draws


class StageRandomness:
    """This rank's stage's generator states for each micro-batch of a step (see the module doc)."""

    def __init__(self, split: StageSplit, stage: int, device: torch.device):
        self.stage, self.device = stage, device
        self.draws = model_draws(split)
        self._states: list[Any] = []
        self._final: Any = None

    @property
    def active(self) -> bool:
        """Whether the model draws anything (else every call is free)."""
        return bool(self.draws)

    def _get(self) -> Any:
        if self.device.type == "cuda":
            return torch.cuda.get_rng_state(self.device)
        return torch.get_rng_state()

    def _set(self, state: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state, self.device)
        else:
            torch.set_rng_state(state)

    def begin(self, n_micro: int) -> None:
        """Replay the whole step's draws: where this stage's draws of each micro-batch begin."""
        self._states = []
        if not self.active:
            return
        start = self._get()
        for _ in range(n_micro):
            mine = None
            for d in self.draws:
                if d.stage == self.stage and mine is None:
                    mine = self._get()
                elif d.stage > self.stage and mine is None:
                    mine = self._get()   # no draw of its own: nothing to position, but keep one per micro-batch
                d.replay(self.device)
            self._states.append(mine if mine is not None else self._get())
        self._final = self._get()
        self._set(start)

    def enter(self, micro: int) -> None:
        """Before this stage's forward (or backward) of micro-batch ``micro`` of the step."""
        if self.active:
            self._set(self._states[micro])

    def end(self) -> None:
        """After the step: the generator where one device leaves it after the whole batch."""
        if self.active:
            self._set(self._final)
