"""Count the collectives generated code issues, as ``Collectives.run`` does for the interpreter.

    outs = fn(args, CountingComm(comm))     # comm.stats then holds the program's collectives
"""

from __future__ import annotations

from typing import Any

_METHODS = ("all_reduce", "all_gather", "all_slice", "reduce_scatter", "all_to_all", "all_gather_bucket",
            "reduce_scatter_bucket")


class CountingComm:
    """Forwards everything to ``comm``; each collective method also records into ``comm.stats``."""

    def __init__(self, comm: Any):
        self._comm = comm

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._comm, name)
        if name not in _METHODS:
            return target
        stats = self._comm.stats

        def call(x: Any, *args: Any) -> Any:
            xs = x if isinstance(x, list) else [x]  # bucketed collectives take a list
            stats.add("comm." + name, sum(t.numel() * t.element_size() for t in xs))
            return target(x, *args)
        return call
