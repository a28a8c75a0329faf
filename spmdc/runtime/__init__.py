"""Runtime: the reference interpreter (one device) and the per-rank executor.

``interpret`` is imported lazily so that ``import spmdc.runtime`` stays cheap.
"""

from __future__ import annotations

from typing import Any


def interpret(module: Any, inputs: Any, func: str = "main") -> Any:
    """Run ``func`` of ``module`` on one device with torch eager ops (see interpreter.py)."""
    from spmdc.runtime.interpreter import interpret as _interpret

    return _interpret(module, inputs, func)


__all__ = ["interpret"]
