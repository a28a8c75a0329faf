"""examples/train.py, the training loop a user copies: one 4-rank gloo launch
(:func:`example_train_workers.cases`) against the same script's ``--plain`` run in this process.

The spmdc run (fsdp+tp on dp=2,tp=2: DistributedSampler pieces from spmdc.sampler_args, the loss on
each rank's piece of ``cm(x)``, ``loss.backward()``, AdamW + warm-up/cosine schedule, cm.clip_grad_norm_,
a checkpoint every 2 steps, an evaluation under torch.no_grad) prints the plain one-process run's
losses per step and evaluation loss (rtol 1e-5, float32); resumed from its step-2 checkpoint under
fsdp on dp=4 (resharded by DCP, pieces of another size, the same global batches) it goes on with the
uninterrupted run's losses; FSDP2's fully_shard in the same loop gives them too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import example_train_workers as W  # noqa: E402
import train  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

RTOL = 1e-5


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch(W.cases, 4, (str(tmp_path_factory.mktemp("ckpt")),), timeout_s=600)


@pytest.fixture(scope="module")
def plain():
    return train.main(W.TINY + ["--plain", "--steps", "4", "--eval-every", "4"])


def close(got, want):
    return got == pytest.approx(want, rel=RTOL, abs=0)


def test_every_rank_reports_the_jobs_loss(ranks):
    for key in ("whole", "resumed", "fsdp2"):
        assert all(ranks[r][key]["losses"] == ranks[0][key]["losses"] for r in range(4)), key


def test_spmdc_loop_matches_plain_pytorch_per_step_and_in_evaluation(ranks, plain):
    whole = ranks[0]["whole"]
    assert len(plain["losses"]) == 4 and plain["losses"][-1] < plain["losses"][0]   # it trains
    assert close(whole["losses"], plain["losses"]), (whole["losses"], plain["losses"])
    assert [s for s, _ in whole["evals"]] == [4] and close([e for _, e in whole["evals"]],
                                                           [e for _, e in plain["evals"]])
    assert all(t > 0 for t in whole["tps"])   # the metrics' tokens/s per device


def test_resume_from_the_step_2_checkpoint_on_another_plan_continues_the_run(ranks):
    whole, resumed = ranks[0]["whole"], ranks[0]["resumed"]
    assert ranks[0]["saved"] == ["step-2", "step-4"]
    assert resumed["start"] == 2 and len(resumed["losses"]) == 2
    assert close(resumed["losses"], whole["losses"][2:]), (resumed["losses"], whole["losses"])


def test_fsdp2_in_the_same_loop_matches_plain(ranks, plain):
    assert close(ranks[0]["fsdp2"]["losses"], plain["losses"])


def test_a_mixture_of_experts_under_expert_parallelism_matches_plain_pytorch(ranks):
    """The same loop with a HuggingFace Mixtral on ep=4 (each rank one expert, its tokens dispatched
    by all_to_all) prints the plain one-process run's losses."""
    plain_moe = train.main(W.TINY + W.MOE + ["--plain", "--steps", "3"])
    got = ranks[0]["moe"]["losses"]
    assert all(ranks[r]["moe"]["losses"] == got for r in range(4))
    assert len(got) == 3 and close(got, plain_moe["losses"]), (got, plain_moe["losses"])
