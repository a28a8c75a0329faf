"""Lazy registry of dialects: dialect name → module that defines its ops.

A dialect module exposes ``DIALECT = Dialect("tensor", [AddOp, ...])``; it is
imported the first time one of its ops is looked up, so importing :mod:`spmdc.ir`
has no side effects.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from spmdc.ir.core import Operation

DIALECT_MODULES: dict[str, str] = {
    "builtin": "spmdc.dialects.builtin",
    "func": "spmdc.dialects.func",
    "tensor": "spmdc.dialects.tensor",
    "shard": "spmdc.dialects.shard",
    "comm": "spmdc.dialects.comm",
    "kernel": "spmdc.dialects.kernel",
}


@dataclass
class Dialect:
    name: str
    ops: list[type[Operation]] = field(default_factory=list)

    def op_map(self) -> dict[str, type[Operation]]:
        return {op.name: op for op in self.ops}


_loaded: dict[str, Dialect] = {}


def get_dialect(name: str) -> Dialect | None:
    if name not in _loaded:
        module = DIALECT_MODULES.get(name)
        if module is None:
            return None
        _loaded[name] = importlib.import_module(module).DIALECT
    return _loaded[name]


def lookup_op(full_name: str) -> type[Operation] | None:
    """The class of op ``full_name`` (e.g. ``"tensor.add"``), or None if unknown."""
    dialect, _, _ = full_name.partition(".")
    d = get_dialect(dialect)
    return d.op_map().get(full_name) if d else None


def all_ops() -> list[type[Operation]]:
    return [op for name in DIALECT_MODULES for op in get_dialect(name).ops]  # type: ignore[union-attr]
