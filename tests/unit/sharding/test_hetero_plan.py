"""Heterogeneous plans: parsing and its errors, the virtual mesh, and the cross-group resolution
of real programs (gpt2-tiny, megatron tp=4 + tp=2) without ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from spmdc.sharding.device_groups import HeteroPlan
from spmdc.sharding.plan import Plan, PlanError

ROOT = Path(__file__).resolve().parents[3]


def plan(**changes):
    d = {"groups": [{"ranks": [0, 1, 2, 3], "mesh": "tp=4", "plan": "megatron", "share": 2},
                    {"ranks": [4, 5], "mesh": "tp=2", "plan": "megatron", "share": 1}]}
    for i, g in changes.pop("group", {}).items():
        d["groups"][i] = {**d["groups"][i], **g}
    d.update(changes)
    return d


def test_example_file_is_a_hetero_plan():
    p = Plan.load(str(ROOT / "examples" / "hetero_dp.yaml"))
    assert isinstance(p, HeteroPlan)
    assert p.world == 6 and p.batch == 6
    assert [g.name for g in p.groups] == ["fast", "slow"]
    assert p.virtual_mesh(1).axis_names == ("grp", "tp") and p.virtual_mesh(1).shape == (2, 2)
    assert [p.virtual_rank(0, r) for r in range(4)] == [0, 1, 2, 3]
    assert [p.virtual_rank(1, r) for r in (4, 5)] == [2, 3]   # (grp=1, tp=0..1) on the 2x2 mesh
    assert p.split_sizes(6, "x") == (4, 2)


@pytest.mark.parametrize("changes, message", [
    ({"group": {1: {"ranks": [3, 4]}}}, "rank 3 is also in group 'g0'"),
    ({"group": {1: {"ranks": [4, 6]}}}, "rank 5 is in no group"),
    ({"group": {1: {"mesh": "tp=4"}}}, "has 4 devices but the group has 2 ranks"),
    ({"group": {1: {"share": 0}}}, "'share' must be a positive integer"),
    ({"group": {1: {"shares": 1}}}, "unknown key 'shares'"),
    ({"group": {0: {"mesh": "grp=4"}}}, "mesh axis 'grp' is reserved"),
    ({"group": {0: {"plan": {"params": {"*": ["S(0)"]}}}}}, "a group's plan is a preset or refines one"),
    ({"group": {0: {"name": "mesh"}}}, "must be an identifier other than 'mesh'"),
    ({"groupz": []}, "did you mean 'groups'?"),
    ({"groups": [{"ranks": [0]}]}, "at least two device groups"),
    ({"batch": 0}, "'batch' must be a positive integer"),
])
def test_invalid_plans_are_refused_by_name(changes, message):
    with pytest.raises(PlanError, match=None) as e:
        HeteroPlan.from_dict(plan(**changes))
    assert message in str(e.value)


def test_a_batch_that_does_not_split_is_refused():
    with pytest.raises(PlanError, match="has 8 rows, which do not split 2:1"):
        HeteroPlan.from_dict(plan()).split_sizes(8, "input #0 (idx)")


def test_unknown_preset_in_a_group_is_refused_before_ranks():
    with pytest.raises(PlanError, match="group 'g1'.*unknown plan preset 'megatorn'"):
        HeteroPlan.from_dict(plan(group={1: {"plan": "megatorn"}})).check_presets()


def test_gpt2_groups_compile_to_split_all_reduces():
    from spmdc.compiler.device_groups import compile_groups
    from spmdc.compiler.driver import compile_rank
    from spmdc.frontend.workloads import load_workload
    from spmdc.ir.parser import parse_module

    hp = HeteroPlan.from_dict(plan())
    w = load_workload("gpt2-tiny", batch=6)
    steps = compile_groups(w.model, hp, inputs=w.inputs, train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs,
                           kwargs=w.kwargs)
    assert len(steps) == 2
    for step in steps:
        ir = step.global_ir
        # nothing moves data across the groups but the reductions (the batch stays split 4 + 2)
        grp_moves = [line for line in ir.splitlines() if 'axis = "grp"' in line]
        assert all("comm.all_slice" in line for line in grp_moves)   # local: a group keeps its rows
        assert 'axes = ["grp"' not in ir
        assert ir.count("comm.split_all_reduce") == 2
        assert "groups = [[0, 1, 2, 3, 4, 5], [0, 4], [1, 4], [2, 5], [3, 5]]" in ir
        assert "RS(0, [4, 2])" in ir
        parse_module(ir, "<t>")   # verifies
    # rank 5 (group 1, tp coordinate 1): its share of the batch is 2 rows
    prog = compile_rank(steps[1], hp.virtual_rank(1, 5))
    assert prog.comm_ops["comm.split_all_reduce"] == 2
    idx = prog.step.arg_kinds.index("input:idx")
    assert prog.module.body.ops  # the partitioned program
    func = next(op for op in prog.module.body.ops if getattr(op, "sym_name", "") == "main")
    assert tuple(func.args[idx].type.shape) == (2, 8)


def test_a_mean_over_a_batch_split_unevenly_is_never_a_mean_of_means():
    from spmdc.compiler.device_groups import compile_groups
    from spmdc.frontend.workloads import load_workload

    w = load_workload("mlp", batch=6)
    steps = compile_groups(w.model, HeteroPlan.from_dict(plan()), inputs=w.inputs, train=True, loss_fn=w.loss_fn,
                           loss_inputs=w.loss_inputs, kwargs=w.kwargs)
    for step in steps:
        assert "RS(0, [4, 2])" in step.global_ir
        assert 'op = "avg"' not in step.global_ir and "P(avg)" not in step.global_ir


def test_split_all_reduce_of_strided_pieces_pairs_each_part():
    # GPT-2's fused q|k|v weight is SS(1, 3) in both groups: each rank holds one (tp=4) or two
    # (tp=2) columns of each of the 3 parts; every part's columns meet their holders
    from spmdc.dialects.shard import CrossPartial, ShardingAttr, UnionShardingAttr
    from spmdc.sharding.mesh import to_placement
    from spmdc.sharding.slices import MeshSpec, split_all_reduce_plan

    meshes = {"g0": MeshSpec(("tp",), (4,), (0, 1, 2, 3)), "g1": MeshSpec(("tp",), (2,), (4, 5))}
    ss = (to_placement("SS(1, 3)"),)
    u = UnionShardingAttr(CrossPartial("sum"), (ShardingAttr("g0", ss), ShardingAttr("g1", ss)))
    plan = split_all_reduce_plan((2, 12), u, meshes)
    assert sorted(plan.reductions) == [(0, 4), (1, 4), (2, 5), (3, 5)]
    assert all(len(cells) == 3 for cells in plan.reductions.values())   # one cell per part
    rank0 = [p for p in plan.pieces if p.device == 0]
    assert [p.box[1] for p in rank0] == [(0, 1), (4, 5), (8, 9)]
    assert [p.at[1] for p in rank0] == [(0, 1), (3, 4), (6, 7)]      # local column k holds part k
