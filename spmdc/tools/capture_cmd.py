"""``spmdc capture WORKLOAD [--train] [-o out.mlir]``: capture a workload into spmdc IR.

Errors (an unknown workload, a factory that raises, inputs that are not tensors, a model
spmdc cannot capture, an output path that cannot be written) end in one line from
:func:`spmdc.tools.errors.guard`.
"""

from __future__ import annotations

import sys


def capture_main(workload: str, train: bool, output: str | None, debuginfo: bool = False) -> int:
    from spmdc.frontend.workloads import load_workload
    from spmdc.ir.printer import print_module
    from spmdc.tools.errors import UserError, write_text

    if output and output != "-" and not _parent_exists(output):
        raise UserError(f"cannot write output '{output}': directory '{_parent(output)}' does not exist")
    w = load_workload(workload)
    cap = w.capture(train=train)
    text = print_module(cap.module, debuginfo=debuginfo)
    if output and output != "-":
        write_text(output, text)
    else:
        sys.stdout.write(text)
    t = cap.timings
    n_ops = sum(1 for _ in cap.module.walk()) - 3  # module, func, return
    print(f"captured {workload} ({'training step' if train else 'forward'}): {n_ops} ops in "
          f"{t['total']:.2f}s (export {t['export']:.2f}s, torch-mlir import {t['import']:.2f}s, "
          f"translate {t['translate']:.2f}s, verify {t['verify']:.2f}s)"
          + (f" -> {output}" if output and output != "-" else ""), file=sys.stderr)
    b = cap.blocks
    if b is not None and b.stack is not None and b.reused:
        print(f"repeated blocks: the {b.stack.count} blocks of '{b.stack.path}' were built from a 3-block trace "
              "(checked against a 4-block export)", file=sys.stderr)
    return 0


def _parent(path: str) -> str:
    import os

    return os.path.dirname(os.path.abspath(path))


def _parent_exists(path: str) -> bool:
    import os

    return os.path.isdir(_parent(path))
