"""Parse, verify and print time of large modules (issue: 10,000 ops in < 2 s).

    python bench/ir_scale.py [--ops 10000 20000]

Prints a table: ops, text size, parse / verify / print seconds and their sum.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.ir.verifier import verify


def make_module(n_ops: int) -> str:
    """A chain mixing matmul, elementwise, reductions, reshapes and shard ops."""
    lines = ['shard.mesh @mesh = <["dp" = 2, "tp" = 4]>',
             "func.func @main(%x: tensor<64x64xf32> {shard.sharding = #shard<@mesh, [S(0), R]>}, "
             '%w: tensor<64x64xf32> {spmdc.param = "w"}) -> tensor<64x64xf32> {']
    cur = "%x"
    t = "tensor<64x64xf32>"
    i = 0
    while i < n_ops - 1:
        k = i % 5
        if k == 0:
            lines.append(f"  %v{i} = tensor.matmul {cur}, %w : ({t}, {t}) -> {t}")
        elif k == 1:
            lines.append(f"  %v{i} = tensor.add {cur}, %x : {t}")
        elif k == 2:
            lines.append(f"  %v{i} = tensor.relu {cur} : {t}")
        elif k == 3:
            lines.append(f'  %v{i} = shard.annotate {cur} {{sharding = #shard<@mesh, [S(0), R]>}} : {t}')
        else:
            lines.append(f"  %v{i} = tensor.permute {cur} {{perm = [1, 0]}} : ({t}) -> {t}")
        cur = f"%v{i}"
        i += 1
    lines.append(f"  func.return {cur} : {t}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, nargs="+", default=[1000, 10000, 20000])
    args = ap.parse_args()
    table = Table(title="spmdc IR: parse + verify + print")
    for col in ("ops", "KiB", "parse s", "verify s", "print s", "total s", "ops/s"):
        table.add_column(col, justify="right")
    for n in args.ops:
        text = make_module(n)
        t0 = time.perf_counter()
        m = parse_module(text, "bench.mlir")
        t1 = time.perf_counter()
        verify(m)
        t2 = time.perf_counter()
        out = print_module(m)
        t3 = time.perf_counter()
        assert out.count("\n") >= n
        total = t3 - t0
        table.add_row(str(n), f"{len(text) / 1024:.0f}", f"{t1 - t0:.3f}", f"{t2 - t1:.3f}",
                      f"{t3 - t2:.3f}", f"{total:.3f}", f"{n / total:,.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
