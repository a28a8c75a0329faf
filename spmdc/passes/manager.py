"""Pass manager: runs passes in order with verification, IR dumps and timing.

    pm = PassManager(parse_pipeline("canonicalize,cse"), print_ir_after_all=True)
    pm.run(module)

IR dumps look like mlir-opt's::

    // -----// IR Dump After canonicalize //----- //
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from spmdc.ir.core import Operation
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.printer import print_module
from spmdc.ir.verifier import verify
from spmdc.passes.pass_base import ModulePass


@dataclass
class PassTiming:
    name: str
    seconds: float


@dataclass
class PassManager:
    passes: list[ModulePass]
    verify_each: bool = True
    print_ir_after_all: bool = False
    print_ir_after: set[str] = field(default_factory=set)
    print_ir_before: set[str] = field(default_factory=set)
    time_passes: bool = False
    dump_stream: TextIO | None = None
    generic: bool = False
    debuginfo: bool = False
    on_after_pass: Callable[[ModulePass, Operation, int], None] | None = None
    timings: list[PassTiming] = field(default_factory=list)

    def run(self, module: Operation) -> None:
        from spmdc.ir.gc_pause import gc_paused

        with gc_paused():   # passes stay linear in ops (spmdc.ir.gc_pause)
            self._run(module)

    def _run(self, module: Operation) -> None:
        out = self.dump_stream or sys.stderr
        for index, p in enumerate(self.passes):
            if p.name in self.print_ir_before:
                self._dump(out, f"IR Dump Before {p.describe()}", module)
            start = time.perf_counter()
            p.run(module)
            self.timings.append(PassTiming(p.describe(), time.perf_counter() - start))
            if self.verify_each:
                try:
                    verify(module)
                except DiagnosticError as e:
                    e.diagnostic.message = f"{e.diagnostic.message} (IR invalid after pass '{p.name}')"
                    raise
            if self.print_ir_after_all or p.name in self.print_ir_after:
                self._dump(out, f"IR Dump After {p.describe()}", module)
            if self.on_after_pass is not None:
                self.on_after_pass(p, module, index)

    def _dump(self, out: TextIO, title: str, module: Operation) -> None:
        out.write(f"// -----// {title} //----- //\n")
        out.write(print_module(module, generic=self.generic, debuginfo=self.debuginfo))
        out.write("\n")

    def timing_report(self) -> str:
        """mlir-opt style ``--time-passes`` table."""
        total = sum(t.seconds for t in self.timings) or 1e-12
        lines = ["===" + "-" * 70 + "===", "  ... Pass execution timing report ...",
                 "===" + "-" * 70 + "===",
                 f"  Total Execution Time: {total:.4f} seconds", "",
                 "  ----Wall Time----  ----Name----"]
        for t in self.timings:
            lines.append(f"  {t.seconds:8.4f} ({100 * t.seconds / total:5.1f}%)  {t.name}")
        lines.append(f"  {total:8.4f} (100.0%)  Total")
        return "\n".join(lines) + "\n"
