"""Pause Python's cyclic garbage collector while the compiler builds and rewrites IR.

An IR module is millions of small objects linked in cycles (ops, values, uses, blocks). Each
full collection the interpreter triggers while passes allocate walks all of them, and the number
of collections grows with the work done, so with the collector on every pass runs in
time ~ ops^1.3 (measured on a Llama-3 8B step: sharding 5.4 s at 32 layers with it, 3.8 s
without; bench/sharding_scale.py). Paused, passes are linear in ops; whatever became garbage
is collected by the ordinary collector once it runs again::

    with gc_paused():
        PassManager(passes).run(module)

Nested uses keep the outermost caller's state; a collector the caller already disabled stays so.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off inside the block, restored as it was afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
