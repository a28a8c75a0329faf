"""Plans: resolution, presets and every invalid-plan error (issue 4, item 2)."""

import json

import pytest

from spmdc.dialects.shard import Partial, Replicate, Shard
from spmdc.sharding.mesh import Mesh, to_placement, to_placements
from spmdc.sharding.plan import ParamLayout, Plan, PlanError, preset

PARAMS = {"fc1.weight": (32, 16), "fc1.bias": (32,), "fc2.weight": (8, 32), "fc2.bias": (8,)}
MESH = Mesh({"dp": 2, "tp": 2})


def test_mesh_api_and_coords():
    m = Mesh({"dp": 2, "tp": 4})
    assert m.axis_names == ("dp", "tp") and m.shape == (2, 4) and m.size == 8
    assert m.coords(5) == {"dp": 1, "tp": 1}
    assert Mesh.parse("dp=2,tp=2") == Mesh({"dp": 2, "tp": 2})
    with pytest.raises(ValueError, match="size 0"):
        Mesh({"dp": 0})


def test_placements_from_text_dtensor_and_dicts():
    from torch.distributed.tensor import Partial as DPartial
    from torch.distributed.tensor import Replicate as DReplicate
    from torch.distributed.tensor import Shard as DShard

    assert to_placement("S(1)") == Shard(1)
    assert to_placement(DShard(0)) == Shard(0)
    assert to_placement(DReplicate()) == Replicate()
    assert to_placement(DPartial()) == Partial("sum")
    assert to_placements({"tp": "S(0)"}, MESH) == (Replicate(), Shard(0))
    assert to_placements("S(0),R", MESH) == (Shard(0), Replicate())
    with pytest.raises(ValueError, match="2 axes"):
        to_placements(["R"], MESH)


def test_storage_and_compute_resolution():
    plan = Plan({"*.weight": ParamLayout({"dp": "S(0)"}, {"dp": "R"})})
    r = plan.resolve_params(MESH, PARAMS)
    assert r["fc1.weight"].storage == (Shard(0), Replicate())
    assert r["fc1.weight"].compute == (Replicate(), Replicate())
    assert r["fc1.bias"].storage == (Replicate(), Replicate())  # unnamed: replicated


def test_pattern_matching_nothing_lists_near_matches():
    with pytest.raises(PlanError, match=r"'fc3.weight' matches no parameter; near matches: .*fc1.weight"):
        Plan({"fc3.weight": "S(0),R"}).resolve_params(MESH, PARAMS)


def test_unknown_mesh_axis():
    with pytest.raises(PlanError, match=r"unknown mesh axis 'pp' \(mesh axes: dp, tp\)"):
        Plan({"fc1.weight": {"pp": "S(0)"}}).resolve_params(MESH, PARAMS)


def test_shard_dim_out_of_range_names_parameter():
    with pytest.raises(PlanError, match=r"parameter 'fc1.bias': storage placement S\(1\) on mesh axis 'tp' "
                                        r"is out of range for a rank-1 tensor"):
        Plan({"fc1.bias": {"tp": "S(1)"}}).resolve_params(MESH, PARAMS)


def test_two_patterns_disagreeing():
    plan = Plan({"fc1.*": {"tp": "S(0)"}, "*.weight": {"tp": "S(1)"}})
    with pytest.raises(PlanError,
                       match=r"parameter 'fc1.weight': plan patterns 'fc1.\*' .* and '\*.weight' .* disagree"):
        plan.resolve_params(MESH, PARAMS)


def test_two_patterns_agreeing_is_fine():
    plan = Plan({"fc1.*": {"tp": "S(0)"}, "*1.weight": {"tp": "S(0)"}})
    assert plan.resolve_params(MESH, PARAMS)["fc1.weight"].storage == (Replicate(), Shard(0))


def test_uneven_sizes_are_accepted():
    r = Plan({"fc2.bias": {"tp": "S(0)"}}).resolve_params(Mesh({"tp": 3}), PARAMS)
    assert r["fc2.bias"].storage == (Shard(0),)


def test_plan_files(tmp_path):
    data = {"params": {"*.weight": {"storage": ["S(0)", "R"], "compute": ["R", "R"]}}, "inputs": [["S(0)", "R"]]}
    (tmp_path / "p.json").write_text(json.dumps(data))
    (tmp_path / "p.yaml").write_text("params:\n  '*.weight': {storage: ['S(0)', 'R'], compute: ['R', 'R']}\n"
                                     "inputs: [['S(0)', 'R']]\n")
    for name in ("p.json", "p.yaml"):
        plan = Plan.load(str(tmp_path / name))
        r = plan.resolve_params(MESH, PARAMS)
        assert r["fc2.weight"].storage == (Shard(0), Replicate())
        assert plan.resolve_inputs(MESH, [(8, 16)], ["x"]) == [(Shard(0), Replicate())]


def test_presets():
    mega = preset("megatron", Mesh({"tp": 2}), PARAMS).resolve_params(Mesh({"tp": 2}), PARAMS)
    assert mega["fc1.weight"].storage == (Shard(0),) and mega["fc1.bias"].storage == (Shard(0),)
    assert mega["fc2.weight"].storage == (Shard(1),) and mega["fc2.bias"].storage == (Replicate(),)
    fsdp = preset("fsdp", Mesh({"dp": 2}), PARAMS).resolve_params(Mesh({"dp": 2}), PARAMS)
    assert fsdp["fc1.bias"].storage == (Shard(0),) and fsdp["fc1.bias"].compute == (Replicate(),)
    two = preset("fsdp+tp", MESH, PARAMS).resolve_params(MESH, PARAMS)
    assert two["fc1.weight"].storage == (Shard(1), Shard(0))   # tp has dim 0: dp takes dim 1
    assert two["fc2.weight"].storage == (Shard(0), Shard(1))
    assert two["fc1.bias"].storage == (Replicate(), Shard(0))
    with pytest.raises(PlanError, match="unknown plan preset 'fdsp'.*did you mean 'fsdp'"):
        preset("fdsp", MESH, PARAMS)
    with pytest.raises(PlanError, match="needs mesh axis 'tp'"):
        preset("megatron", Mesh({"dp": 2}), PARAMS)


@pytest.mark.parametrize("mesh,plan,later", [
    (Mesh({"dp": 2}), "dp", True),              # replicated storage, the batch split: summed by the caller
    (Mesh({"dp": 2}), "fsdp", False),           # sharded along the batch: reduce-scattered in the program
    (Mesh({"rep": 2, "dp": 2}), "hsdp", False),  # sharded along dp (one axis suffices)
    (Mesh({"tp": 2}), "megatron", False),       # nothing splits the batch
    (Mesh({"dp": 1}), "dp", False),             # an axis of one rank splits nothing
])
def test_a_stage_leaves_replicated_gradients_to_its_caller(mesh, plan, later):
    """``partial_grads="replicated"`` (a pipeline stage's training program): gradients come back
    unreduced (pending sums where the batch is split) only where every trained parameter is stored
    replicated along the axes that split it; else reduced to the storage layout in the program."""
    from spmdc.api.pipeline_boundaries import program_layouts
    from spmdc.compiler.driver import compile_global
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.gradients import reduction_moves

    w = load_workload("mlp", batch=4)
    step = compile_global(w.model, w.inputs, mesh=mesh, plan=plan, train=True, loss_fn=w.loss_fn,
                          loss_inputs=w.loss_inputs, partial_grads="replicated")
    whole = compile_global(w.model, w.inputs, mesh=mesh, plan=plan, train=True, loss_fn=w.loss_fn,
                           loss_inputs=w.loss_inputs)
    args, res, arg_kinds, res_kinds = program_layouts(step.rank_module(0), step, range(len(step.result_kinds)))
    storage = {k[6:]: tuple(lay) for k, lay in zip(arg_kinds, args) if k.startswith("param:")}
    left = {k[5:]: tuple(lay) for k, lay in zip(res_kinds, res) if k.startswith("grad:")}
    assert len(left) == 4
    if later:
        assert all(any(isinstance(p, Partial) for p in lay) for lay in left.values())
        assert all(all(m[0] == "all_reduce" for m in reduction_moves(lay, storage[n])) for n, lay in left.items())
        assert step.global_ir.count("comm.all_reduce") < whole.global_ir.count("comm.all_reduce")
    else:
        assert left == {n: storage[n] for n in left}
        assert step.global_ir == whole.global_ir


def test_an_unknown_partial_grads_mode_is_refused_by_name():
    from spmdc.compiler.driver import compile_global
    from spmdc.frontend.workloads import load_workload

    w = load_workload("mlp", batch=4)
    with pytest.raises(ValueError, match=r"partial_grads='sharded': expected False .* True .* or 'replicated'"):
        compile_global(w.model, w.inputs, mesh=Mesh({"dp": 2}), plan="dp", train=True, loss_fn=w.loss_fn,
                       loss_inputs=w.loss_inputs, partial_grads="sharded")
