"""Split all-reduce (Hetu v2): reduce a cross-group partial value where every rank keeps its box.

When groups lay a value out differently and each holds a partial term of it (gradients of
replicas with different tensor-parallel layouts: ``#shard.union<partial(sum), [#shard<@g0, [S(0)]>,
#shard<@g1, [S(1)]>]>``), no single all-reduce fits: rank 0 of ``@g0`` holds rows 0-2, rank 4
of ``@g1`` columns 0-2. Cut the tensor at every box boundary; each finest slice is all-reduced
over exactly the ranks holding it, in every group, one term per group contributing (the other
holders of the same term add zero). Slices with the same holders share one all-reduce over
that subgroup:

    plan = split_all_reduce_plan((12, 6), union, meshes)
    groups = make_groups(plan)            # every rank, same order: torch.distributed.new_group
    out = run_split_all_reduce(plan, my_piece, rank, groups)   # my box, reduced

The result is the ``dup`` union of the same groups' layouts: each rank holds its own box of
the summed value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdc.sharding.slices import SplitAllReduce, box_inside, box_numel, box_view, split_all_reduce_plan


def make_groups(plan: SplitAllReduce) -> dict[tuple[int, ...], Any]:
    """One process group per set of ranks that reduce together; every rank of the job calls it
    (``new_group`` is collective), in the same order."""
    import torch.distributed as dist

    return {ranks: dist.new_group(list(ranks)) for ranks in sorted(plan.reductions)}


def run_split_all_reduce(plan: SplitAllReduce, local: Any, rank: int, groups: dict[tuple[int, ...], Any],
                         comm_stats: Any = None) -> Any:
    """This rank's box of the reduced value: one asynchronous all-reduce per subgroup it is in."""
    return run_split_all_reduces([plan], [local], rank, groups, comm_stats)[0]


def run_split_all_reduces(plans: Sequence[SplitAllReduce], locals_: Sequence[Any], rank: int,
                          groups: dict[tuple[int, ...], Any], comm_stats: Any = None) -> list[Any]:
    """Several values at once (a bucket): per subgroup this rank is in, every value's slices for
    it packed into one buffer, one asynchronous all-reduce. Values this rank holds no box of
    come back as None."""
    import torch
    import torch.distributed as dist

    mine = [[p for p in plan.pieces if p.device == rank] for plan in plans]   # a strided piece: several
    outs = [x.clone() if m else None for x, m in zip(locals_, mine)]
    sets = sorted({ranks for plan in plans for ranks in plan.reductions if rank in ranks})

    def where(i: int, cell: Any) -> Any:   # where this rank's local tensor holds the cell
        return next(p for p in mine[i] if box_inside(cell, p.box)).at

    pending = []
    for ranks in sets:
        members = [(i, cell) for i, plan in enumerate(plans) for cell in plan.reductions.get(ranks, [])]
        parts = []
        for i, cell in members:
            v = box_view(outs[i], cell, where(i, cell))
            parts.append(torch.zeros_like(v).reshape(-1) if (rank, cell) in plans[i].silent else v.reshape(-1))
        buf = torch.cat(parts).contiguous()
        if comm_stats is not None:
            comm_stats.add("comm.split_all_reduce", buf.numel() * buf.element_size())
        pending.append((dist.all_reduce(buf, group=groups[ranks], async_op=True), buf, members))
    for work, buf, members in pending:
        work.wait()
        at = 0
        for i, cell in members:
            n = box_numel(cell)
            v = box_view(outs[i], cell, where(i, cell))
            v.copy_(buf[at:at + n].view(v.shape))
            at += n
    return outs


__all__ = ["SplitAllReduce", "make_groups", "run_split_all_reduce", "run_split_all_reduces", "split_all_reduce_plan"]
