"""Dump hooks: the IR after every pass and the generated code, exactly as they run.

    dump = Dump(ir_dir="ir", code_dir="gen")
    step = compile_global(model, inputs, ..., dump=dump)       # ir/train/global/NN-*.mlir
    prog = compile_rank(step, rank, "triton", dump=dump)        # ir/train/rank1/NN-*.mlir, gen/train/rank1.py

Layout (``<program>`` is ``forward`` or ``train``)::

    <ir_dir>/<program>/global/00-captured.mlir        the program as captured
    <ir_dir>/<program>/global/01-after-canonicalize.mlir ...
    <ir_dir>/<program>/global/NN-planned.mlir         after the plan's annotations
    <ir_dir>/<program>/rank<r>/01-after-partition.mlir ... up to the kernel stage
    <code_dir>/<program>/rank<r>.py                   the generated module the rank loaded

and one file per compiler stage (:data:`STAGES`, :func:`spmdc.compiler.driver.compile_program`),
numbered by the stage's place in the compiler, so that a stage that does not apply to this
program (no clipping, one mesh) still shows, unchanged, with a note saying why::

    <ir_dir>/<program>/stages/[<group>/]00-capture.mlir ... 05-cross-group.mlir
    <ir_dir>/<program>/stages/rank<r>/06-partition.mlir, 07-rank-passes.mlir, 08-pipeline-schedule.mlir,
                                      09-codegen.py
    <ir_dir>/pipeline/stages/08-pipeline-schedule.mlir  a pipeline plan's schedule (every rank's order)

Every file is written from the objects that run (no recompilation), with locations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spmdc.ir.core import Operation
from spmdc.ir.printer import print_module

PassHook = Callable[[Any, Operation, int], None]


@dataclass(frozen=True)
class Dump:
    """Where dumps go; ``None`` turns that kind off."""

    ir_dir: str | None = None
    code_dir: str | None = None

    def ir_writer(self, program: str, scope: str) -> IRWriter | None:
        if self.ir_dir is None:
            return None
        return IRWriter(Path(self.ir_dir) / program / scope)

    def write_code(self, program: str, rank: int, source: str) -> Path | None:
        if self.code_dir is None:
            return None
        path = Path(self.code_dir) / program / f"rank{rank}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        return path


    def write_stage(self, program: str, stage: str, text: str, *, group: str | None = None,
                    rank: int | None = None) -> Path | None:
        """Stage ``stage``'s output (IR text, or the generated module for ``codegen``) as
        ``<ir_dir>/<program>/stages/[<group>/][rank<r>/]NN-<stage>.mlir``."""
        if self.ir_dir is None:
            return None
        directory = Path(self.ir_dir) / program / "stages"
        if group is not None:
            directory /= group
        if rank is not None:
            directory /= f"rank{rank}"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{STAGES.index(stage):02d}-{stage}{'.py' if stage == 'codegen' else '.mlir'}"
        path.write_text(text, encoding="utf-8")
        return path


# The compiler's stages in order (spmdc.compiler.driver.compile_program); the dump numbers them so.
STAGES = ("capture", "prepare", "plan", "clipping", "global", "cross-group", "partition", "rank-passes",
          "pipeline-schedule", "codegen")


class IRWriter:
    """Numbered ``.mlir`` files in one directory: snapshots and a pass-manager hook."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.count = 0
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, label: str, module: Operation) -> None:
        path = self.directory / f"{self.count:02d}-{label}.mlir"
        path.write_text(print_module(module, debuginfo=True), encoding="utf-8")
        self.count += 1

    def after_pass(self, p: Any, module: Operation, _index: int) -> None:
        self.write(f"after-{p.name}", module)


def hook(writer: IRWriter | None) -> PassHook | None:
    return writer.after_pass if writer is not None else None


def program_name(train: bool) -> str:
    return "train" if train else "forward"


__all__ = ["STAGES", "Dump", "IRWriter", "hook", "program_name"]
