"""How long starting ranks takes: ranks forked from the launcher's fork server against spawned ranks.

    python bench/launch_start.py [--ranks 2 4 8] [--launches 3]

Each launch runs a rank function that initializes the gloo group, does one barrier and returns
(what every job does first). For each rank count: the first launch of this process (it starts the
fork server, which imports torch and spmdc once), later launches (the server reused) and, for
comparison, spawned ranks (each a new interpreter that imports torch and spmdc itself, as the
launcher started them before; ``spmdc.runtime.launcher._start_method`` pinned to ``spawn``), the
median wall seconds of ``--launches`` launches and the ratio. Ranks share this machine's cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def first_barrier() -> int:
    import torch.distributed as dist

    import spmdc.api.entry  # noqa: F401  (what a rank running a compiled module imports)

    dist.init_process_group("gloo")
    dist.barrier()
    rank = dist.get_rank()
    dist.destroy_process_group()
    return rank


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    import spmdc.api.entry  # noqa: F401  (as spmdc run has: the server preloads it)
    import spmdc.runtime.launcher as launcher

    def timed(n: int) -> float:
        t = time.perf_counter()
        assert launcher.launch(first_barrier, n, timeout_s=300) == {r: r for r in range(n)}
        return time.perf_counter() - t

    forked = launcher._start_method
    rows = []
    for n in args.ranks:
        launcher._stop_server()   # (a new server for the first launch of each row)
        first = timed(n)
        later = statistics.median(timed(n) for _ in range(args.launches))
        launcher._start_method = lambda: "spawn"
        try:
            spawned = statistics.median(timed(n) for _ in range(args.launches))
        finally:
            launcher._start_method = forked
        rows.append((n, first, later, spawned))
    table = Table(title=f"starting ranks ({os.cpu_count()} CPUs, median of {args.launches} launches)")
    for c in ("ranks", "forked: first launch s", "forked: later launches s", "spawned s", "later / spawned"):
        table.add_column(c, justify="right")
    for n, first, later, spawned in rows:
        table.add_row(str(n), f"{first:.2f}", f"{later:.2f}", f"{spawned:.2f}", f"{later / spawned:.2f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
