"""``cross-group``: the communication across device groups of a heterogeneous plan.

Each group's global program is laid out on its virtual mesh ``["grp" = G, <own axes>]``
(:mod:`spmdc.sharding.device_groups`): after lowering, its moves on ``grp`` are collectives whose
"process group" would pair ranks of different groups at the same coordinates — which does not
exist when the groups' meshes differ. This step takes every group's program together and
resolves those moves by what they mean over the real ranks (Hetu v2's rules):

* ``comm.all_slice`` on ``grp`` (a group keeps its share of a replicated value): local, kept;
* ``comm.all_reduce`` on ``grp`` (a cross-group partial made whole): each finest slice of the
  groups' pieces is summed over exactly the ranks, in every group, that hold it —
  ``comm.split_all_reduce`` (one collective per holder set; consecutive reductions that nothing
  reads in between share them, as a bucket). A reduction over ``grp`` *and* own axes first
  reduces over the own axes (an ordinary ``comm.all_reduce``), then across groups;
* anything else on ``grp`` (``all_gather``, ``reduce_scatter``, ``all_to_all``: a batch split
  across groups needed whole, a cross-group partial cut into a split) — batched send/recv,
  ``comm.bsr``, from the finest-slice table between the two union layouts (partial sources
  summed on arrival); ``messages`` lists the (sender, receiver) pairs.

``lower-redistribution`` plans every step on ``grp`` after the reductions over the group's own axes
(:func:`~spmdc.sharding.planner.plan_redistribution`'s ``whole_within``): a move across the groups
takes values whole within each group (``[P(sum), P(sum)] → [S(0), S(0)]`` is an all-reduce over the
own axes, then a reduce-scatter across the groups, then a local slice).

The k-th cross-group move of every group's program must be the same value (same kind and shape):
the groups run the same model, so they are; a mismatch is an error, never a guess.

Before (group 0, mesh ``["grp" = 2, "tp" = 4]``)::

    %g = comm.all_reduce %mm {axes = ["grp"], mesh = @mesh, op = "sum",
                              shard.sharding = [#shard<@mesh, [R, S(0)]>]} : tensor<128x32xf32>

After (group 1 has ``tp = 2`` on ranks 4, 5)::

    shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
    shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
    %g = comm.split_all_reduce %mm {groups = [[0, 4], [1, 4], [2, 5], [3, 5]], op = "sum", seq = 0,
        shapes = [[128, 32]],
        unions = [#shard.union<partial(sum), [#shard<@g0, [S(0)]>, #shard<@g1, [S(0)]>]>],
        shard.sharding = [#shard<@mesh, [R, S(0)]>]} : tensor<128x32xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.attrs import GROUP_ATTR
from spmdc.dialects.comm import (
    AllGatherOp,
    AllReduceOp,
    AllSliceOp,
    AllToAllOp,
    BsrOp,
    CollectiveOp,
    ReduceScatterOp,
    SplitAllReduceOp,
)
from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import (
    CrossPartial,
    Dup,
    MeshOp,
    Partial,
    Placement,
    RaggedShard,
    Replicate,
    Shard,
    ShardingAttr,
    Split,
    UnionShardingAttr,
    chunk_sizes,
)
from spmdc.dialects.shard.union import Relation
from spmdc.ir.attributes import ArrayAttr, IntegerAttr, StringAttr
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.device_groups import GROUP_AXIS
from spmdc.sharding.layouts import layout_of
from spmdc.sharding.slices import MeshSpec, bsr_plan, split_all_reduce_plan


@dataclass(frozen=True)
class GroupSpec:
    """A device group as the resolution sees it: its mesh symbol, axes, shape and job ranks."""

    name: str
    axes: tuple[str, ...]
    shape: tuple[int, ...]
    ranks: tuple[int, ...]

    @property
    def spec(self) -> MeshSpec:
        return MeshSpec(self.axes, self.shape, self.ranks)


def _main(module: Operation) -> FuncOp:
    return next(op for op in module.body.ops if isinstance(op, FuncOp))  # type: ignore[return-value]


MOVES = (AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp)


def _cross_ops(func: FuncOp) -> list[Operation]:
    """The global collectives of ``func`` on ``grp``, in program order (a local ``all_slice``
    excepted); refuses the kinds that have no meaning across groups."""
    out = []
    for op in func.body.ops:
        if not isinstance(op, CollectiveOp) or GROUP_AXIS not in op.axes or isinstance(op, AllSliceOp):
            continue
        if not isinstance(op, MOVES) or (not isinstance(op, AllReduceOp) and len(op.axes) > 1):
            raise op.emit_error(f"{op.name} over mesh axes {list(op.axes)} has no form across device groups")
        out.append(op)
    return out


def _relation(p: Placement, shape: Sequence[int], n_groups: int, op: Operation) -> Relation:
    """A placement on ``grp`` as the relation across the groups."""
    if isinstance(p, Replicate):
        return Dup()
    if isinstance(p, Partial):
        return CrossPartial(p.op)
    sizes: tuple[int, ...] = ()
    if isinstance(p, RaggedShard):
        sizes = tuple(p.units)
    elif isinstance(p, Shard):
        sizes = tuple(chunk_sizes(shape[p.dim], n_groups))
    if sizes and all(u > 0 for u in sizes):
        return Split(p.dim, sizes)  # type: ignore[attr-defined]
    raise op.emit_error(f"layout {p} on mesh axis '{GROUP_AXIS}' leaves a device group without a piece: no "
                        "relation across the groups expresses it")


def _split_own_axes(op: AllReduceOp) -> AllReduceOp:
    """``all_reduce`` over ``grp`` and own axes → own axes first, then ``grp`` alone."""
    own = [a for a in op.axes if a != GROUP_AXIS]
    if not own:
        return op
    sharding = op.attributes["shard.sharding"][0]  # type: ignore[index]
    # after the own-axis reduction: the own axes whole (as after the op), grp still pending
    mid = (Partial(str(op.attr_value("op"))),) + tuple(sharding.placements[1:])
    attrs = dict(op.attributes)
    attrs["axes"] = ArrayAttr([StringAttr(a) for a in own])
    attrs["shard.sharding"] = ArrayAttr([ShardingAttr(sharding.mesh, mid)])
    first = Builder.before(op).create(AllReduceOp, [op.operand(0)], attrs, [op.result.type], location=op.location)
    first.result.name_hint = op.result.name_hint
    op.set_operand(0, first.result)
    op.attributes["axes"] = ArrayAttr([StringAttr(GROUP_AXIS)])
    return op


def _union(op: AllReduceOp, groups: Sequence[GroupSpec], layouts: Sequence[tuple]) -> UnionShardingAttr:
    kind = str(op.attr_value("op"))
    if kind != "sum":
        raise op.emit_error(f"a '{kind}' reduction across device groups is not supported (the groups' pieces "
                            "differ: only sums combine per slice)")
    for g, lay in zip(groups, layouts):
        if any(isinstance(p, Partial) for p in lay):
            raise op.emit_error(f"the cross-group reduction takes a value still partial inside group '{g.name}' "
                                f"([{', '.join(map(str, lay))}]); reduce it within the group first")
    return UnionShardingAttr(CrossPartial(str(op.attr_value("op"))),
                             tuple(ShardingAttr(g.name, tuple(lay)) for g, lay in zip(groups, layouts)))


def resolve_cross_group(modules: Sequence[Operation], groups: Sequence[GroupSpec]) -> list[int]:
    """Rewrite every group's cross-group moves (``modules[g]`` is group ``g``'s global program,
    after lower-redistribution); returns the number of values each ``comm.split_all_reduce`` made
    reduces."""
    for m in modules:
        names = {op.sym_name for op in m.body.ops if isinstance(op, MeshOp)}
        for g in groups:
            if g.name not in names:
                m.body.insert(0, MeshOp.build(g.name, g.axes, g.shape, devices=g.ranks))
    return resolve_functions([_main(m) for m in modules], groups)


def resolve_functions(funcs: Sequence[FuncOp], groups: Sequence[GroupSpec]) -> list[int]:
    """:func:`resolve_cross_group` on the groups' functions (``funcs[g]``: group ``g``'s)."""
    per = [[_split_own_axes(op) if isinstance(op, AllReduceOp) else op for op in _cross_ops(f)]  # type: ignore[arg-type]
           for f in funcs]
    counts = {len(p) for p in per}
    if len(counts) != 1:
        raise funcs[0].emit_error("the device groups' programs move different numbers of values across groups ("
                                  + ", ".join(f"{g.name}: {len(p)}" for g, p in zip(groups, per))
                                  + "); their plans must agree on what crosses the groups")
    n = counts.pop()
    unions: list[UnionShardingAttr | None] = []
    meshes = {g.name: g.spec for g in groups}
    for k in range(n):
        ops = [p[k] for p in per]
        shapes = {tuple(o.result.type.shape) for o in ops}  # type: ignore[attr-defined]
        kinds = {o.name for o in ops}
        if len(shapes) != 1 or len(kinds) != 1:
            raise ops[0].emit_error(f"cross-group move #{k} differs between the groups ({', '.join(sorted(kinds))} of "
                                    f"{', '.join(map(str, shapes))}): the groups' programs do not match")
        if isinstance(ops[0], AllReduceOp):
            lays = [tuple(o.attributes["shard.sharding"][0].placements[1:]) for o in ops]  # type: ignore[index]
            unions.append(_union(ops[0], groups, lays))  # type: ignore[arg-type]
        else:
            unions.append(None)
    buckets = _buckets(funcs, per, n)
    made = []
    for seq, (lo, hi) in enumerate(buckets):
        if unions[lo] is None:   # anything but a reduction: batched send/recv from the slice table
            _to_bsr([p[lo] for p in per], groups, meshes, seq)
            made.append(1)
            continue
        holder_sets: set[tuple[int, ...]] = set()
        for k in range(lo, hi):
            shape = per[0][k].result.type.shape  # type: ignore[attr-defined]
            holder_sets |= set(split_all_reduce_plan(shape, unions[k], meshes).reductions)
        sets = ArrayAttr([ArrayAttr([IntegerAttr(r) for r in s]) for s in sorted(holder_sets)])
        for p in per:
            members = p[lo:hi]
            last = members[-1]
            attrs = {"op": StringAttr("sum"), "unions": ArrayAttr(unions[lo:hi]), "seq": IntegerAttr(seq),
                     "groups": sets, "shapes": ArrayAttr([ArrayAttr([IntegerAttr(d) for d in o.result.type.shape])
                                                          for o in members]),  # type: ignore[attr-defined]
                     "shard.sharding": ArrayAttr([o.attributes["shard.sharding"][0] for o in members])}  # type: ignore[index]
            new = Builder.before(last).create(SplitAllReduceOp, [o.operand(0) for o in members], attrs,
                                              [o.result.type for o in members], location=last.location)
            for o, r in zip(members, new.results):
                r.name_hint = o.result.name_hint
                o.result.replace_all_uses_with(r)
                o.erase()
        made.append(hi - lo)
    return made


def _to_bsr(ops: Sequence[Operation], groups: Sequence[GroupSpec], meshes: dict, seq: int) -> None:
    """Replace the groups' k-th cross-group move by ``comm.bsr``: the union layouts before and
    after (the ``grp`` placement as the relation, each group's own layout as its member)."""
    first = ops[0]
    shape = tuple(first.operand(0).type.shape)  # type: ignore[attr-defined]
    src_lays, dst_lays = [], []
    for o in ops:
        src = layout_of(o.operand(0))
        if src is None:
            raise o.emit_error("the operand of a cross-group move has no layout")
        src_lays.append(tuple(src))
        dst_lays.append(tuple(o.attributes["shard.sharding"][0].placements))  # type: ignore[index]
    G = len(groups)
    for lays in (src_lays, dst_lays):
        if len({lay[0] for lay in lays}) != 1:
            raise first.emit_error("the groups disagree on how a value relates across them "
                                   f"({', '.join(str(lay[0]) for lay in lays)})")
    src = UnionShardingAttr(_relation(src_lays[0][0], shape, G, first),
                            tuple(ShardingAttr(g.name, lay[1:]) for g, lay in zip(groups, src_lays)))
    dst = UnionShardingAttr(_relation(dst_lays[0][0], shape, G, first),
                            tuple(ShardingAttr(g.name, lay[1:]) for g, lay in zip(groups, dst_lays)))
    try:
        plan = bsr_plan(shape, src, dst, meshes)
    except (ValueError, NotImplementedError) as e:
        raise first.emit_error(f"cannot move {src} to {dst} by send/recv: {e}") from None
    pairs = ArrayAttr([ArrayAttr([IntegerAttr(a), IntegerAttr(b)]) for a, b in sorted(plan.sends) if a != b])
    for o in ops:
        attrs = {"from": src, "to": dst, "seq": IntegerAttr(seq), "messages": pairs,
                 "shape": ArrayAttr([IntegerAttr(d) for d in shape]), "shard.sharding": o.attributes["shard.sharding"]}
        new = Builder.before(o).create(BsrOp, [o.operand(0)], attrs, [o.result.type], location=o.location)
        new.result.name_hint = o.result.name_hint
        o.result.replace_all_uses_with(new.result)
        o.erase()


def _buckets(funcs: Sequence[FuncOp], per: Sequence[Sequence[Operation]], n: int) -> list[tuple[int, int]]:
    """Runs ``[lo, hi)`` of consecutive cross-group reductions that can be one op at the last
    one's place in every group: nothing reads an earlier member's result before it."""
    pos = [{id(op): i for i, op in enumerate(f.body.ops)} for f in funcs]
    out: list[tuple[int, int]] = []
    lo = 0
    while lo < n:
        hi = lo + 1
        while hi < n and isinstance(per[0][lo], AllReduceOp) and isinstance(per[0][hi], AllReduceOp) and \
                all(_unread_until(per[g][lo:hi], per[g][hi], pos[g]) for g in range(len(funcs))):
            hi += 1
        out.append((lo, hi))
        lo = hi
    return out


def _unread_until(members: Sequence[Operation], last: Operation, pos: dict[int, int]) -> bool:
    at = pos[id(last)]
    for o in members:
        for use in o.result.uses:
            owner = use.owner
            if pos.get(id(owner), at + 1) <= at:
                return False
    return True


@dataclass
class CrossGroup(ModulePass):
    """The groups' programs side by side in one module: each ``func.func`` with
    ``spmdc.group = "<mesh>"`` is that group's program (on its own virtual mesh), the group meshes
    are ``shard.mesh`` ops with ``devices``. Resolves them together (see the module doc)."""

    name: ClassVar[str] = "cross-group"

    def run(self, module: Operation) -> None:
        meshes = {op.sym_name: op for op in module.body.ops if isinstance(op, MeshOp)}
        funcs = [op for op in module.body.ops if isinstance(op, FuncOp) and GROUP_ATTR in op.attributes]
        if not funcs:
            return
        groups = []
        for f in funcs:
            name = f.attributes[GROUP_ATTR].value  # type: ignore[attr-defined]
            mesh = meshes.get(name)
            if mesh is None:
                raise f.emit_error(f"spmdc.group names unknown mesh '@{name}'")
            groups.append(GroupSpec(name, tuple(mesh.axis_names), tuple(mesh.shape), tuple(mesh.devices)))
        if len(funcs) < 2:
            raise funcs[0].emit_error("cross-group needs the programs of at least two device groups")
        resolve_functions(funcs, groups)  # type: ignore[arg-type]


PASS = CrossGroup

__all__ = ["CrossGroup", "GroupSpec", "resolve_cross_group", "resolve_functions"]
