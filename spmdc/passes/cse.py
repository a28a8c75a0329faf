"""``cse``: common subexpression elimination of pure ops without regions.

Before::

    %0 = tensor.exp %x : tensor<4xf32>
    %1 = tensor.exp %x : tensor<4xf32>
    %2 = tensor.add %0, %1 : tensor<4xf32>

After::

    %0 = tensor.exp %x : tensor<4xf32>
    %2 = tensor.add %0, %0 : tensor<4xf32>

Ops are equal when name, operands, attributes and result types are equal;
commutative ops (``tensor.add``, ``tensor.mul``, ...) also match with swapped operands.
Values of enclosing blocks are visible in nested regions unless the region's op is
isolated from above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.ir.core import Block, Operation
from spmdc.ir.rewriter import Rewriter
from spmdc.passes.pass_base import ModulePass


def _key(op: Operation) -> tuple | None:
    if not op.has_trait("Pure") or op.regions or not op.results or op.has_trait("Terminator"):
        return None
    ids = [id(v) for v in op.operands]
    if op.has_trait("Commutative"):
        ids = sorted(ids)
    # Attributes compare by kind and printed text: Python equality would treat 0.0 and
    # -0.0 (and so dense<0.0> and dense<-0.0>) as equal, and NaN as unequal to itself.
    attrs = tuple((k, type(v).__name__, str(v)) for k, v in sorted(op.attributes.items()))
    return (op.name, tuple(ids), attrs, tuple(r.type for r in op.results))


def _cse_block(block: Block, known: dict[tuple, Operation], rewriter: Rewriter) -> None:
    table = dict(known)
    for op in list(block.ops):
        for region in op.regions:
            inherited = {} if op.has_trait("IsolatedFromAbove") else table
            for b in region.blocks:
                _cse_block(b, inherited, rewriter)
        key = _key(op)
        if key is None:
            continue
        prior = table.get(key)
        if prior is not None:
            rewriter.replace_op(op, prior.results)
        else:
            table[key] = op


@dataclass
class CommonSubexpressionElimination(ModulePass):
    """Merge identical pure ops."""

    name: ClassVar[str] = "cse"

    def run(self, module: Operation) -> None:
        rewriter = Rewriter()
        for region in module.regions:
            for block in region.blocks:
                _cse_block(block, {}, rewriter)


PASS = CommonSubexpressionElimination
