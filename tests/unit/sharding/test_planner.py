"""The redistribution planner: single-step primitives and multi-axis plans."""

import pytest

from spmdc.dialects.shard import Partial, Replicate, Shard
from spmdc.sharding.planner import plan_redistribution

R, P = Replicate(), Partial("sum")


@pytest.mark.parametrize("size", [13, 14, 16])
@pytest.mark.parametrize("src,dst,kind", [
    ((Shard(0),), (R,), "all_gather"),
    ((R,), (Shard(0),), "all_slice"),
    ((P,), (R,), "all_reduce"),
    ((P,), (Shard(0),), "reduce_scatter"),
    ((Shard(0),), (Shard(1),), "all_to_all"),
])
def test_primitives_are_one_step(size, src, dst, kind):
    steps = plan_redistribution(src, dst, 2, size * size * 4, (4,))
    assert [s.kind for s in steps] == [kind]


def test_partial_on_two_axes_is_one_all_reduce():
    steps = plan_redistribution((P, P), (R, R), 2, 1 << 20, (2, 2))
    assert [(s.kind, s.axes) for s in steps] == [("all_reduce", (0, 1))]


def test_nested_shards_gather_inner_axis_first():
    # S(0) by dp then tp: the tp chunk is inside the dp chunk, so tp must be gathered first.
    steps = plan_redistribution((Shard(0), Shard(0)), (R, R), 2, 1 << 20, (2, 2))
    assert [(s.kind, s.axes) for s in steps] == [("all_gather", (1,)), ("all_gather", (0,))]


def test_independent_axes_need_no_trip_through_replicate():
    steps = plan_redistribution((Shard(0), P), (Shard(0), Shard(1)), 2, 1 << 20, (2, 2))
    assert [(s.kind, s.axes) for s in steps] == [("reduce_scatter", (1,))]


def test_plans_are_deterministic():
    a = plan_redistribution((Shard(1), P), (R, Shard(0)), 3, 1 << 20, (2, 4))
    b = plan_redistribution((Shard(1), P), (R, Shard(0)), 3, 1 << 20, (2, 4))
    assert a == b and a
