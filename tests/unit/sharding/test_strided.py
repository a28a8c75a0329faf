"""Strided shards ``SS(d, k)`` (DTensor's ``_StridedShard``): the placement, its rules, and the
fused-QKV layouts ``megatron`` gives (HF GPT-2's ``c_attn``, a packed ``qkv``)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "models"))
import hf_tiny  # noqa: E402
import packed_qkv  # noqa: E402

from spmdc.compiler import compile_step  # noqa: E402
from spmdc.dialects.comm import collective_kind  # noqa: E402
from spmdc.dialects.shard import Replicate, Shard, StridedShard, parse_placement  # noqa: E402
from spmdc.dialects.shard.rules import reshape_rule  # noqa: E402
from spmdc.ir.diagnostics import DiagnosticError  # noqa: E402
from spmdc.ir.parser import parse_module  # noqa: E402
from spmdc.ir.printer import print_module  # noqa: E402
from spmdc.ir.types import TensorType  # noqa: E402
from spmdc.ir.verifier import verify  # noqa: E402
from spmdc.sharding.mesh import Mesh, local_shape, to_placement, to_placements  # noqa: E402
from spmdc.sharding.plan import Plan, PlanError, preset  # noqa: E402
from spmdc.sharding.planner import plan_redistribution  # noqa: E402
from spmdc.sharding.strategy import axis_strategies  # noqa: E402

F32 = "f32"


def _module(sharding: str, shape: str = "32x96") -> str:
    return f"""shard.mesh @m = <["dp" = 2, "tp" = 4]>
func.func @f(%w: tensor<{shape}xf32> {{shard.sharding = #shard<@m, {sharding}>}}) -> tensor<{shape}xf32> {{
  func.return %w : tensor<{shape}xf32>
}}"""


def test_round_trip_in_ir_text():
    text = _module("[S(0), SS(1, 3)]")
    printed = print_module(parse_module(text, "<t>"))
    assert "#shard<@m, [S(0), SS(1, 3)]>" in printed
    assert print_module(parse_module(printed, "<t>")) == printed


@pytest.mark.parametrize("sharding,message", [
    ("[R, SS(1, 1)]", "at least 2 parts"),
    ("[R, SS(1, 5)]", "does not split into 5 equal parts"),
    ("[S(1), SS(1, 3)]", "sharded by one axis only"),
    ("[R, SS(2, 3)]", "out of range"),
])
def test_invalid_strided_shards_are_refused_with_a_location(sharding, message):
    with pytest.raises(DiagnosticError) as e:
        verify(parse_module(_module(sharding), "w.mlir"))
    pos = e.value.diagnostic.position()
    assert message in str(e.value) and pos is not None and pos.file == "w.mlir" and pos.line == 2


def test_python_spellings():
    assert parse_placement("SS(1, 3)") == parse_placement("SS(1,3)") == StridedShard(1, 3)
    assert to_placements("[R, SS(1, 3)]", Mesh({"dp": 2, "tp": 4})) == (Replicate(), StridedShard(1, 3))
    from torch.distributed.tensor.placement_types import _StridedShard

    assert to_placement(_StridedShard(1, split_factor=3)) == StridedShard(1, 3)
    assert to_placement(_StridedShard(0, split_factor=1)) == Shard(0)


def test_local_shape_holds_a_piece_of_every_part():
    # 3 parts of 6 over 4 ranks: torch.chunk pieces 2, 2, 2, 0 of each part
    assert [local_shape((4, 18), (StridedShard(1, 3),), (4,), (c,)) for c in range(4)] == \
        [(4, 6), (4, 6), (4, 6), (4, 0)]


def test_plan_refuses_a_strided_shard_that_does_not_fit():
    plan = Plan({"w": {"tp": "SS(1, 3)"}})
    with pytest.raises(PlanError, match="parameter 'w'.*does not split into 3 equal parts"):
        plan.resolve_params(Mesh({"tp": 2}), {"w": (4, 8)})


def test_reshape_sees_the_merged_dim_strided():
    rule = reshape_rule(TensorType((2, 4, 96), F32), TensorType((2, 4, 3, 4, 8), F32))
    heads = [s for s in axis_strategies(rule, 4) if s.results[0] == Shard(3)]
    assert heads and heads[0].operands[0] == StridedShard(2, 3)


def test_planner_moves_to_and_from_strided_shards_with_one_collective():
    ss = StridedShard(1, 3)
    assert [(s.kind, s.parts) for s in plan_redistribution((ss,), (Replicate(),), 2, 1e6, (4,))] == \
        [("all_gather", 3)]
    assert [(s.kind, s.parts) for s in plan_redistribution((Replicate(),), (ss,), 2, 1e6, (4,))] == \
        [("all_slice", 3)]
    from spmdc.dialects.shard import Partial

    assert [(s.kind, s.parts) for s in plan_redistribution((Partial(),), (ss,), 2, 1e6, (4,))] == \
        [("reduce_scatter", 3)]


def test_megatron_shards_gpt2_conv1d_and_fused_qkv_by_heads():
    model = hf_tiny.build("gpt2")
    from spmdc.compiler.driver import conv1d_modules, heads_of

    params = {n: tuple(p.shape) for n, p in model.named_parameters()}
    plan = preset("megatron", Mesh({"tp": 4}), params, heads=heads_of(model), transposed=conv1d_modules(model))
    r = plan.resolve_params(Mesh({"tp": 4}), params)
    h = "transformer.h.0."
    assert r[h + "attn.c_attn.weight"].storage == (StridedShard(1, 3),)   # Conv1D [in, 3*out]
    assert r[h + "attn.c_attn.bias"].storage == (StridedShard(0, 3),)
    assert r[h + "attn.c_proj.weight"].storage == (Shard(0),)             # row-parallel of [in, out]
    assert r[h + "mlp.c_fc.weight"].storage == (Shard(1),)
    assert r[h + "mlp.c_proj.weight"].storage == (Shard(0),)
    # 3 heads do not split over 2 ranks: the fused projection stays replicated
    plan = preset("megatron", Mesh({"tp": 2}), params, heads={"transformer.h.0.attn": 3},
                  transposed=conv1d_modules(model))
    assert plan.resolve_params(Mesh({"tp": 2}), params)[h + "attn.c_attn.weight"].storage == (Replicate(),)


def _counts(step) -> Counter:
    return Counter(collective_kind(op) for op in step.rank_module(0).walk() if collective_kind(op))


@pytest.mark.parametrize("tp", [2, 4])
def test_hf_gpt2_megatron_communicates_the_analytic_optimum(tp):
    ids, labels = hf_tiny.batch()
    step = compile_step(hf_tiny.build("gpt2"), (), mesh=Mesh({"tp": tp}), plan="megatron", train=True,
                        kwargs={"input_ids": ids, "labels": labels})
    # per layer: one all-reduce after attention and one after the MLP, forward and backward
    assert _counts(step) == Counter({"comm.all_reduce": 2 * 2 * 2})


def test_packed_qkv_megatron_communicates_the_analytic_optimum():
    model, ((x,), (y,)), loss = packed_qkv.vit()
    step = compile_step(model, (x,), mesh=Mesh({"tp": 4}), plan="megatron", train=True, loss_fn=loss,
                        loss_inputs=(y,))
    assert _counts(step) == Counter({"comm.all_reduce": 2 * 2 * 2})


def test_phi3_fused_qkv_and_gate_up_communicate_the_analytic_optimum():
    """Phi-3 packs q|k|v (qkv_proj, sliced; its backward writes the three parts with
    slice_scatter) and gate|up (gate_up_proj, chunked in two): SS(0, 3) and SS(0, 2)."""
    ids, labels = hf_tiny.batch()
    model = hf_tiny.build("phi3")
    step = compile_step(model, (), mesh=Mesh({"tp": 2}), plan="megatron", train=True,
                        kwargs={"input_ids": ids, "labels": labels})
    assert _counts(step) == Counter({"comm.all_reduce": 2 * 2 * 2})


def test_packed_projection_of_unequal_parts_stays_replicated():
    # grouped-query qkv_proj: 4 query heads and 2 key/value heads of 8 -> [32 + 16 + 16, 32]
    params = {"l.0.attn.qkv_proj.weight": (64, 32), "l.0.mlp.gate_up_proj.weight": (128, 32)}
    r = preset("megatron", Mesh({"tp": 2}), params).resolve_params(Mesh({"tp": 2}), params)
    assert r["l.0.attn.qkv_proj.weight"].storage == (Replicate(),)
    assert r["l.0.mlp.gate_up_proj.weight"].storage == (StridedShard(0, 2),)


def test_gpt_neox_megatron_compiles():
    """GPT-NeoX's rotary split writes size-1 parts back with slice_scatter (an insert_slice whose
    written part broadcasts): the rule falls back to the aligned one instead of failing."""
    ids, labels = hf_tiny.batch()
    step = compile_step(hf_tiny.build("gpt_neox"), (), mesh=Mesh({"tp": 2}), plan="megatron", train=True,
                        kwargs={"input_ids": ids, "labels": labels})
    assert "comm.all_to_all" not in _counts(step)
