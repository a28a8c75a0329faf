"""Union layouts (HSPMD) from Python: relations, the one-group rule, each group's piece."""

from __future__ import annotations

import pytest

from spmdc.dialects.shard import (
    CrossPartial,
    Dup,
    Replicate,
    Shard,
    ShardingAttr,
    Split,
    UnionShardingAttr,
    parse_relation,
    union,
)
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.ir.types import TensorType


def test_relations_parse_and_print():
    assert parse_relation("split(0, [2, 1])") == Split(0, (2, 1))
    assert parse_relation("dup") == Dup() and str(Dup()) == "dup"
    assert parse_relation("partial(max)") == CrossPartial("max")
    assert str(Split(1, (3, 1))) == "split(1, [3, 1])"
    for bad, msg in [("split(0, [2, -1])", "positive"), ("partial(prod)", "unknown reduction"),
                     ("halves", "expected split")]:
        with pytest.raises(ValueError, match=msg):
            parse_relation(bad)


def test_one_group_is_its_plain_layout():
    g0 = ShardingAttr("g0", (Shard(1),))
    g1 = ShardingAttr("g1", (Replicate(),))
    assert union(Dup(), [g0]) == g0
    u = union(Split(0, (2, 1)), [g0, g1])
    assert isinstance(u, UnionShardingAttr) and u.groups == ("g0", "g1")
    assert str(u) == "#shard.union<split(0, [2, 1]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>"


def test_each_group_lays_out_its_piece_of_a_split():
    u = UnionShardingAttr(Split(0, (2, 1)), (ShardingAttr("g0", (Shard(1),)), ShardingAttr("g1", (Replicate(),))))
    parts = u.member_types(TensorType((6, 8), "f32"))
    assert [p.shape for p in parts] == [(4, 8), (2, 8)]
    dup = UnionShardingAttr(Dup(), u.members)
    assert [p.shape for p in dup.member_types(TensorType((6, 8), "f32"))] == [(6, 8), (6, 8)]


def test_round_trip_through_text():
    layout = "#shard.union<split(0, [2, 1]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>"
    text = f"""shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
func.func @f(%x: tensor<6x8xf32> {{shard.sharding = {layout}}}) -> tensor<6x8xf32> {{
  func.return %x : tensor<6x8xf32>
}}"""
    printed = print_module(parse_module(text, "<t>"))
    assert "devices = [4, 5]" in printed and "#shard.union<split(0, [2, 1])" in printed
    assert print_module(parse_module(printed, "<t>")) == printed
