"""The one reduction of accumulated gradients under device groups (``grad_accum=N`` with a HeteroPlan).

With micro-batches, a group's program returns its gradients unreduced: ``P(sum)`` on ``grp``
(each group's sum over its share of the micro-batch) and on the group's own axes that split the
batch. The local sums of the N micro-batches are reduced once per step, as for one mesh
(:func:`spmdc.runtime.gradients.reduce_gradients`), in two moves::

    within the group   [P(sum) on grp, P(sum) on dp] -> reduce-scatter on dp (bucketed, per axis)
    across the groups  #shard.union<partial(sum), [#shard<@g0, [S(0)]>, #shard<@g1, [S(0)]>]>
                       -> one split all-reduce per holder set (every finest slice summed over the
                          ranks, in every group, that hold it: spmdc.runtime.split_collectives)

The cross-group tables need every group's storage layout of every parameter: they are exchanged
once (one ``all_gather_object`` over the job) and the tables and subgroups kept for later steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spmdc.dialects.shard import CrossPartial, Partial, Replicate, ShardingAttr, UnionShardingAttr
from spmdc.runtime.collectives import CountingComm
from spmdc.runtime.gradients import reduce_gradients
from spmdc.runtime.split_collectives import run_split_all_reduces
from spmdc.sharding.slices import MeshSpec, split_all_reduce_plan


class GroupGradients:
    """Reduces one rank's accumulated gradients over its group and across the groups of ``hplan``
    (``comm``: the rank's HeteroComm; layouts on the group's virtual mesh, ``grp`` first)."""

    def __init__(self, hplan: Any, comm: Any, storage: dict[str, Sequence[Any]], shapes: dict[str, tuple[int, ...]]):
        import torch.distributed as dist

        self.hplan, self.comm, self.storage, self.shapes = hplan, comm, storage, shapes
        mine = {fqn: tuple(lay[1:]) for fqn, lay in storage.items()}
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, (hplan.group_of(dist.get_rank()), mine))   # each group's layouts
        self.layouts = {g: lays for g, lays in every}   # group index -> fqn -> its own storage layout
        self.meshes = {g.name: MeshSpec(tuple(g.mesh.axis_names), tuple(g.mesh.shape), tuple(g.ranks))
                       for g in hplan.groups}
        self.plans: dict[str, Any] = {}
        for fqn in sorted(storage):
            union = UnionShardingAttr(CrossPartial("sum"), tuple(ShardingAttr(g.name, self.layouts[k][fqn])
                                                                 for k, g in enumerate(hplan.groups)))
            self.plans[fqn] = split_all_reduce_plan(shapes[fqn], union, self.meshes)
        sets = sorted({ranks for plan in self.plans.values() for ranks in plan.reductions})
        for ranks in sets:   # new_group is collective over the job: every rank, the same order
            if ranks not in comm.subgroups:
                comm.subgroups[ranks] = dist.new_group(list(ranks))

    def reduce(self, grads: dict[str, tuple[Any, Sequence[Any]]], dtensor: Callable[[str, Any, Sequence[Any]], Any],
               relayout: Callable[[str, Any, Sequence[Any], Sequence[Any]], Any]) -> dict[str, Any]:
        """``{fqn: (local sum, layout on the virtual mesh)}`` → ``{fqn: local piece in its storage
        layout}``, summed over every rank of every group. ``dtensor(fqn, local, layout)`` and
        ``relayout(fqn, local, src, dst)`` take virtual-mesh layouts (``grp`` first)."""
        across = []
        for fqn, (_, lay) in sorted(grads.items()):
            head = lay[0]
            if isinstance(head, Partial) and head.op == "sum":
                across.append(fqn)
            elif not isinstance(head, Replicate):
                raise NotImplementedError(f"the accumulated gradient of '{fqn}' is laid out {head} across the device "
                                          "groups; only a cross-group partial sum (or a whole value) is reduced")

        def own(lay: Sequence[Any]) -> tuple[Any, ...]:
            return (Replicate(), *lay)

        inside = reduce_gradients({fqn: (g, tuple(lay[1:])) for fqn, (g, lay) in grads.items()},
                                  {fqn: tuple(self.storage[fqn][1:]) for fqn in grads}, CountingComm(self.comm),
                                  lambda fqn, g, lay: dtensor(fqn, g, own(lay)), lambda fqn, g, lay: g,
                                  lambda fqn, g, src, dst: relayout(fqn, g, own(src), own(dst)))
        if across:
            import torch.distributed as dist

            outs = run_split_all_reduces([self.plans[f] for f in across], [inside[f] for f in across],
                                         dist.get_rank(), self.comm.subgroups, self.comm.stats)
            inside.update(zip(across, outs))
        return inside


__all__ = ["GroupGradients"]
