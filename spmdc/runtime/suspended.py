"""A program paused at its ``func.suspend``: the forward half has run, the backward half waits.

    paused = run.start(local_args)          # runs up to func.suspend (None where a resumed input goes)
    paused.early                            # {result index: local value}: the model outputs, buffer updates
    outs = paused.resume([g_local])         # the output gradients in; every result of the program out

The first half's values the second half reads stay alive in between (they are the generator's
locals): the saved activations (:mod:`spmdc.passes.suspend_for_backward`). A program resumes once;
``start`` again (the same inputs, the random generators as they were) to run it a second time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any


def suspend_results(module: Any) -> list[int] | None:
    """The result indices ``@main``'s ``func.suspend`` hands back early, or None when it has none."""
    from spmdc.dialects.func import FuncOp, SuspendOp

    for op in module.body.ops:
        if isinstance(op, FuncOp) and op.sym_name == "main":
            sus = next((o for o in op.body.ops if isinstance(o, SuspendOp)), None)
            return None if sus is None else [a.value for a in sus.attributes["results"]]  # type: ignore[attr-defined]
    return None


@dataclass
class Paused:
    """A started program (see the module doc)."""

    gen: Generator[list[Any], list[Any], list[Any]]
    context: Callable[[], Any]            # what every half runs under (no grad, the rank's device)
    indices: list[int]                    # the function's results that ``early`` holds, in order
    early: dict[int, Any] = field(default_factory=dict)
    done: bool = False

    @classmethod
    def start(cls, gen: Generator[list[Any], list[Any], list[Any]], indices: Sequence[int],
              context: Callable[[], Any] = contextlib.nullcontext) -> Paused:
        p = cls(gen, context, list(indices))
        with context():
            try:
                values = next(gen)
            except StopIteration:
                raise RuntimeError("the program has no func.suspend: run it whole") from None
        if len(values) != len(p.indices):
            raise RuntimeError(f"func.suspend handed back {len(values)} values, its 'results' name {len(p.indices)}")
        p.early = dict(zip(p.indices, values))
        return p

    def resume(self, values: Sequence[Any]) -> list[Any]:
        """Run the second half with ``values`` (the suspension's results); every result of the program."""
        if self.done:
            raise RuntimeError("this program run was resumed already (start it again to rerun it)")
        self.done = True
        with self.context():
            try:
                self.gen.send(list(values))
            except StopIteration as stop:
                return list(stop.value)
        raise RuntimeError("the program suspended a second time")


def run_whole(gen_or_list: Any) -> list[Any]:
    """A program's results when it must not suspend (``RankRunner.__call__``)."""
    if isinstance(gen_or_list, Generator):
        gen_or_list.close()
        raise RuntimeError("this program suspends before its backward (func.suspend): run it with start() and "
                           "resume()")
    return list(gen_or_list)
