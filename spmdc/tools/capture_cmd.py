"""``spmdc capture WORKLOAD [--train] [-o out.mlir]``: capture a workload into spmdc IR."""

from __future__ import annotations

import sys


def capture_main(workload: str, train: bool, output: str | None, debuginfo: bool = False) -> int:
    from spmdc.frontend.aten import UnsupportedOpError
    from spmdc.frontend.workloads import WorkloadError, load_workload
    from spmdc.ir.diagnostics import DiagnosticError
    from spmdc.ir.printer import print_module

    try:
        w = load_workload(workload)
        cap = w.capture(train=train)
    except (WorkloadError, UnsupportedOpError) as e:
        print(f"spmdc capture: error: {e}", file=sys.stderr)
        return 1
    except DiagnosticError as e:
        print(f"spmdc capture: error: {e}", file=sys.stderr)
        return 1
    text = print_module(cap.module, debuginfo=debuginfo)
    if output and output != "-":
        with open(output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    t = cap.timings
    n_ops = sum(1 for _ in cap.module.walk()) - 3  # module, func, return
    print(f"captured {workload} ({'training step' if train else 'forward'}): {n_ops} ops in "
          f"{t['total']:.2f}s (export {t['export']:.2f}s, torch-mlir import {t['import']:.2f}s, "
          f"translate {t['translate']:.2f}s, verify {t['verify']:.2f}s)"
          + (f" -> {output}" if output and output != "-" else ""), file=sys.stderr)
    return 0
