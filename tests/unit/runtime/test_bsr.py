"""Batched send/recv between union layouts (HSPMD), Partial sources included, on 6 gloo ranks.

Sources are integer-valued, so every partial sum is exact: each rank's destination piece must
equal its box of the single-device value (the sum of the terms) bitwise. Message counts are
the (sender, receiver) pairs the slice table needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import bsr_workers as W  # noqa: E402

from spmdc.dialects.shard import Partial, ShardingAttr  # noqa: E402
from spmdc.runtime.bsr import bsr_plan, pieces  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.fixture(scope="module")
def six():
    return launch(W.bsr_six, 6, (), timeout_s=600)


@pytest.mark.parametrize("name", list(W.CASES))
def test_every_rank_gets_its_box_of_the_value(six, name):
    shape, src, dst = W.CASES[name]
    value = sum(W.terms_for(shape, src).values())
    for rank, r in six.items():
        got = r[name]
        if got["box"] is None:
            assert got["piece"] is None
            continue
        assert torch.equal(got["piece"], W._cut(value, got["box"])), (name, rank)


def test_partial_terms_are_counted_once():
    shape, src, _ = W.CASES["partial_to_plain"]
    assert len(W.terms_for(shape, src)) == 5   # 4 partial ranks of @g0 + @g1 (its two ranks duplicates)
    plan = bsr_plan(shape, src, ShardingAttr("all", (W.Shard(0),)), W.MESHES)
    # rank 3 holds row 6 (torch.chunk of 7 rows: 2, 2, 2, 1, 0, 0): one piece from each of
    # @g0's ranks (itself included, locally) and one from @g1 — either of its duplicates
    into3 = sorted(s for (s, d) in plan.sends if d == 3)
    assert into3[:4] == [0, 1, 2, 3] and len(into3) == 5 and into3[4] in (4, 5)
    assert not any(d in (4, 5) for (_, d) in plan.sends)   # they hold no rows of the destination


def test_message_counts(six):
    """split 2:1 (rows 0-7 on @g0, its 5 columns as torch.chunk gives them to 4 ranks: 2, 2, 1,
    0; rows 8-11 on both @g1 ranks) to dup (@g0: 3 rows per rank; @g1: columns 0-2 / 3-4):
    rank 0 takes the columns of ranks 1 and 2, rank 1 of 0 and 2, rank 2 of 0 and 1 plus row 8
    from one @g1 rank, rank 3 rows 9-11 from one @g1 rank (one message for all its slices), ranks 4
    and 5 rows 0-7 of their columns from two @g0 ranks each: 12 messages."""
    assert six[0]["split_to_dup"]["messages"] == 12
    plan = bsr_plan(*W.CASES["split_to_dup"], W.MESHES)
    per_receiver = {d: sorted(s for (s, dd) in plan.sends if dd == d and s != d) for d in range(6)}
    assert per_receiver[0] == [1, 2] and per_receiver[1] == [0, 2] and per_receiver[4] == [0, 1]
    assert per_receiver[5] == [1, 2] and len(per_receiver[2]) == 3 and len(per_receiver[3]) == 1


def test_refusals():
    grid = ShardingAttr("grid", (Partial("max"), W.Shard(1)))
    with pytest.raises(NotImplementedError, match="by sum"):
        bsr_plan((5, 6), grid, ShardingAttr("all", (W.Shard(0),)), W.MESHES)
    with pytest.raises(ValueError, match="Partial destination"):
        bsr_plan((5, 6), ShardingAttr("all", (W.Shard(0),)), ShardingAttr("all", (Partial("sum"),)), W.MESHES)
    assert len(pieces((5, 6), grid, W.MESHES)) == 6


@pytest.fixture(scope="module")
def six_split():
    return launch(W.split_six, 6, (), timeout_s=600)


@pytest.mark.parametrize("name,collectives", [("rows_vs_columns", 8), ("rows_vs_replicated", 4)])
def test_split_all_reduce_sums_each_slice_over_its_holders(six_split, name, collectives):
    shape, layout = W.SPLIT_CASES[name]
    value = sum(W.terms_for(shape, layout).values())
    for rank, r in six_split.items():
        assert torch.equal(r[name]["piece"], W._cut(value, r[name]["box"])), (name, rank)
        assert r[name]["collectives"] == collectives
