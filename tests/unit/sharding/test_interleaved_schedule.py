"""Interleaved 1F1B (virtual pipeline stages): the schedule pass's per-rank programs, simulated.

Every (groups P, virtual stages v, micro-batches M) below is checked by
:func:`spmdc.runtime.pipeline_timeline.schedule_times` (no deadlock), against the plain 1F1B
schedule of the same P and M (a smaller share of bubble), and op by op (each stage runs every
micro-batch's forward before its backward, each rank runs only its group's stages).
"""

from __future__ import annotations

import pytest

from spmdc.dialects.func import FuncOp
from spmdc.ir.parser import parse_module
from spmdc.passes.pipeline_schedule import PipelineSchedule
from spmdc.runtime.pipeline_timeline import bubble_fraction, schedule_times, simulate
from spmdc.sharding.pipeline_plan import PipelinePlan, PlanError, interleaved_actions


def chain(groups: int, virtual: int) -> str:
    """A pipeline module of ``groups·virtual`` one-rank stages, stage k on rank k % groups, a chain of values."""
    n = groups * virtual
    lines = [f'shard.mesh @stage{k} = <["dp" = 1]> devices = [{k % groups}]' for k in range(n)]
    for k in range(n - 1):
        lines.append(f"pipe.boundary {{id = {k}, shape = [2, 8], from = #shard<@stage{k}, [R]>, "
                     f"to = #shard<@stage{k + 1}, [R]>, grad_from = #shard<@stage{k + 1}, [R]>, "
                     f"grad_to = #shard<@stage{k}, [R]>}}")
    return "\n".join(lines)


def scheduled(text: str, schedule: str, micro: int):
    module = parse_module(text)
    PipelineSchedule(schedule, micro).run(module)
    return module


CASES = [(2, 2, 4), (2, 2, 8), (4, 2, 4), (4, 2, 8), (2, 3, 4), (4, 3, 8), (3, 2, 6)]


@pytest.mark.parametrize("groups,virtual,micro", CASES)
def test_interleaved_runs_without_deadlock_with_fewer_bubbles(groups, virtual, micro):
    inter = scheduled(chain(groups, virtual), "interleaved", micro)
    plain = scheduled(chain(groups, 1), "1f1b", micro)
    times = schedule_times(inter)   # raises on a deadlock
    assert sorted(times) == list(range(groups))
    for r, ops in times.items():   # every stage of the rank: each micro-batch once forward, once backward
        stages = [r + c * groups for c in range(virtual)]
        labels = [label for label, _, _ in ops]
        for k in stages:
            for mb in range(micro):
                if k == groups * virtual - 1:
                    assert labels.count(f"FB{mb}/{k}") == 1
                else:
                    assert labels.count(f"F{mb}/{k}") == 1 and labels.count(f"B{mb}/{k}") == 1
                    assert labels.index(f"F{mb}/{k}") < labels.index(f"B{mb}/{k}")
        assert len(labels) == sum(micro * (1 if k == groups * virtual - 1 else 2) for k in stages)
    assert bubble_fraction(inter) < bubble_fraction(plain), simulate(inter) + "\n" + simulate(plain)


def test_bubble_figures_p2_v2_m4():
    inter = scheduled(chain(2, 2), "interleaved1f1b", 4)
    plain = scheduled(chain(2, 1), "1f1b", 4)
    # 1F1B: rank 0 waits for each gradient, rank 1 for the first forward; interleaved: half the share
    assert round(bubble_fraction(plain), 3) == 0.2
    assert bubble_fraction(inter) < 0.15


def test_warmup_count_matches_the_derivation():
    # group k of P runs (P-1-k)·2 + (v-1)·P warm-up forwards, then one forward, then its first backward
    for p, v, m in [(4, 2, 8), (2, 3, 4), (4, 3, 8)]:
        for k in range(p - 1):
            acts = interleaved_actions(p, v, m, k)
            first_b = next(i for i, (kind, _, _) in enumerate(acts) if kind == "B")
            assert first_b == min((p - 1 - k) * 2 + (v - 1) * p, m * v) + 1


def test_rank_functions_carry_their_stages():
    module = scheduled(chain(2, 2), "Interleaved1F1B", 4)
    funcs = [op for op in module.body.ops if isinstance(op, FuncOp)]
    assert [f.sym_name for f in funcs] == ["rank0", "rank1"]
    stages = {op.attributes["stage"].value for op in funcs[0].body.ops if "stage" in op.attributes}
    assert stages == {0, 2}


def test_refusals():
    with pytest.raises(Exception, match="multiple of the 2 device groups"):
        scheduled(chain(2, 2), "interleaved", 3)
    with pytest.raises(Exception, match="several stages per rank need"):
        scheduled(chain(2, 2), "1f1b", 4)
    with pytest.raises(PlanError, match="not a multiple"):
        PipelinePlan.from_mesh("pp=2", "dp", schedule="interleaved", microbatches=3)
    with pytest.raises(PlanError, match="virtual_stages=2 is for schedule"):
        PipelinePlan.from_mesh("pp=2", "dp", schedule="1f1b", virtual_stages=2)


def test_plan_cuts_p_times_v_stages():
    plan = PipelinePlan.from_mesh("pp=2", "dp", schedule="interleaved", microbatches=4)
    assert (len(plan.stages), plan.groups, plan.virtual_stages, plan.world) == (4, 2, 2, 2)
    assert [s.ranks for s in plan.stages] == [(0,), (1,), (0,), (1,)]
    assert plan.stages_of(1) == [1, 3]
    three = plan.with_schedule(None, None, 3)
    assert len(three.stages) == 6 and three.stages_of(0) == [0, 2, 4]
    back = plan.with_schedule("1f1b")
    assert (len(back.stages), back.virtual_stages) == (2, 1)
    d = PipelinePlan.from_dict({"schedule": "interleaved", "virtual_stages": 2, "microbatches": 4, "stages": [
        {"ranks": [0], "mesh": "dp=1", "plan": "dp"}, {"ranks": [1], "mesh": "dp=1", "plan": "dp"}]})
    assert len(d.stages) == 4 and d.schedule == "interleaved1f1b"
    with pytest.raises(PlanError, match="without 'modules'"):
        PipelinePlan.from_dict({"schedule": "interleaved", "microbatches": 4, "stages": [
            {"ranks": [0], "mesh": "dp=1", "plan": "dp", "modules": ["a"]},
            {"ranks": [1], "mesh": "dp=1", "plan": "dp", "modules": ["b"]}]})
