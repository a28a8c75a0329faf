"""Pipeline plans (spmdc.sharding.pipeline_plan): parsing and its errors, the example files, and the
GPipe / 1F1B compute orders (what each stage holds in flight)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spmdc.sharding.pipeline_plan import PipelinePlan, in_flight, stage_actions
from spmdc.sharding.plan import Plan, PlanError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TWO = {"stages": [{"ranks": [0, 1], "mesh": "tp=2", "plan": "megatron"}, {"ranks": [2, 3], "mesh": "tp=2",
                                                                         "plan": "megatron"}]}


def test_parse_and_defaults():
    p = PipelinePlan.from_dict(TWO)
    assert p.world == 4 and p.schedule == "1f1b" and p.microbatches == 2
    assert [p.stage_of(r) for r in range(4)] == [0, 0, 1, 1]
    assert p.stages[0].modules is None and p.stages[1].name == "stage1"
    q = p.with_schedule("gpipe", 8)
    assert (q.schedule, q.microbatches) == ("gpipe", 8) and p.schedule == "1f1b"


def test_example_files_load():
    for f in ("pp2_tp2.yaml", "pp_gpt2_hetero.yaml"):
        plan = Plan.load(str(EXAMPLES / f))
        assert isinstance(plan, PipelinePlan)
        plan.check_presets()
    hetero = Plan.load(str(EXAMPLES / "pp_gpt2_hetero.yaml"))
    assert [s.mesh.size for s in hetero.stages] == [2, 1] and hetero.stages[0].modules == ("wte", "wpe", "h.0")


@pytest.mark.parametrize("d,message", [
    ({**TWO, "scheduel": "gpipe"}, "unknown key 'scheduel'.*did you mean 'schedule'"),
    ({**TWO, "schedule": "1f1f"}, "unknown schedule '1f1f'.*did you mean '1f1b'"),
    ({**TWO, "microbatches": 0}, "'microbatches' must be a positive integer"),
    ({"stages": [TWO["stages"][0]]}, "at least two stages"),
    ({"stages": [{"ranks": [0, 1]}, {"ranks": [1, 2]}]}, "rank 1 is also in stage 'stage0'"),
    ({"stages": [{"ranks": [0], "modules": ["h.0"]}, {"ranks": [1]}]}, "stage #1 has no 'modules' but others do"),
    ({"stages": [{"ranks": [0], "modul": ["h.0"]}, {"ranks": [1]}]}, "unknown key 'modul'.*did you mean 'modules'"),
    ({"stages": [{"ranks": [0, 1], "mesh": "tp=4"}, {"ranks": [2]}]}, "tp=4 has 4 devices but the stage has 2"),
])
def test_errors(d, message):
    with pytest.raises(PlanError, match=message):
        PipelinePlan.from_dict(d)


def test_bad_override():
    with pytest.raises(PlanError, match="unknown pipeline schedule 'zb'"):
        PipelinePlan.from_dict(TWO).with_schedule("zb")


@pytest.mark.parametrize("stages,micro", [(2, 4), (3, 4), (4, 8), (3, 2)])
def test_schedules_run_every_micro_batch_once_in_order(stages, micro):
    for sched in ("gpipe", "1f1b"):
        for s in range(stages):
            acts = stage_actions(sched, stages, micro, s)
            kinds = {"FB"} if s == stages - 1 else {"F", "B"}
            for k in kinds:
                assert [m for kind, m in acts if kind == k] == list(range(micro))
            for m in range(micro):   # a backward after its forward
                if s < stages - 1:
                    assert acts.index(("F", m)) < acts.index(("B", m))


@pytest.mark.parametrize("stages,micro", [(2, 4), (3, 6), (4, 8)])
def test_1f1b_holds_fewer_micro_batches_than_gpipe(stages, micro):
    for s in range(stages - 1):
        assert in_flight(stage_actions("gpipe", stages, micro, s)) == micro
        assert in_flight(stage_actions("1f1b", stages, micro, s)) == stages - s
    assert stage_actions("1f1b", 2, 4, 0) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2),
                                              ("B", 3)]


# -- a mesh with a pp axis: stages over its coordinates (PipelinePlan.from_mesh) ---------------------
def _device_mesh_ranks(mesh: str, pp: int) -> list[list[int]]:
    """The ranks with pp coordinate k, as torch's init_device_mesh lays ranks out (arange, row-major)."""
    import torch

    from spmdc.sharding.mesh import Mesh

    m = Mesh.parse(mesh)
    grid = torch.arange(m.size).reshape(m.shape)
    at = m.axis_names.index("pp")
    return [sorted(grid.select(at, k).flatten().tolist()) for k in range(pp)]


@pytest.mark.parametrize("mesh,plan,ranks,stage_mesh", [
    ("pp=2,dp=2,tp=2", "fsdp+tp", [[0, 1, 2, 3], [4, 5, 6, 7]], "dp=2,tp=2"),      # pp first
    ("dp=2,pp=2,tp=2", "fsdp+tp", [[0, 1, 4, 5], [2, 3, 6, 7]], "dp=2,tp=2"),      # pp in the middle
    ("dp=2,pp=3", "fsdp", [[0, 3], [1, 4], [2, 5]], "dp=2"),                        # pp last
    ("pp=2,rep=2,dp=2", "hsdp", [[0, 1, 2, 3], [4, 5, 6, 7]], "rep=2,dp=2"),        # hsdp inside stages
    ("pp=4", "dp", [[0], [1], [2], [3]], "dp=1"),                                   # pp alone: one rank a stage
])
def test_from_mesh_stages_are_the_pp_coordinates(mesh, plan, ranks, stage_mesh):
    p = PipelinePlan.from_mesh(mesh, plan)
    assert [list(s.ranks) for s in p.stages] == ranks == _device_mesh_ranks(mesh, len(ranks))
    assert all(str(s.mesh) == stage_mesh and s.plan == plan and s.modules is None for s in p.stages)
    assert (p.schedule, p.microbatches, p.world, str(p.mesh)) == ("1f1b", len(ranks), len(ranks[0]) * len(ranks), mesh)
    assert [p.stage_of(r) for r in ranks[-1]] == [len(ranks) - 1] * len(ranks[-1])
    q = p.with_schedule("gpipe", 4)
    assert (q.schedule, q.microbatches, q.mesh) == ("gpipe", 4, p.mesh)
    r = PipelinePlan.from_mesh(mesh, Plan(name="mine", preset=plan), schedule="gpipe", microbatches=8)
    assert (r.schedule, r.microbatches, r.stages[0].plan.preset) == ("gpipe", 8, plan)


def test_split_pp_axis_keeps_one_mesh_plans():
    from spmdc.sharding.pipeline_plan import split_pp_axis

    assert split_pp_axis("dp=2,tp=2", "fsdp+tp") == ("dp=2,tp=2", "fsdp+tp")
    assert split_pp_axis("pp=1,dp=2,tp=2", "fsdp+tp") == ("pp=1,dp=2,tp=2", "fsdp+tp")   # one stage
    assert split_pp_axis(None, "fsdp") == (None, "fsdp")
    mesh, p = split_pp_axis("pp=2,dp=2", "fsdp", schedule="gpipe")
    assert mesh is None and isinstance(p, PipelinePlan) and p.schedule == "gpipe"


@pytest.mark.parametrize("mesh,plan,message", [
    ("dp=2,tp=2", "fsdp+tp", "mesh dp=2,tp=2 has no 'pp' axis"),
    ("pp=1,dp=2", "fsdp", "a 'pp' axis of size 1 is one stage, not a pipeline; use plan 'fsdp' on the mesh itself"),
    ("pp=2,tp=2", PipelinePlan.from_dict(TWO), "mesh pp=2,tp=2 has a 'pp' axis and plan 'pipeline' has its own "
                                               "stages"),
    ("pp=2,dp=2", Plan.load(str(EXAMPLES / "hetero_dp.yaml")), "a 'pp' axis with plan '.*' of device groups is "
                                                               "not supported"),
    ("pp=2,dp=2", Plan(params={"w": ["S(0)"]}, name="byname"), "plan 'byname' lays out parameters by name"),
    ("pp=2,dp=2", "megatron", "each pipeline stage runs plan 'megatron' on the other axes, dp=2: .*needs mesh "
                              "axis 'tp'"),
    ("pp=2,dp=2", "fsdp+tp", "needs mesh axis 'tp'"),
])
def test_from_mesh_errors(mesh, plan, message):
    with pytest.raises(PlanError, match=message):
        PipelinePlan.from_mesh(mesh, plan)


def test_compile_with_a_pp_mesh_builds_a_pipeline():
    """spmdc.compile dispatches a pp mesh to the pipeline (which needs a torch.distributed job) and
    refuses a pp axis with a plan of stages before anything else."""
    import torch

    import spmdc

    model, x = torch.nn.Linear(4, 4), torch.randn(4, 4)
    with pytest.raises(RuntimeError, match="a pipeline needs an initialized torch.distributed job"):
        spmdc.compile(model, (x,), mesh="pp=2,dp=2", plan="fsdp", train=True, loss_fn=lambda o: o.sum())
    with pytest.raises(PlanError, match="has its own stages"):
        spmdc.compile(model, (x,), mesh="pp=2,tp=2", plan=PipelinePlan.from_dict(TWO), train=True)
