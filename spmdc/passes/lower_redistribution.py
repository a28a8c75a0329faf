"""``lower-redistribution``: replace each ``shard.redistribute`` by ``comm`` collectives.

The planner (:mod:`spmdc.sharding.planner`) searches over layouts for the cheapest
sequence; each step becomes one collective on global types, carrying the layout it
produces in ``shard.sharding`` (``partition`` then makes the shapes local).

Before::

    %1 = shard.redistribute %0 {from = #shard<@m, [P(sum)]>, to = #shard<@m, [S(0)]>} : tensor<8x16xf32>

After::

    %1 = comm.reduce_scatter %0 {axis = "tp", dim = 0, mesh = @m, op = "sum",
                                 shard.sharding = [#shard<@m, [S(0)]>]} : tensor<8x16xf32>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects import comm
from spmdc.dialects.shard import RedistributeOp
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder, Rewriter
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.layouts import set_result_layouts
from spmdc.sharding.planner import plan_redistribution

_OPS = {"all_gather": comm.AllGatherOp, "all_slice": comm.AllSliceOp, "all_reduce": comm.AllReduceOp,
        "reduce_scatter": comm.ReduceScatterOp, "all_to_all": comm.AllToAllOp}


def lower_one(op: RedistributeOp, rewriter: Rewriter) -> None:
    from spmdc.dialects.shard import lookup_mesh

    mesh = lookup_mesh(op, op.source.mesh)
    if mesh is None:
        raise op.emit_error(f"refers to unknown mesh '@{op.source.mesh}'")
    ty = op.result.tensor_type
    try:
        steps = plan_redistribution(op.source.placements, op.target.placements, ty.rank, ty.num_bytes, mesh.shape)
    except ValueError as e:
        raise op.emit_error(str(e)) from None
    b = Builder.before(op)
    cur = op.operand(0)
    names = mesh.axis_names
    for step in steps:
        attrs: dict[str, object] = {"mesh": _sym(mesh.sym_name)}
        if step.kind == "all_reduce":
            attrs["axes"] = [names[a] for a in step.axes]
            attrs["op"] = step.op
        else:
            attrs["axis"] = names[step.axes[0]]
            if step.kind == "all_to_all":
                attrs["split_dim"] = step.concat_dim
                attrs["concat_dim"] = step.dim
            else:
                attrs["dim"] = step.dim
            if step.kind == "reduce_scatter":
                attrs["op"] = step.op
        new = b.create(_OPS[step.kind], [cur], attrs, result_types=[ty], location=op.location)
        set_result_layouts(new, mesh.sym_name, [step.after])
        cur = new.result
    rewriter.replace_op(op, [cur])


def _sym(name: str):
    from spmdc.ir.attributes import SymbolRefAttr

    return SymbolRefAttr(name)


@dataclass
class LowerRedistribution(ModulePass):
    """Turn shard.redistribute into the cheapest chain of comm collectives."""

    name: ClassVar[str] = "lower-redistribution"

    def run(self, module: Operation) -> None:
        rewriter = Rewriter()
        for op in list(module.walk()):
            if isinstance(op, RedistributeOp):
                lower_one(op, rewriter)


PASS = LowerRedistribution
