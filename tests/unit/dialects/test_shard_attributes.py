"""Placements, the #shard attribute and torch.chunk-compatible chunk sizes."""

import pytest
import torch

from spmdc.dialects.shard import Partial, Replicate, Shard, ShardingAttr, chunk_sizes, parse_placement
from spmdc.ir import DiagnosticError, TensorType, parse_module, print_module

T2 = TensorType((8, 16), "f32")


@pytest.mark.parametrize("text,placement", [
    ("R", Replicate()), ("S(0)", Shard(0)), ("S(3)", Shard(3)),
    ("P(sum)", Partial("sum")), ("P(avg)", Partial("avg")), ("P(max)", Partial("max")),
    ("P(min)", Partial("min")), (" S(1) ", Shard(1)),
])
def test_parse_and_print_placement(text, placement):
    p = parse_placement(text)
    assert p == placement and str(p) == text.strip()


@pytest.mark.parametrize("bad", ["X", "S()", "S(a)", "P(prod)", "P()", "r", "S(1"])
def test_parse_placement_rejects(bad):
    with pytest.raises(ValueError):
        parse_placement(bad)


def test_placement_predicates():
    assert Replicate().is_replicate() and not Replicate().is_shard()
    assert Shard(1).is_shard() and Shard(1).is_shard(1) and not Shard(1).is_shard(0)
    assert Partial().is_partial() and Partial().op == "sum"
    assert repr(Shard(2)) == "Shard(2)" and repr(Partial("max")) == "Partial('max')"
    with pytest.raises(ValueError, match="unknown partial reduction 'prod'"):
        Partial("prod")


def test_sharding_attr_printing():
    s = ShardingAttr("mesh", (Shard(0), Replicate(), Partial("avg")))
    assert str(s) == "#shard<@mesh, [S(0), R, P(avg)]>"
    assert str(ShardingAttr("odd mesh", (Replicate(),))) == '#shard<@"odd mesh", [R]>'
    assert str(ShardingAttr("m", ())) == "#shard<@m, []>"
    assert ShardingAttr("m", (Replicate(), Replicate())).is_replicated()
    assert not s.is_replicated()


@pytest.mark.parametrize("s", [
    ShardingAttr("mesh", (Shard(0), Replicate())),
    ShardingAttr("mesh", (Shard(1), Shard(1))),
    ShardingAttr("mesh", (Partial("max"), Shard(0))),
    ShardingAttr("odd mesh", (Partial("min"),)),
    ShardingAttr("m", ()),
])
def test_sharding_attr_round_trip(s):
    m = parse_module("module {}")
    m.attributes["s"] = s
    m2 = parse_module(print_module(m))
    assert m2.attributes["s"] == s


def test_sharding_parse_error_points_at_bad_partial():
    with pytest.raises(DiagnosticError) as e:
        parse_module('module attributes {s = #shard<@m, [R, P(prod)]>} {}', "s.mlir")
    pos = e.value.diagnostic.position()
    assert (pos.file, pos.line, pos.col) == ("s.mlir", 1, 41)
    assert "unknown partial reduction 'prod'" in str(e.value)


def test_verify_for():
    axes = ("dp", "tp")
    assert ShardingAttr("mesh", (Shard(0), Shard(1))).verify_for(T2, axes) is None
    assert ShardingAttr("mesh", (Shard(1), Shard(1))).verify_for(T2, axes) is None
    assert ShardingAttr("mesh", (Partial(), Replicate())).verify_for(T2, axes) is None
    msg = ShardingAttr("mesh", (Shard(5), Replicate())).verify_for(T2, axes)
    assert msg == "placement S(5) on mesh axis 'dp' is out of range for rank-2 tensor tensor<8x16xf32>"
    msg = ShardingAttr("mesh", (Replicate(), Shard(-1))).verify_for(T2, axes)
    assert msg is not None and "S(-1) on mesh axis 'tp'" in msg
    msg = ShardingAttr("mesh", (Replicate(),)).verify_for(T2, axes)
    assert msg is not None and "1 placements" in msg and "2 axes" in msg
    assert ShardingAttr("nope", (Replicate(),)).verify_for(T2, None) == \
        "sharding refers to unknown mesh '@nope'"
    assert ShardingAttr("m", (Shard(0),)).verify_for(TensorType((), "f32"), ("x",)) is not None


def torch_chunk_sizes(size, parts):
    sizes = [c.shape[0] for c in torch.chunk(torch.empty(size), parts)]
    return sizes + [0] * (parts - len(sizes))


@pytest.mark.parametrize("parts", range(1, 9))
def test_chunk_sizes_match_torch_chunk(parts):
    for size in range(0, 21):
        got = chunk_sizes(size, parts)
        assert got == torch_chunk_sizes(size, parts), (size, parts)
        assert len(got) == parts and sum(got) == size


def test_chunk_sizes_examples():
    assert chunk_sizes(13, 4) == [4, 4, 4, 1]
    assert chunk_sizes(14, 4) == [4, 4, 4, 2]
    assert chunk_sizes(6, 4) == [2, 2, 2, 0]  # torch.chunk gives only 3 pieces
    assert chunk_sizes(0, 3) == [0, 0, 0]
    with pytest.raises(ValueError):
        chunk_sizes(4, 0)
