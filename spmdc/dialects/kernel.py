"""``kernel`` dialect: fused regions, the unit of Triton code generation.

    %r = kernel.fused %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32> {
    ^bb0(%x: tensor<8x16xf32>, %y: tensor<16xf32>):
      %0 = tensor.add %x, %y : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
      %1 = tensor.relu %0 : tensor<8x16xf32>
      kernel.yield %1 : tensor<8x16xf32>
    }

The region is isolated from above: its block arguments are the operands.
"""

from __future__ import annotations

from spmdc.ir.attributes import StringAttr
from spmdc.ir.core import Operation
from spmdc.ir.registry import Dialect


class FusedOp(Operation):
    """A group of ``tensor`` ops executed as one kernel; ``kernel.yield`` gives its results.

    ``%r = kernel.fused %a {kind = "elementwise"} : (tensor<4xf32>) -> tensor<4xf32> { ... }``
    """

    name = "kernel.fused"
    num_regions = 1
    optional_attrs = {"kind": StringAttr}
    traits = frozenset({"IsolatedFromAbove", "Pure"})

    def verify_(self) -> None:
        region = self.regions[0]
        if len(region.blocks) != 1:
            raise self.emit_error("expects a single-block region")
        block = region.blocks[0]
        arg_types = [a.type for a in block.args]
        in_types = [v.type for v in self.operands]
        if arg_types != in_types:
            raise self.emit_error(f"region arguments ({', '.join(map(str, arg_types))}) must match the "
                                  f"operand types ({', '.join(map(str, in_types))})")
        term = block.ops[-1] if block.ops else None
        if not isinstance(term, YieldOp):
            raise self.emit_error("region must end with 'kernel.yield'")
        for op in block.ops[:-1]:
            if not op.name.startswith("tensor."):
                raise op.emit_error("is not allowed inside 'kernel.fused' (only 'tensor' ops)")
        got = [v.type for v in term.operands]
        want = [r.type for r in self.results]
        if got != want:
            raise term.emit_error(f"yields ({', '.join(map(str, got))}) but the enclosing "
                                  f"'kernel.fused' returns ({', '.join(map(str, want))})")


class YieldOp(Operation):
    """``kernel.yield %v : tensor<...>`` — terminator of a ``kernel.fused`` region."""

    name = "kernel.yield"
    num_results = 0
    traits = frozenset({"Terminator", "Pure"})

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), FusedOp):
            raise self.emit_error("expects parent op 'kernel.fused'")


DIALECT = Dialect("kernel", [FusedOp, YieldOp])
