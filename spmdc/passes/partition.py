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

from spmdc.dialects.attrs import RANK_ATTR, UNEVEN_ATTR
from spmdc.dialects.comm.experts import ExpertCombineOp as CommExpertCombineOp
from spmdc.dialects.comm.experts import ExpertDispatchOp as CommExpertDispatchOp
from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import AnnotateOp, Partial, RedistributeOp, Replicate, Shard, ShardingAttr, StridedShard
from spmdc.dialects.tensor import (
    ConstantOp,
    ExpertCombineOp,
    ExpertCountsOp,
    ExpertDispatchOp,
    ExpertRouteOp,
    InsertSliceOp,
    RandomOp,
    SliceOp,
)
from spmdc.ir.attributes import ArrayAttr, BoolAttr, DenseAttr, IntegerAttr, StringAttr, SymbolRefAttr, UnitAttr
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder, Rewriter
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

    first, last = tuple(0 for _ in shape), tuple(n - 1 for n in shape)
    uneven = False

    def local(ty: object, layout) -> object:
        nonlocal uneven
        if not isinstance(ty, TensorType) or layout is None:
            return ty
        if not uneven:   # (torch.chunk pieces shrink with the coordinate: the first and last bound them)
            uneven = local_shape(ty.shape, tuple(layout), shape, first) != local_shape(ty.shape, tuple(layout), shape,
                                                                                        last)
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
    expert_axes = {id(op): (_expert_axis(op, mesh), op.sources()) for op in func.body.ops   # global types
                   if isinstance(op, (ExpertDispatchOp, ExpertCombineOp))}
    expert_groups = _expert_groups(func, expert_axes)
    first_sources = {id(op): _first_source(op, shape, coords) for op in func.body.ops if isinstance(op, ExpertRouteOp)}
    for a in func.args:
        a.type = local(a.type, layout_of(a))
    for op in list(func.body.ops):
        if isinstance(op, RedistributeOp):
            raise op.emit_error("must be lowered before partition (run lower-redistribution)")
        if isinstance(op, AnnotateOp):
            rewriter.replace_op(op, [op.operand(0)])
            continue
        if id(op) in expert_axes and expert_axes[id(op)][0] is not None:
            group = expert_groups[id(op)]
            if op is group[-1]:   # one all_to_all for the group, where its last member was
                _lower_expert_moves(group, *expert_axes[id(op)], mesh, coords, rewriter)  # type: ignore[arg-type]
            continue
        if isinstance(op, ExpertRouteOp):
            op.localize(first_sources[id(op)])
        layouts = [layout_of(r) for r in op.results]
        if isinstance(op, ExpertCountsOp) and layouts[0] is not None:   # this rank counts its own chunks
            op.attributes["sources"] = IntegerAttr(local_shape(op.result.tensor_type.shape, tuple(layouts[0]),
                                                               shape, coords)[0])
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
    if uneven:
        func.attributes[UNEVEN_ATTR] = UnitAttr()


def _first_source(op: Operation, shape, coords) -> int:
    """The first source chunk of an ``expert_route``'s ids on this rank."""
    lay = layout_of(op.operand(0))
    if lay is None:
        return 0
    off = local_offset(op.operand(0).tensor_type.shape, tuple(lay), shape, coords)[0]
    return off // int(op.attr_value("per_source"))  # type: ignore[arg-type]


def _expert_axis(op: Operation, mesh) -> str | None:
    """The mesh axis sharding the slots of an expert dispatch or combine (its ``dest``'s dim 0)."""
    lay = layout_of(op.operand(1))
    axes = [mesh.axis_names[i] for i, p in enumerate(lay or ()) if isinstance(p, Shard) and mesh.shape[i] > 1]
    if len(axes) > 1:
        raise op.emit_error(f"its slots are sharded over several mesh axes ({', '.join(axes)}); one is supported")
    return axes[0] if axes else None


def _expert_groups(func: FuncOp, axes: dict) -> dict[int, list[Operation]]:
    """Sharded dispatches (or combines) of one routing (same ``dest`` and ``counts``) that can
    travel in one ``all_to_all``: consecutive ones, none of whose results is used before the
    group's last member (where the merged collective goes)."""
    groups: dict[int, list[Operation]] = {}
    open_: dict[tuple, list[Operation]] = {}
    for op in func.body.ops:
        users_of = {id(v.defining_op()) for v in op.operands if v.defining_op() is not None}
        for key in [k for k, g in open_.items() if any(id(m) in users_of for m in g)]:
            del open_[key]
        if axes.get(id(op), (None,))[0] is None:
            continue
        key = (type(op), id(op.operand(1)), id(op.operand(2)))
        group = open_.setdefault(key, [])
        group.append(op)
        for m in group:
            groups[id(m)] = group
    return groups


def _lower_expert_moves(group: list[Operation], axis: str, sources: int, mesh, coords, rewriter: Rewriter) -> None:
    """Sharded ``tensor.expert_dispatch``/``_combine`` ops are this rank's ``all_to_all`` of its rows:
    one ``comm.expert_dispatch``/``_combine`` on the slots' axis (one slot per rank) moves them all."""
    op = group[-1]
    n = mesh.shape[mesh.axis_names.index(axis)]
    if sources != n:
        raise op.emit_error(f"has {sources} slots on mesh axis '{axis}' of {n} ranks; one slot per rank "
                            "is supported")
    types = [m.result.tensor_type.with_shape(local_shape(m.result.tensor_type.shape, tuple(layout_of(m.result)),
                                                         mesh.shape, coords)) for m in group]
    attrs: dict[str, object] = {"mesh": SymbolRefAttr(mesh.sym_name), "axis": StringAttr(axis),
                                "top_k": ArrayAttr(tuple(IntegerAttr(m.top_k) for m in group))}
    if isinstance(op, ExpertDispatchOp):
        attrs["slot_rows"] = IntegerAttr(int(op.attr_value("slot_rows")))  # type: ignore[arg-type]
        if any(m.attr_value("count_load") for m in group):
            attrs["count_load"] = BoolAttr(True)
    cls = CommExpertDispatchOp if isinstance(op, ExpertDispatchOp) else CommExpertCombineOp
    new = Builder.before(op).create(cls, [m.operand(0) for m in group] + [op.operand(1), op.operand(2)], attrs,
                                    types, location=op.location)
    for m, r in zip(group, new.results):
        rewriter.replace_op(m, [r])


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
