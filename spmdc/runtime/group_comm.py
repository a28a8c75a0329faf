"""Running a heterogeneous plan: each rank in its device group, cross-group ops on subgroups.

    cm = spmdc.compile(model, (x, y), plan=Plan.load("examples/hetero_dp.yaml"), train=True, ...)

Every rank builds every group's ``DeviceMesh`` (creating process groups is collective), runs its
group's program at its coordinates on the group's virtual mesh (``grp`` = its group, see
:mod:`spmdc.sharding.device_groups`) with :class:`HeteroComm`: the group's own axes are the group's
process groups, ``grp`` has no process group — its collectives are ``comm.split_all_reduce``,
on the subgroups of the ranks holding each slice (made once per program, on every rank in the
same order), and ``comm.bsr``, point to point.
"""

from __future__ import annotations

from typing import Any

from spmdc.runtime.bsr import run_bsr
from spmdc.runtime.collectives import Collectives
from spmdc.runtime.split_collectives import run_split_all_reduces
from spmdc.sharding.device_groups import GROUP_AXIS, HeteroPlan
from spmdc.sharding.slices import MeshSpec, box_numel, split_all_reduce_plan


def group_meshes(hplan: HeteroPlan, device: str) -> list[Any]:
    """Every group's DeviceMesh (every rank of the job calls this, in the same order)."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    return [DeviceMesh(device, torch.tensor(g.ranks).reshape(g.mesh.shape), mesh_dim_names=g.mesh.axis_names)
            for g in hplan.groups]


class HeteroComm(Collectives):
    """The collectives of one rank of group ``index`` (see the module doc)."""

    def __init__(self, device_mesh: Any, index: int, n_groups: int, rank: int):
        super().__init__(device_mesh)
        self.index, self.n_groups, self.job_rank = index, n_groups, rank
        self.tables: dict[int, list[Any]] = {}        # seq -> the split plan of each operand
        self.subgroups: dict[tuple[int, ...], Any] = {}
        self._last_seq = -1

    def group(self, axis: str) -> Any:
        if axis == GROUP_AXIS:
            raise RuntimeError(f"mesh axis '{GROUP_AXIS}' spans device groups of different layouts: it has no "
                               "process group (cross-group moves run as comm.split_all_reduce)")
        return super().group(axis)

    def size(self, axis: str) -> int:
        return self.n_groups if axis == GROUP_AXIS else super().size(axis)

    def coord(self, axis: str) -> int:
        return self.index if axis == GROUP_AXIS else super().coord(axis)

    def register(self, module: Any) -> None:
        """Learn a program's ``comm.split_all_reduce`` ops (their slice tables) and make the
        subgroups they reduce over. Collective: every rank registers its program together."""
        import torch.distributed as dist

        from spmdc.dialects.comm import BsrOp, SplitAllReduceOp
        from spmdc.dialects.shard import MeshOp
        from spmdc.sharding.slices import bsr_plan

        meshes = {op.sym_name: MeshSpec.of(op) for op in module.body.ops if isinstance(op, MeshOp)}
        sets: set[tuple[int, ...]] = set()
        tables: dict[int, list[Any]] = {}
        for op in module.walk():
            if isinstance(op, SplitAllReduceOp):
                tables[op.seq] = [split_all_reduce_plan(shape, u, meshes)
                                  for u, shape in zip(op.unions, op.global_shapes)]
                sets |= set(op.holder_sets)
            elif isinstance(op, BsrOp):
                tables[op.seq] = bsr_plan(op.global_shape, op.attributes["from"], op.attributes["to"], meshes)
        for ranks in sorted(sets):   # new_group is collective over the job: same order everywhere
            if ranks not in self.subgroups:
                self.subgroups[ranks] = dist.new_group(list(ranks))
        self.tables.update(tables)

    def _next(self, seq: int, what: str) -> Any:
        if seq not in self.tables:
            raise RuntimeError(f"{what} #{seq} was not registered (HeteroComm.register)")
        if seq != 0 and seq != self._last_seq + 1:
            raise RuntimeError(f"cross-group collective #{seq} issued after #{self._last_seq}: every group must "
                               "issue them in the same order")
        self._last_seq = seq
        return self.tables[seq]

    def split_all_reduce(self, xs: list[Any], seq: int, op: str) -> list[Any]:
        """``comm.split_all_reduce``: one all-reduce per subgroup this rank is in, every operand's
        slices for it packed together. Issued in ``seq`` order in every group (checked here)."""
        plans = self._next(seq, "comm.split_all_reduce")
        return run_split_all_reduces(plans, xs, self.job_rank, self.subgroups, self.stats)

    def bsr(self, x: Any, seq: int) -> Any:
        """``comm.bsr``: this rank's destination piece, by one ``batch_isend_irecv`` (counted as
        one ``comm.bsr`` per message this rank sends or receives, bytes sent and received)."""
        plan = self._next(seq, "comm.bsr")
        for (s, d), cells in plan.sends.items():
            if s != d and self.job_rank in (s, d):
                self.stats.add("comm.bsr", sum(box_numel(c) for c, _, _ in cells) * x.element_size())
        return run_bsr(plan, x, self.job_rank)

