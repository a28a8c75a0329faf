"""Independent pieces of a dry run computed in forked worker processes.

    results = forked_map(lambda k: compile_and_predict(split, k), range(4), jobs=2)
    # [f(0), f(1), f(2), f(3)]: at most 2 at a time, in the order given

A pipeline's stages are compiled and predicted independently of each other (``spmdc plan``): with
``jobs > 1`` each runs in a worker forked from this process (``multiprocessing``'s ``fork``
context) after the caller has built what they read (the model, its stage split), so only an index
goes to a worker and only its (small) result comes back pickled. ``jobs=1``, a single item or a
platform without ``fork`` computes them here, one after the other: the results are the same.

An exception in a worker is raised here, the worker's own when it can be pickled, else a
``RuntimeError`` with its type, message and traceback.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["available_cpus", "forked_map"]

_TASK: Callable[[Any], Any] | None = None   # what the forked workers run (inherited, never pickled)


def available_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # (not on Linux)
        return os.cpu_count() or 1


def _call(item: Any) -> tuple[str, Any]:
    try:
        return "ok", _TASK(item)
    except BaseException as e:  # noqa: BLE001  (sent back whole, raised in the parent)
        try:
            pickle.loads(pickle.dumps(e))
            return "error", e
        except Exception:  # noqa: BLE001
            return "error", RuntimeError(f"{type(e).__name__}: {e}\n{traceback.format_exc()}")


def _child_init() -> None:
    """In a forked worker: torch's CPU ops on one thread (the parent's OpenMP thread pool does not
    survive the fork, and the first parallel region in the child waits on it for ever: seen, an
    Adam step measured in a worker hung), and SIGTERM ends it (a handler the parent installed, e.g.
    torch.distributed.elastic's, would leave a worker blocked on the pool's queue alive for ever)."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def forked_map(fn: Callable[[Any], Any], items: Sequence[Any], jobs: int) -> list[Any]:
    """``[fn(x) for x in items]``, computed by up to ``jobs`` forked workers (see the module doc)."""
    global _TASK
    items = list(items)
    if jobs <= 1 or len(items) <= 1 or "fork" not in multiprocessing.get_all_start_methods() or _TASK is not None:
        return [fn(x) for x in items]   # (_TASK set: already in a worker, or nested: run here)
    _TASK = fn
    pool = multiprocessing.get_context("fork").Pool(min(jobs, len(items)), initializer=_child_init)
    try:
        outcomes = pool.map(_call, items, chunksize=1)
        pool.close()   # (every task is done: the workers exit on their own, no signal sent)
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
        _TASK = None
    results = []
    for status, value in outcomes:
        if status == "error":
            raise value
        results.append(value)
    return results
