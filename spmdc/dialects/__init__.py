"""The dialects of spmdc: func, tensor, shard, comm, kernel, pipe (``builtin.module`` is in the core IR).

Each is a module (or package) exposing ``DIALECT``; :func:`register_all` makes them known to
:mod:`spmdc.ir.registry` by name, and the registry imports one the first time it is needed.
``import spmdc`` calls it, so every entry point (the tools, the Python API) sees them.
"""

from __future__ import annotations

DIALECT_MODULES: dict[str, str] = {
    "func": "spmdc.dialects.func",
    "tensor": "spmdc.dialects.tensor",
    "shard": "spmdc.dialects.shard",
    "comm": "spmdc.dialects.comm",
    "kernel": "spmdc.dialects.kernel",
    "pipe": "spmdc.dialects.pipe",
}


def register_all() -> None:
    """Register spmdc's dialects (lazily imported) with the IR registry."""
    from spmdc.ir.registry import register_dialect

    for name, module in DIALECT_MODULES.items():
        register_dialect(name, module)
