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
