"""``partition``: turn a global, fully sharded program into one rank's SPMD program.

Every value's global type becomes this rank's local type (``torch.chunk`` pieces,
so uneven shards work): arguments, op results, collectives. ``shard.annotate`` ops
vanish (identity on local values); a slice of (or write into) one part of an ``SS(d, k)``
value takes that part of the local parts; ``tensor.random`` ops learn which piece of the global
tensor this rank draws (``global_shape``, ``offset``); ``shard.sharding`` attributes leave the ops (the
function's argument/result attributes keep them: they say how the rank's pieces make
the global values). The function gets ``spmdc.rank``. Run ``lower-redistribution``
first: a remaining ``shard.redistribute`` is an error.

Before (mesh ``["tp" = 2]``)::

    func.func @f(%x: tensor<8x16xf32> {shard.sharding = #shard<@m, [S(0)]>}) -> ... {
      %0 = tensor.relu %x {shard.sharding = [#shard<@m, [S(0)]>]} : tensor<8x16xf32>

After (``partition{rank=1}``)::

    func.func @f(%x: tensor<4x16xf32> {shard.sharding = #shard<@m, [S(0)]>}) -> ... attributes {spmdc.rank = 1} {
      %0 = tensor.relu %x : tensor<4x16xf32>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.attrs import RANK_ATTR
from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import AnnotateOp, Partial, RedistributeOp, Replicate, ShardingAttr, StridedShard
from spmdc.dialects.tensor import ConstantOp, InsertSliceOp, RandomOp, SliceOp
from spmdc.ir.attributes import DenseAttr, IntegerAttr
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Rewriter
from spmdc.ir.types import FunctionType, TensorType
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.layouts import SHARDING, func_mesh, layout_of
from spmdc.sharding.mesh import local_offset, local_shape
from spmdc.sharding.strategy import rule_for, runs_locally


def check_layouts_agree(func: FuncOp, mesh_shape: tuple[int, ...]) -> None:
    """Every compute op must be able to run locally on the layouts it is given: its operands'
    layouts must be what some strategy of its sharding rule takes for its result layouts.
    Otherwise the local program would be wrong (or not type-check): refuse it here, located,
    instead of reporting a broken program after the pass."""
    for op in func.body.ops:
        if getattr(op, "sharding_rule", None) is None or isinstance(op, ConstantOp):
            continue
        ins = [layout_of(v) for v in op.operands]
        outs = [layout_of(r) for r in op.results]
        if any(x is None for x in ins + outs):
            continue
        if not runs_locally(rule_for(op), mesh_shape, ins, outs):  # type: ignore[arg-type]
            given = ", ".join(f"[{', '.join(map(str, lay))}]" for lay in ins)  # type: ignore[arg-type]
            made = ", ".join(f"[{', '.join(map(str, lay))}]" for lay in outs)  # type: ignore[arg-type]
            raise op.emit_error(f"cannot compute result layout {made} locally from operand layouts {given}; "
                                "a redistribution is missing (run insert-redistribution and "
                                "lower-redistribution before partition)")


def partition_function(module: Operation, func: FuncOp, rank: int) -> None:
    mesh = func_mesh(module, func)
    if mesh is None:
        return
    if rank < 0 or rank >= mesh.num_devices:
        raise func.emit_error(f"rank {rank} is outside mesh '@{mesh.sym_name}' ({mesh.num_devices} devices)")
    check_layouts_agree(func, mesh.shape)
    shape = mesh.shape
    coords = []
    r = rank
    for n in reversed(shape):
        coords.append(r % n)
        r //= n
    coords = tuple(reversed(coords))

    def local(ty: object, layout) -> object:
        if not isinstance(ty, TensorType) or layout is None:
            return ty
        return ty.with_shape(local_shape(ty.shape, tuple(layout), shape, coords))

    rewriter = Rewriter()
    for i, v in enumerate(func.return_op.operands):
        lay = layout_of(v)
        if lay is not None and not isinstance(func.res_attrs(i).get(SHARDING), ShardingAttr):
            func.set_res_attr(i, SHARDING, ShardingAttr(mesh.sym_name, tuple(lay)))
    strided_slices = {}
    for op in func.body.ops:
        if isinstance(op, (SliceOp, InsertSliceOp)) and op.part() is not None:
            src = layout_of(op.operand(0))
            if src is not None and any(isinstance(p, StridedShard) and p.dim == op.slice_attrs()[0] for p in src):
                strided_slices[op] = op.part()
    for a in func.args:
        a.type = local(a.type, layout_of(a))
    for op in list(func.body.ops):
        if isinstance(op, RedistributeOp):
            raise op.emit_error("must be lowered before partition (run lower-redistribution)")
        if isinstance(op, AnnotateOp):
            rewriter.replace_op(op, [op.operand(0)])
            continue
        layouts = [layout_of(r) for r in op.results]
        if isinstance(op, ConstantOp) and layouts[0] is not None:
            _partition_constant(op, layouts[0], shape, coords)
        if isinstance(op, RandomOp) and layouts[0] is not None:
            g, lay = op.result.tensor_type.shape, tuple(layouts[0])
            if any(isinstance(p, StridedShard) for p in lay):
                raise op.emit_error(f"cannot draw random numbers in the strided layout [{', '.join(map(str, lay))}] "
                                    "(each rank's piece is several blocks of the global tensor)")
            op.localize(local_shape(g, lay, shape, coords), local_offset(g, lay, shape, coords))
        if op in strided_slices:
            op.localize(op.operand(0).tensor_type, strided_slices[op])   # part j of the local parts
        for res, lay in zip(op.results, layouts):
            res.type = local(res.type, lay)
        op.attributes.pop(SHARDING, None)
    ret = func.return_op
    results = []
    for v in ret.operands:
        results.append(v.type)
    func.set_function_type(FunctionType(tuple(a.type for a in func.args), tuple(results)))
    func.attributes[RANK_ATTR] = IntegerAttr(rank)


def _partition_constant(op: ConstantOp, layout, shape, coords) -> None:
    value = op.value
    if all(isinstance(p, (Replicate,)) for p in layout):
        return
    if any(isinstance(p, Partial) for p in layout) and not (len(value.values) == 1 and value.values[0] == 0):
        raise op.emit_error("only a zero constant can be Partial")
    local = local_shape(value.type.shape, tuple(layout), shape, coords)
    if len(value.values) != 1:
        raise op.emit_error("only splat constants can be sharded")
    op.attributes["value"] = DenseAttr(value.type.with_shape(local), value.values)


@dataclass
class Partition(ModulePass):
    """Make every function the SPMD program of mesh rank ``rank`` (local shapes)."""

    name: ClassVar[str] = "partition"
    rank: int = 0

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp) and RANK_ATTR not in op.attributes:
                partition_function(module, op, self.rank)


PASS = Partition
