"""Hetu's three cases for moving between union layouts, each priced by the α-β cost model."""

from __future__ import annotations

import pytest

from spmdc.dialects.shard import CrossPartial, Dup, Replicate, Shard, ShardingAttr, Split, UnionShardingAttr
from spmdc.runtime.bsr import MeshSpec
from spmdc.sharding.union_resolution import resolve

MESHES = {"g0": MeshSpec(("tp",), (4,), (0, 1, 2, 3)), "g1": MeshSpec(("tp",), (2,), (4, 5))}


def _u(rel, a, b):
    return UnionShardingAttr(rel, (ShardingAttr("g0", tuple(a)), ShardingAttr("g1", tuple(b))))


def test_same_relation_runs_each_groups_own_collectives():
    src = _u(Split(0, (2, 1)), [Shard(1)], [Shard(0)])
    dst = _u(Split(0, (2, 1)), [Replicate()], [Replicate()])
    r = resolve((12, 1024), src, dst, MESHES)
    assert r.kind == "per-group" and set(r.candidates) == {"per-group", "bsr"}
    assert r.cost_us < r.candidates["bsr"]


def test_cross_group_partial_to_dup_takes_the_split_all_reduce_when_large():
    src = _u(CrossPartial("sum"), [Shard(0)], [Shard(1)])
    dst = _u(Dup(), [Shard(0)], [Shard(1)])
    r = resolve((4096, 4096), src, dst, MESHES)
    assert r.kind == "split-all-reduce" and "8 all-reduces" in r.detail
    assert r.candidates["split-all-reduce"] < r.candidates["bsr"]


def test_other_moves_are_batched_send_recv():
    src = _u(Split(0, (2, 1)), [Shard(1)], [Replicate()])
    dst = _u(Dup(), [Shard(0)], [Shard(1)])
    r = resolve((12, 5), src, dst, MESHES)
    assert r.kind == "bsr" and r.detail == "12 messages" and set(r.candidates) == {"bsr"}


def test_unmovable_is_refused():
    src = _u(CrossPartial("max"), [Shard(0)], [Shard(1)])
    with pytest.raises(ValueError, match="no way to move"):
        resolve((8, 8), src, _u(Dup(), [Shard(0)], [Shard(1)]), MESHES)
