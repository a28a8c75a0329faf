"""Rank side of ``test_bsr.py``: batched send/recv between union layouts on 6 gloo ranks."""

from __future__ import annotations

from typing import Any

import torch

from spmdc.dialects.shard import CrossPartial, Dup, Partial, Replicate, Shard, ShardingAttr, Split, UnionShardingAttr
from spmdc.runtime.bsr import MeshSpec, bsr_plan, pieces

MESHES = {"g0": MeshSpec(("tp",), (4,), (0, 1, 2, 3)), "g1": MeshSpec(("tp",), (2,), (4, 5)),
          "all": MeshSpec(("dp",), (6,), (0, 1, 2, 3, 4, 5)),
          "grid": MeshSpec(("a", "b"), (3, 2), (5, 4, 3, 2, 1, 0))}


def _u(rel, *members):
    return UnionShardingAttr(rel, tuple(ShardingAttr(m, tuple(p)) for m, p in members))


CASES = {
    # a batch split 2:1 over tp=4 / tp=2 replicas -> duplicated, each group its own tp layout
    "split_to_dup": ((12, 5), _u(Split(0, (2, 1)), ("g0", [Shard(1)]), ("g1", [Replicate()])),
                     _u(Dup(), ("g0", [Shard(0)]), ("g1", [Shard(1)]))),
    # a cross-group partial sum, @g0 itself partial over tp: 5 terms summed on arrival
    "partial_to_plain": ((7, 5), _u(CrossPartial("sum"), ("g0", [Partial("sum")]), ("g1", [Replicate()])),
                         ShardingAttr("all", (Shard(0),))),
    # uneven torch.chunk rows on 6 ranks -> split 1:2 across the groups
    "plain_to_split": ((13, 3), ShardingAttr("all", (Shard(0),)),
                       None),   # filled below (13 rows do not split 1:2; 12 do)
    # a 2-D group over reversed ranks, partial on one axis -> replicated everywhere
    "grid_partial_to_dup": ((5, 6), ShardingAttr("grid", (Partial("sum"), Shard(1))),
                            _u(Dup(), ("g0", [Replicate()]), ("g1", [Shard(0)]))),
}
CASES["plain_to_split"] = ((12, 3), ShardingAttr("all", (Shard(0),)),
                           _u(Split(0, (1, 2)), ("g0", [Shard(1)]), ("g1", [Shard(0)])))


def terms_for(shape, src):
    """One integer-valued tensor per partial term of ``src`` (exact sums); their sum is the value."""
    g = torch.Generator().manual_seed(7)
    keys = sorted({p.term for p in pieces(shape, src, MESHES)}, key=lambda t: (t is None, t or ()))
    return {k: torch.randint(-50, 50, shape, generator=g).float() for k in keys}


def _cut(full, box):
    for d, (s, e) in enumerate(box):
        full = full.narrow(d, s, e - s)
    return full.contiguous()


def bsr_six() -> dict[str, Any]:
    import torch.distributed as dist

    from spmdc.runtime.bsr import run_bsr

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out: dict[str, Any] = {}
    try:
        for name, (shape, src, dst) in CASES.items():
            terms = terms_for(shape, src)
            plan = bsr_plan(shape, src, dst, MESHES)
            mine = next((p for p in plan.src if p.device == rank), None)
            local = _cut(terms[mine.term], mine.box) if mine is not None else None
            got = run_bsr(plan, local, rank)
            out[name] = {"piece": got, "box": next((p.box for p in plan.dst if p.device == rank), None),
                         "messages": plan.messages, "sent": plan.bytes_sent(rank)}
    finally:
        dist.destroy_process_group()
    return out


SPLIT_CASES = {
    # replicas' gradients: @g0 rows over tp=4, @g1 columns over tp=2 -> 8 cells, each on 2 ranks
    "rows_vs_columns": ((12, 6), _u(CrossPartial("sum"), ("g0", [Shard(0)]), ("g1", [Shard(1)]))),
    # @g1 replicated: each @g0 row block on 3 ranks, ranks 4 and 5 one term (5 adds zero)
    "rows_vs_replicated": ((10, 3), _u(CrossPartial("sum"), ("g0", [Shard(0)]), ("g1", [Replicate()]))),
}


def split_six() -> dict[str, Any]:
    import torch.distributed as dist

    from spmdc.runtime.split_collectives import make_groups, run_split_all_reduce, split_all_reduce_plan

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out: dict[str, Any] = {}
    try:
        for name, (shape, layout) in SPLIT_CASES.items():
            terms = terms_for(shape, layout)
            plan = split_all_reduce_plan(shape, layout, MESHES)
            groups = make_groups(plan)
            mine = next(p for p in plan.pieces if p.device == rank)
            got = run_split_all_reduce(plan, _cut(terms[mine.term], mine.box), rank, groups)
            out[name] = {"piece": got, "box": mine.box, "collectives": plan.collectives}
    finally:
        dist.destroy_process_group()
    return out
