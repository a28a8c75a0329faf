"""``lower-redistribution``: replace each ``shard.redistribute`` by ``comm`` collectives.

The planner (:mod:`spmdc.sharding.planner`) searches over layouts for the cheapest
sequence; each step becomes one collective on global types, carrying the layout it
produces in ``shard.sharding`` (``partition`` then makes the shapes local).

Before::

    %1 = shard.redistribute %0 {from = #shard<@m, [P(sum)]>, to = #shard<@m, [S(0)]>} : tensor<8x16xf32>

After::

    %1 = comm.reduce_scatter %0 {axis = "tp", dim = 0, mesh = @m, op = "sum",
                                 shard.sharding = [#shard<@m, [S(0)]>]} : tensor<8x16xf32>

A strided step (to or from ``SS(d, k)``) works on dim ``d`` seen as ``[k, size/k]``: a reshape
(where ``SS(d, k)`` is ``S(d+1)``), the plain collective on dim ``d+1``, and a reshape back::

    %1 = shard.redistribute %0 {from = #shard<@m, [SS(1, 3)]>, to = #shard<@m, [R]>} : tensor<4x96xf32>
    // becomes
    %v = tensor.reshape %0 {shard.sharding = [#shard<@m, [S(2)]>]} : (tensor<4x96xf32>) -> tensor<4x3x32xf32>
    %g = comm.all_gather %v {axis = "tp", dim = 2, mesh = @m, shard.sharding = [#shard<@m, [R]>]} : tensor<4x3x32xf32>
    %1 = tensor.reshape %g {shard.sharding = [#shard<@m, [R]>]} : (tensor<4x3x32xf32>) -> tensor<4x96xf32>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects import comm
from spmdc.dialects.shard import Placement, RedistributeOp, Shard, StridedShard, shard_dim
from spmdc.dialects.tensor import ReshapeOp
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder, Rewriter
from spmdc.ir.types import TensorType
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.device_groups import GROUP_AXIS
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
        steps = plan_redistribution(op.source.placements, op.target.placements, ty.rank, ty.num_bytes, mesh.shape,
                                    whole_within=[i for i, a in enumerate(mesh.axis_names) if a == GROUP_AXIS])
    except ValueError as e:
        raise op.emit_error(str(e)) from None
    b = Builder.before(op)
    cur = op.operand(0)
    names = mesh.axis_names
    before = tuple(op.source.placements)
    for step in steps:
        if step.parts > 1:
            cur = _strided_step(b, cur, step, before, mesh, op)
            before = step.after
            continue
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
            if step.sizes:
                attrs["sizes"] = list(step.sizes)
            if step.kind == "reduce_scatter":
                attrs["op"] = step.op
        new = b.create(_OPS[step.kind], [cur], attrs, result_types=[ty], location=op.location)
        set_result_layouts(new, mesh.sym_name, [step.after])
        cur = new.result
        before = step.after
    rewriter.replace_op(op, [cur])


def unfold_layout(layout: tuple[Placement, ...], dim: int) -> tuple[Placement, ...]:
    """``layout`` on the tensor with ``dim`` split into ``[k, size/k]``: ``SS(dim, k)`` is
    ``S(dim+1)`` there, later dims move up by one."""
    out: list[Placement] = []
    for p in layout:
        d = shard_dim(p)
        if isinstance(p, StridedShard) and p.dim == dim:
            out.append(Shard(dim + 1))
        elif d is not None and d > dim:
            out.append(Shard(d + 1))
        else:
            out.append(p)
    return tuple(out)


def _strided_step(b: Builder, cur, step, before, mesh, op: RedistributeOp):
    """reshape → the step's collective on the unfolded dim → reshape back."""
    ty: TensorType = op.result.tensor_type
    d, k = step.dim, step.parts
    unfolded = ty.with_shape(ty.shape[:d] + (k, ty.shape[d] // k) + ty.shape[d + 1:])
    view = b.create(ReshapeOp, [cur], {}, result_types=[unfolded], location=op.location)
    set_result_layouts(view, mesh.sym_name, [unfold_layout(before, d)])
    attrs: dict[str, object] = {"mesh": _sym(mesh.sym_name), "axis": mesh.axis_names[step.axes[0]], "dim": d + 1}
    if step.kind == "reduce_scatter":
        attrs["op"] = step.op
    coll = b.create(_OPS[step.kind], [view.result], attrs, result_types=[unfolded], location=op.location)
    set_result_layouts(coll, mesh.sym_name, [unfold_layout(step.after, d)])
    back = b.create(ReshapeOp, [coll.result], {}, result_types=[ty], location=op.location)
    set_result_layouts(back, mesh.sym_name, [step.after])
    return back.result


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
