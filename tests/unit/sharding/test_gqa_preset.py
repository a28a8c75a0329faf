"""Grouped-query attention under ``megatron``: key/value projections are sharded only when tp
divides the number of key/value heads (whole heads per rank); otherwise they stay replicated,
so the reshape to heads moves no data (no all-to-all)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "models"))
import hf_tiny  # noqa: E402

from spmdc.compiler import compile_step  # noqa: E402
from spmdc.compiler.driver import kv_heads_of  # noqa: E402
from spmdc.dialects.comm import collective_kind  # noqa: E402
from spmdc.dialects.shard import Replicate, Shard  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402
from spmdc.sharding.plan import preset  # noqa: E402

PARAMS = {"l.0.attn.q_proj.weight": (32, 32), "l.0.attn.k_proj.weight": (16, 32),
          "l.0.attn.v_proj.weight": (16, 32), "l.0.attn.o_proj.weight": (32, 32)}


@pytest.mark.parametrize("tp,kv_sharded", [(2, True), (4, False)])
def test_kv_projections_are_sharded_only_by_whole_heads(tp, kv_sharded):
    plan = preset("megatron", Mesh({"tp": tp}), PARAMS, kv_heads={"l.0.attn": 2})
    r = plan.resolve_params(Mesh({"tp": tp}), PARAMS)
    assert r["l.0.attn.q_proj.weight"].storage == (Shard(0),)
    assert r["l.0.attn.o_proj.weight"].storage == (Shard(1),)
    want = (Shard(0),) if kv_sharded else (Replicate(),)
    assert r["l.0.attn.k_proj.weight"].storage == want == r["l.0.attn.v_proj.weight"].storage


def test_heads_are_read_from_the_model():
    model = hf_tiny.build("qwen2")
    heads = kv_heads_of(model)
    assert heads and set(heads.values()) == {2} and all(p.endswith("self_attn") for p in heads)
    from spmdc.examples import llama_tiny

    model = llama_tiny.factory()[0]
    assert kv_heads_of(model) == {f"layers.{i}.self_attn": layer.self_attn.n_kv_head
                                  for i, layer in enumerate(model.layers)}


@pytest.mark.parametrize("tp", [2, 4])
def test_qwen2_megatron_has_no_all_to_all(tp):
    model = hf_tiny.build("qwen2")
    ids, labels = hf_tiny.batch()
    step = compile_step(model, (), mesh=Mesh({"tp": tp}), plan="megatron", train=True,
                        kwargs={"input_ids": ids, "labels": labels})
    counts = Counter(collective_kind(op) for op in step.rank_module(0).walk() if collective_kind(op))
    assert "comm.all_to_all" not in counts
    # forward: one all-reduce after attention and one after the MLP per layer; backward the same
    assert counts["comm.all_reduce"] == 4 * 2
