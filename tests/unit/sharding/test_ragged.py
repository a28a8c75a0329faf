"""Ragged shards ``RS(d, [u0, u1, ...])`` (veScale's RaggedShard): explicit per-rank pieces of a
dim, zero allowed — the placement, its checks, and the collectives it lowers to."""

from __future__ import annotations

import pytest

from spmdc.dialects.shard import Partial, RaggedShard, Replicate, Shard, parse_placement
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.ir.verifier import verify
from spmdc.passes.manager import PassManager
from spmdc.passes.registry import parse_pipeline
from spmdc.sharding.mesh import Mesh, local_offset, local_shape, to_placements
from spmdc.sharding.plan import Plan, PlanError
from spmdc.sharding.planner import plan_redistribution


def _module(sharding: str) -> str:
    return f"""shard.mesh @m = <["tp" = 4]>
func.func @f(%w: tensor<8x6xf32> {{shard.sharding = #shard<@m, {sharding}>}}) -> tensor<8x6xf32> {{
  func.return %w : tensor<8x6xf32>
}}"""


def test_round_trip_in_ir_text():
    printed = print_module(parse_module(_module("[RS(0, [3, 0, 5, 0])]"), "<t>"))
    assert "#shard<@m, [RS(0, [3, 0, 5, 0])]>" in printed
    assert print_module(parse_module(printed, "<t>")) == printed


@pytest.mark.parametrize("sharding,message", [
    ("[RS(0, [3, 0, 4, 0])]", "its units add up to 7, not dim 0's size 8"),
    ("[RS(0, [3, 5, 0])]", "gives 3 unit counts for 4 ranks"),
    ("[RS(2, [8, 0, 0, 0])]", "out of range"),
])
def test_invalid_ragged_shards_are_refused_with_a_location(sharding, message):
    with pytest.raises(DiagnosticError) as e:
        verify(parse_module(_module(sharding), "w.mlir"))
    pos = e.value.diagnostic.position()
    assert message in str(e.value) and pos is not None and pos.file == "w.mlir" and pos.line == 2


def test_python_spellings_and_local_pieces():
    rs = RaggedShard(0, (3, 0, 5, 0))
    assert parse_placement("RS(0, [3, 0, 5, 0])") == rs
    assert to_placements("[R, RS(0, [3, 0, 5, 0])]", Mesh({"dp": 2, "tp": 4})) == (Replicate(), rs)
    assert [local_shape((8, 6), (rs,), (4,), (c,)) for c in range(4)] == [(3, 6), (0, 6), (5, 6), (0, 6)]
    assert local_offset((8, 6), (rs,), (4,), (2,)) == (3, 0)
    with pytest.raises(ValueError, match="non-negative"):
        RaggedShard(0, (3, -1))


def test_planner_moves_with_the_explicit_sizes():
    rs = RaggedShard(0, (3, 0, 5, 0))
    steps = plan_redistribution((rs,), (Replicate(),), 2, 1e6, (4,))
    assert [(s.kind, s.sizes) for s in steps] == [("all_gather", (3, 0, 5, 0))]
    steps = plan_redistribution((Partial(),), (rs,), 2, 1e6, (4,))
    assert [(s.kind, s.sizes) for s in steps] == [("reduce_scatter", (3, 0, 5, 0))]
    steps = plan_redistribution((Shard(0),), (rs,), 2, 1e6, (4,))
    assert [(s.kind, s.sizes) for s in steps] == [("all_gather", ()), ("all_slice", (3, 0, 5, 0))]


def test_elementwise_ops_run_on_ragged_pieces_and_collectives_carry_the_sizes():
    text = """shard.mesh @m = <["tp" = 4]>
func.func @f(%w: tensor<8x6xf32> {shard.sharding = #shard<@m, [RS(0, [3, 0, 5, 0])]>}, %g: tensor<8x6xf32>)
    -> (tensor<8x6xf32>, tensor<8x6xf32> {shard.sharding = #shard<@m, [R]>}) {
  %0 = tensor.mul %w, %w : tensor<8x6xf32>
  %1 = tensor.sub %0, %g : tensor<8x6xf32>
  func.return %1, %w : tensor<8x6xf32>, tensor<8x6xf32>
}"""
    module = parse_module(text, "<t>")
    PassManager(parse_pipeline("sharding-propagation,insert-redistribution,lower-redistribution,partition{rank=2}")
                ).run(module)
    out = print_module(module)
    assert "tensor.mul %w, %w : tensor<5x6xf32>" in out
    assert 'comm.all_slice %g {axis = "tp", dim = 0, mesh = @m, sizes = [3, 0, 5, 0]}' in out
    assert 'comm.all_gather %w {axis = "tp", dim = 0, mesh = @m, sizes = [3, 0, 5, 0]}' in out


def test_a_collective_whose_sizes_do_not_cover_the_dim_is_refused():
    text = """shard.mesh @m = <["tp" = 4]>
func.func @f(%x: tensor<5x6xf32>) -> tensor<8x6xf32> attributes {spmdc.rank = 2} {
  %0 = comm.all_gather %x {axis = "tp", dim = 0, mesh = @m, sizes = [3, 0, 4, 0]} : (tensor<5x6xf32>) -> tensor<8x6xf32>
  func.return %0 : tensor<8x6xf32>
}"""
    with pytest.raises(DiagnosticError, match=r"'sizes' \[3, 0, 4, 0\] must give 4 sizes adding up to 8"):
        verify(parse_module(text, "<t>"))


def test_plans_take_ragged_parameters_and_inputs():
    got = Plan({"w": {"tp": "RS(0, [4, 0])"}}).resolve_params(Mesh({"tp": 2}), {"w": (4, 8)})
    assert got["w"].storage == (RaggedShard(0, (4, 0)),)
    with pytest.raises(PlanError, match="parameter 'w'.*add up to 3, not dim 0's size 4"):
        Plan({"w": {"tp": "RS(0, [3, 0])"}}).resolve_params(Mesh({"tp": 2}), {"w": (4, 8)})
    lay = Plan({}, inputs=[{"tp": "RS(0, [4, 0])"}]).resolve_inputs(Mesh({"tp": 2}), [(4, 8)], ["x"])
    assert lay == [(RaggedShard(0, (4, 0)),)]
