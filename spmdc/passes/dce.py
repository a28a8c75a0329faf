"""``dce``: erase side-effect-free ops whose results are all unused.

Before::

    %0 = tensor.exp %x : tensor<4xf32>      // unused
    func.return %x : tensor<4xf32>

After::

    func.return %x : tensor<4xf32>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.ir.core import Block, Operation
from spmdc.passes.pass_base import ModulePass


def is_trivially_dead(op: Operation) -> bool:
    return op.has_trait("Pure") and not op.has_trait("Terminator") and bool(op.results) \
        and not any(r.uses for r in op.results)


def erase_dead_ops(block: Block) -> int:
    """Erase dead ops bottom-up (so chains die in one sweep); returns how many."""
    erased = 0
    for op in reversed(list(block.ops)):
        for region in op.regions:
            for b in region.blocks:
                erased += erase_dead_ops(b)
        if is_trivially_dead(op):
            op.erase()
            erased += 1
    return erased


@dataclass
class DeadCodeElimination(ModulePass):
    """Erase unused results of pure ops."""

    name: ClassVar[str] = "dce"

    def run(self, module: Operation) -> None:
        for region in module.regions:
            for block in region.blocks:
                erase_dead_ops(block)


PASS = DeadCodeElimination
