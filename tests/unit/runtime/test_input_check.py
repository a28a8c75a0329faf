"""Ranks fed the wrong data (spmdc.runtime.input_check): one 4-rank gloo launch runs every case
(:func:`input_check_workers.input_cases`), the checks' judgement is tested on tables without ranks.

Launched: global mode fed DistributedSampler pieces (step, backward, forward, eager mode) and local
mode under fsdp+tp with a world-size sampler are refused with the same message on every rank; the
recipe (``spmdc.sampler_args``) trains and equals one device (losses and parameters rtol 1e-4 /
atol 1e-5); with the check off the same wrong batch runs and computes something else; the check is
one collective on a program's first call and none after; a new shape checks again; device groups
and pipeline stages refuse per-group batches.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import input_check_workers as W  # noqa: E402
import rank_checks  # noqa: E402

from spmdc.dialects.shard import Replicate, Shard  # noqa: E402
from spmdc.runtime.input_check import Participant, _coords, checksums, sampler_args, verdict  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def ranks():
    return launch(W.input_cases, 4, timeout_s=900)


def same_everywhere(ranks, key):
    """The value of ``key`` on rank 0, after checking every rank has it too (the same error everywhere)."""
    got = [ranks[r][key] for r in range(4)]
    assert all(g == got[0] for g in got), got
    return got[0]


def loss_at_init(x, y):
    with torch.no_grad():
        return float(F.mse_loss(W.model()(x), y))


def intended_batch(num_replicas, batch):
    """The global batch the ranks' sampler pieces make together (pieces in rank order)."""
    pieces = [W.sampler_batches(num_replicas, r, batch)[0] for r in range(num_replicas)]
    return torch.cat([p[0] for p in pieces]), torch.cat([p[1] for p in pieces])


def test_global_inputs_fed_pieces_are_refused_on_every_rank_and_entry_point(ranks):
    for key in ("global_step", "global_backward", "global_forward", "global_same_shape"):
        msg = same_everywhere(ranks, key)
        assert msg is not None, key
        assert msg.startswith("spmdc.compile: input #0 ('x') differs between ranks 0 and 1"), msg
        assert "mesh axis 'tp'" in msg and "pass inputs='local'" in msg and "check_inputs=False" in msg
    assert ranks[0]["global_checks"] == 3   # a refusal does not mark the program checked: each call checks
    # the whole batch on every rank is accepted and gives the one-device loss
    x, y = W.data()
    for r in range(4):
        rank_checks.close(ranks[r]["global_ok_losses"][0], loss_at_init(x[:8], y[:8]), RTOL, ATOL)


def test_eager_mode_checks_its_inputs_too(ranks):
    msg = same_everywhere(ranks, "eager_step")
    assert msg.startswith("spmdc.eager: input #0 ('x') differs between ranks 0 and 1"), msg
    x, y = W.data()
    rank_checks.close(ranks[0]["eager_ok_loss"], loss_at_init(x[:8], y[:8]), RTOL, ATOL)


def test_check_off_runs_the_wrong_batch_and_computes_something_else(ranks):
    # the same module, inputs and plan as global_same_shape, which the check refused
    x, y = intended_batch(4, 2)
    model = W.model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    loss = loss.detach()
    losses = [ranks[r]["off_loss"] for r in range(4)]
    assert all(ranks[r]["off_checks"] == 0 for r in range(4))
    assert len(set(losses)) > 1 and any(abs(got - float(loss)) > 1e-3 for got in losses), (losses, float(loss))
    worst = max(float((ranks[0]["off_state"][k] - v).abs().max()) for k, v in model.state_dict().items())
    assert worst > 100 * ATOL, worst   # far outside the tolerance a right batch meets


def test_local_inputs_with_a_world_size_sampler_under_fsdp_tp_name_tp(ranks):
    msg = same_everywhere(ranks, "local_world")
    assert "ranks 0 and 1 (dp=0,tp=0 vs dp=0,tp=1), which differ only along mesh axis 'tp'" in msg, msg
    assert "layout [S(0), R]" in msg and "DistributedSampler over all 4 ranks? use num_replicas=2, " \
        "rank=<dp coordinate>" in msg and "spmdc.sampler_args(cm)" in msg


def test_the_sampler_recipe_trains_as_one_device(ranks):
    for r in range(4):
        assert ranks[r]["sampler_args"] == (2, r // 2)   # dp=2,tp=2: rank = 2 dp + tp
    model = W.model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    parts = [W.sampler_batches(2, d, 4) for d in range(2)]
    losses = []
    for k in (0, 1, 0):
        x, y = torch.cat([parts[0][k][0], parts[1][k][0]]), torch.cat([parts[0][k][1], parts[1][k][1]])
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    for r in range(4):
        rank_checks.close(ranks[r]["recipe_losses"], losses, RTOL, ATOL)
    rank_checks.close(ranks[0]["recipe_state"], copy.deepcopy(model.state_dict()), RTOL, ATOL)


def test_the_check_is_one_collective_on_a_programs_first_call_only(ranks):
    # torch.distributed calls per step of a program spmdc.compile compiled: the check's all_gather
    # is the first step's one extra call
    for r in range(4):
        first, second, third = ranks[r]["global_ok_calls"]
        assert second > 0 and first == second + 1 and third == second, ranks[r]["global_ok_calls"]
        assert ranks[r]["global_ok_checks"] == 3 + 1
        # the world-size refusal and the recipe's first step: one check each
        assert ranks[r]["recipe_checks"] == 2


def test_a_checked_shape_is_not_checked_again_but_a_new_shape_is(ranks):
    assert ranks[0]["later_unchecked"] is None   # documented: once per program, then free
    msg = same_everywhere(ranks, "new_shape")
    assert "mesh axis 'tp'" in msg and "num_replicas=2" in msg


def test_unequal_local_pieces_are_refused_not_hung(ranks):
    msg = same_everywhere(ranks, "unequal")
    assert "has shape (5, 12) on rank 2 but (6, 12) on rank 0" in msg, msg
    assert "splits 2 ways (along 'dp')" in msg


def test_device_groups_refuse_per_group_batches(ranks):
    msg = same_everywhere(ranks, "hetero_refused")
    assert "differs between ranks 0 and 2" in msg and "(grp=0,tp=0 vs grp=1,tp=0: mesh axis 'grp')" in msg, msg
    assert "device groups: every rank of the job passes the same global batch" in msg
    x, y = W.data()
    for r in range(4):
        rank_checks.close(ranks[r]["hetero_loss"], loss_at_init(x[:8], y[:8]), RTOL, ATOL)
        assert "outputs are split across the groups" in ranks[r]["hetero_forward"]


def test_pipeline_stages_refuse_per_stage_batches(ranks):
    msg = same_everywhere(ranks, "pipeline_refused")
    assert msg.startswith("pipeline plan 'two-stages': input #0 differs between ranks 0 and 2"), msg
    assert "(stage=0,dp=0 vs stage=1,dp=0: mesh axis 'stage')" in msg
    x, y = W.data()
    for r in range(4):
        rank_checks.close(ranks[r]["pipeline_loss"], loss_at_init(x[:8], y[:8]), RTOL, ATOL)
        assert ranks[r]["pipeline_checks"] == 2
    # off: the stages train on two different batches, matching neither
    off = ranks[0]["pipeline_off_loss"]
    for g in range(2):
        gx, gy = W.sampler_batches(2, g, 8)[0]
        assert abs(off - loss_at_init(gx, gy)) > 1e-3


# -- the judgement, on gathered tables (no ranks) -------------------------------------------------------
AXES = {"dp": 2, "tp": 2}
PARTS = [Participant(r, _coords(AXES, r)) for r in range(4)]


def table(*per_rank):
    return torch.stack([torch.stack([checksums(t) for t in ts]) for ts in per_rank])


def test_identical_inputs_pass_and_the_first_input_at_fault_is_named():
    x, y = torch.randn(4, 3), torch.arange(4)
    assert verdict(table(*[[x, y]] * 4), ["input #0", "input #1"], PARTS, "global", None, AXES) is None
    msg = verdict(table([x, y], [x, y], [x, y + 1], [x, y]), ["input #0", "input #1"], PARTS, "global", None, AXES)
    assert msg.startswith("input #1 differs between ranks 0 and 2") and "mesh axis 'dp'" in msg, msg


def test_reordered_rows_and_nans_are_told_apart():
    x = torch.randn(4, 3)
    assert not torch.equal(checksums(x), checksums(x.flip(0)))   # same sum and squares, other order
    n = torch.tensor([1.0, float("nan"), 2.0])
    assert verdict(table([n], [n.clone()]), ["input #0"], PARTS[:2], "global", None, AXES) is None
    m = torch.tensor([1.0, 2.0, float("nan")])
    assert verdict(table([n], [m]), ["input #0"], PARTS[:2], "global", None, AXES) is not None


def test_local_pieces_may_differ_along_the_axes_their_layout_splits():
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    lay = [(Shard(0), Replicate())]
    ok = table([a], [a], [b], [b])   # dp=0 ranks hold a, dp=1 ranks hold b
    assert verdict(ok, ["input #0"], PARTS, "local", lay, AXES) is None
    bad = table([a], [b], [a], [b])  # split along tp instead
    msg = verdict(bad, ["input #0"], PARTS, "local", lay, AXES)
    assert "differ only along mesh axis 'tp'" in msg and "num_replicas=2" in msg
    whole = verdict(table([a], [a], [b], [b]), ["input #0"], PARTS, "local", [(Replicate(), Replicate())], AXES)
    assert "along mesh axis 'dp'" in whole and "does not split it at all" in whole


def test_dtype_and_shape_differences_are_named():
    x = torch.randn(2, 3)
    msg = verdict(table([x], [x.double()]), ["input #0"], PARTS[:2], "global", None, AXES)
    assert "is float64 on rank 1 but float32 on rank 0" in msg
    msg = verdict(table([x], [x[:1]]), ["input #0"], PARTS[:2], "global", None, AXES)
    assert "has shape (1, 3) on rank 1 but (2, 3) on rank 0" in msg


def test_sampler_args_on_a_3d_mesh():
    axes = {"rep": 2, "dp": 2, "tp": 2}
    lay = (Shard(0), Shard(0), Replicate())   # hsdp+tp: the batch split over rep then dp
    got = {r: sampler_args(lay, axes, _coords(axes, r)) for r in range(8)}
    assert got == {r: (4, r // 2) for r in range(8)}
    assert sampler_args((Replicate(), Replicate(), Replicate()), axes, _coords(axes, 5)) == (1, 0)


def test_cli_flag_turns_the_check_off():
    import argparse

    from spmdc.tools.run_cmd import add_arguments, config_from_args

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    assert config_from_args(ap.parse_args([])).options.check_inputs is True
    assert config_from_args(ap.parse_args(["--no-input-check"])).options.check_inputs is False
