"""Nothing in a plan or mesh is silently ignored (issue 25): unknown keys, bad mesh strings and
mesh axes no layout uses are refused by name, with their place, before anything compiles."""

from __future__ import annotations

import warnings

import pytest

from spmdc.sharding.device_groups import HeteroPlan
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.pipeline_plan import PipelinePlan
from spmdc.sharding.plan import Plan, PlanError, axes_sharded_by, check_axes_used, preset, written_layouts

# -- unknown keys ---------------------------------------------------------------------------------

DICT_CASES = [
    (Plan.from_dict, {"parmas": {"*.weight": ["S(0)"]}},
     "plan['parmas']: unknown key 'parmas' in a plan (keys: params, inputs, outputs, reshard_after_forward, name, "
     "checkpoint, buckets, fsdp_shard, preset, mesh); did you mean 'params'?"),
    (Plan.from_dict, {"params": {"h.0.x": {"storage": ["S(0)"], "compue": ["R"]}}},
     "plan['params']['h.0.x']['compue']: unknown key 'compue' in the layout of plan pattern 'h.0.x' "
     "(keys: storage, compute); did you mean 'compute'?"),
    (Plan.from_dict, {"params": {"h.0.x": {"compute": ["R"]}}},
     "plan['params']['h.0.x']: the layout of plan pattern 'h.0.x' has no 'storage'"),
    (Plan.from_dict, {"preset": "fsdp", "bukets": "auto"}, "unknown key 'bukets' in a plan"),
    (Plan.from_dict, {"zzz": 1}, "plan['zzz']: unknown key 'zzz' in a plan (keys:"),   # no near match
    (HeteroPlan.from_dict, {"groups": [{"ranks": [0], "mesh": "tp=1", "plan": "megatron"},
                                       {"ranks": [1], "mesh": "tp=1", "plan": {"preset": "megatron", "nmae": "x"}}]},
     "plan['groups'][1]['plan']['nmae']: unknown key 'nmae' in a plan"),
    (HeteroPlan.from_dict, {"groups": [{"ranks": [0], "shares": 2}, {"ranks": [1]}]},
     "plan['groups'][0]['shares']: unknown key 'shares' in group #0 of a heterogeneous plan (keys: ranks, mesh, "
     "plan, share, name); did you mean 'share'?"),
    (HeteroPlan.from_dict, {"grups": []}, "plan['grups']: unknown key 'grups' in a heterogeneous plan"),
    (PipelinePlan.from_dict, {"stages": [{"ranks": [0]}, {"ranks": [1], "modles": ["h.1"]}]},
     "plan['stages'][1]['modles']: unknown key 'modles' in stage #1 of a pipeline plan (keys: modules, ranks, "
     "mesh, plan, name); did you mean 'modules'?"),
    (PipelinePlan.from_dict, {"stages": [{"ranks": [0]}, {"ranks": [1]}], "schedul": "gpipe"},
     "did you mean 'schedule'?"),
]


@pytest.mark.parametrize("build,data,message", DICT_CASES)
def test_unknown_key_of_a_dict_plan_is_refused_with_its_key_path(build, data, message):
    with pytest.raises(PlanError) as e:
        build(data)
    assert message in str(e.value)


FILE_CASES = [
    ("p.yaml", "name: mine\nparmas:\n  '*.weight': [S(0)]\n",
     "{f}:2:1: error: unknown key 'parmas' in a plan"),
    ("p.yaml", "params:\n  fc1.weight:\n    storage: [S(0)]\n    compue: [R]\n",
     "{f}:4:5: error: unknown key 'compue' in the layout of plan pattern 'fc1.weight' (keys: storage, compute); "
     "did you mean 'compute'?"),
    ("p.json", '{"params": {"fc1.weight": {"storage": ["S(0)"],\n   "compue": ["R"]}}}',
     "{f}:2:4: error: unknown key 'compue'"),
    ("g.yaml", "groups:\n  - {ranks: [0, 1], mesh: tp=2, plan: megatron}\n  - ranks: [2]\n    mesh: tp=1\n"
               "    plan: {preset: megatron, buckts: auto}\n",
     "{f}:5:30: error: unknown key 'buckts' in a plan"),
    ("s.yaml", "stages:\n  - {ranks: [0], modules: [h.0]}\n  - {ranks: [1], modules: [h.1], plna: dp}\n",
     "{f}:3:34: error: unknown key 'plna' in stage #1 of a pipeline plan"),
]


@pytest.mark.parametrize("name,text,message", FILE_CASES)
def test_unknown_key_of_a_plan_file_is_refused_at_its_line(name, text, message, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PlanError) as e:
        Plan.load(str(path))
    assert message.replace("{f}", str(path)) in str(e.value)


def test_every_known_key_is_still_accepted(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("name: full\nparams:\n  fc1.weight: {storage: [S(0)], compute: [R]}\n  fc2.weight: [S(1)]\n"
                    "inputs: [[S(0)], [S(0)]]\noutputs: [[S(0)]]\nreshard_after_forward: false\n"
                    "checkpoint: blocks\nbuckets: ['fc*']\nfsdp_shard: even\n")
    plan = Plan.load(str(path))
    assert (plan.name, plan.checkpoint, plan.buckets, plan.reshard_after_forward) == ("full", "blocks", ["fc*"], False)
    assert plan.params["fc1.weight"].compute == ["R"]
    path.write_text("preset: fsdp\ncheckpoint: blocks/2\n")
    assert Plan.load(str(path)).checkpoint == "blocks/2"
    path.write_text("preset: fsdp\ncheckpoint: layers\n")
    with pytest.raises(PlanError, match="checkpoint: expected 'blocks' .* or 'blocks/K' .* got 'layers'"):
        Plan.load(str(path))


# -- meshes ---------------------------------------------------------------------------------------

MESH_TEXTS = [
    ("", "invalid mesh '': it is empty"),
    ("  ", "invalid mesh '  ': it is empty"),
    ("=4", "invalid mesh '=4': mesh axis name '' is empty"),
    ("d p=2", "invalid mesh 'd p=2': mesh axis name 'd p' is not an identifier"),
    ("dp=2,dp=2", "invalid mesh 'dp=2,dp=2': mesh axis 'dp' is given twice"),
    ("dp=0", "mesh axis 'dp' has size 0; sizes must be positive integers"),
    ("dp=-2", "mesh axis 'dp' has size -2; sizes must be positive integers"),
    ("dp=1.5", "mesh axis 'dp' has size '1.5'; sizes must be positive integers"),
    ("dp=two", "mesh axis 'dp' has size 'two'"),
    ("dp", "axis 'dp' has no size"),
    ("dp=2,,tp=2", "an empty axis (an extra comma)"),
    ("dp=2,", "an empty axis (an extra comma)"),
]


@pytest.mark.parametrize("text,message", MESH_TEXTS)
def test_bad_mesh_text_is_refused_naming_the_part(text, message):
    with pytest.raises(ValueError) as e:
        Mesh.of(text)
    assert message in str(e.value)


@pytest.mark.parametrize("axes,message", [({"dp": 0}, "has size 0"), ({"dp": True}, "has size True"),
                                          ({"dp": 2.0}, "has size 2.0"), ({"": 2}, "name '' is empty"),
                                          ({"a b": 2}, "'a b' is not an identifier"),
                                          ([("dp", 2), ("dp", 2)], "'dp' is given twice")])
def test_bad_mesh_axes_are_refused(axes, message):
    with pytest.raises(ValueError) as e:
        Mesh(axes)
    assert message in str(e.value)


def test_good_mesh_text_parses():
    assert Mesh.of(" dp = 2 , tp=4").axes == (("dp", 2), ("tp", 4))


# -- mesh axes no layout uses ----------------------------------------------------------------------

PARAMS = {"fc1.weight": (16, 8), "fc1.bias": (16,), "fc2.weight": (4, 16), "fc2.bias": (4,)}


def _used(name: str, mesh: Mesh) -> set[str]:
    return axes_sharded_by(written_layouts(preset(name, mesh, PARAMS, [2, 2]), mesh), mesh)


def test_presets_use_their_axes_and_only_those():
    assert _used("fsdp+tp", Mesh.of("pp=2,dp=2,tp=2")) == {"dp", "tp"}
    assert _used("hsdp", Mesh.of("rep=2,dp=2")) == {"rep", "dp"}   # rep: the batch is S(0) over it
    assert _used("megatron", Mesh.of("tp=2")) == {"tp"}


def test_an_unused_axis_is_refused_with_the_ranks_it_wastes():
    mesh = Mesh.of("pp=2,dp=2,tp=2")
    with pytest.raises(PlanError) as e:
        check_axes_used(mesh, _used("fsdp+tp", mesh), "fsdp+tp")
    assert str(e.value) == ("mesh axis 'pp' (size 2) is used by no layout of plan 'fsdp+tp': 4 of the 8 ranks "
                            "would duplicate the others' work; drop the axis, or use a plan that shards over it")
    with pytest.raises(PlanError, match=r"mesh axes 'a' \(size 3\) and 'b' \(size 2\) are used by no layout of "
                                        r"plan 'dp': 10 of the 12 ranks"):
        check_axes_used(Mesh.of("a=3,dp=2,b=2"), {"dp"}, "dp")


def test_size_one_axes_and_partial_layouts_count_as_fine():
    check_axes_used(Mesh.of("dp=1,tp=2"), {"tp"}, "megatron")
    plan = Plan.from_dict({"inputs": [{"dp": "P(sum)"}]})
    assert axes_sharded_by(written_layouts(plan, Mesh.of("dp=2")), Mesh.of("dp=2")) == {"dp"}


def _mlp():
    from spmdc.frontend.workloads import load_workload

    return load_workload("mlp")


@pytest.mark.parametrize("mesh,plan,ok", [("pp=2,dp=2,tp=2", "fsdp+tp", False), ("dp=2,tp=2", "dp", False),
                                          ("rep=2,dp=2", "hsdp", True), ("dp=1,tp=2", "megatron", True)])
def test_compile_refuses_an_unused_axis_before_the_rank_programs(mesh, plan, ok):
    from spmdc.compiler import compile_global

    w = _mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if ok:
            step = compile_global(w.model, w.inputs, mesh=Mesh.of(mesh), plan=plan, train=True, loss_fn=w.loss_fn,
                                  loss_inputs=w.loss_inputs)
            assert step.global_ir
            return
        with pytest.raises(PlanError, match=r"is used by no layout of plan '" + plan.replace("+", r"\+")):
            compile_global(w.model, w.inputs, mesh=Mesh.of(mesh), plan=plan, train=True, loss_fn=w.loss_fn,
                           loss_inputs=w.loss_inputs)


def test_compile_refuses_a_custom_plan_that_shards_over_no_axis_of_the_mesh():
    from spmdc.compiler import compile_global

    w = _mlp()
    plan = Plan.from_dict({"name": "rows", "params": {"fc*.weight": {"storage": {"dp": "S(0)"}}},
                           "inputs": [{"dp": "S(0)"}]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(PlanError, match="mesh axis 'tp' \\(size 4\\) is used by no layout of plan 'rows': 6 of "
                                            "the 8 ranks"):
            compile_global(w.model, w.inputs, mesh=Mesh.of("dp=2,tp=4"), plan=plan, train=True,
                           loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
