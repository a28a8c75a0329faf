"""Optimizers over this rank's parameter shards.

A gradient arrives in its parameter's storage layout, so an elementwise optimizer updates
each shard on its own and its state is sharded like the parameter. A spec is

* ``("sgd", {"lr": 0.1, "momentum": 0.9})`` or ``("adamw", {"lr": 1e-3, ...})`` (or just the name),
* :class:`Optimizer` (``Optimizer("adamw", lr=1e-3)``),
* a callable ``factory(local_params) -> torch.optim.Optimizer``; it must be elementwise
  (SGD, Adam, AdamW, RMSprop, ...), since each rank only sees its shards.

The named forms build ``torch.optim.SGD`` / ``torch.optim.AdamW``, so formulas and defaults
are torch's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OPTIMIZERS = ("sgd", "adamw")


@dataclass
class Optimizer:
    """A named optimizer and its torch.optim options: ``Optimizer("sgd", lr=0.1, momentum=0.9)``."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, options: dict[str, Any] | None = None, **kwargs: Any):
        self.name = name.lower()
        self.options = {**(options or {}), **kwargs}
        if self.name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer '{name}' (choices: {', '.join(OPTIMIZERS)}, "
                             "or pass a factory(params) -> torch.optim.Optimizer)")

    def build(self, params: list[Any]) -> Any:
        import torch

        cls = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[self.name]
        return cls(params, **self.options)


def make_optimizer(spec: Any, params: list[Any]) -> Any:
    """``spec`` (a name, ``(name, options)``, :class:`Optimizer` or factory) over ``params``."""
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = Optimizer(spec)
    elif isinstance(spec, (tuple, list)):
        if len(spec) != 2 or not isinstance(spec[0], str):
            raise TypeError(f"optimizer tuple must be (name, options), got {spec!r}")
        spec = Optimizer(spec[0], dict(spec[1] or {}))
    if isinstance(spec, Optimizer):
        return spec.build(params)
    if callable(spec):
        return spec(params)
    raise TypeError(f"optimizer must be a name, (name, options), spmdc Optimizer or a factory, got {spec!r}")
