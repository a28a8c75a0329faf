"""Switching strategy at run time (spmdc.api.switch) on gloo: fsdp on 4 ranks -> megatron on
4; dp=2 x tp=2 -> a pp=2 x tp=2 pipeline; 6 ranks -> 4 (a planned shrink, and a failure of two
ranks recovered from surviving replicas). After the switch, training goes on with the losses of a
run on the new plan loaded from a checkpoint written at the switch step (rtol 1e-6): parameters
and AdamW state arrived exactly. Every switch moves its state in one batched send/recv."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import switch_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("switch")
    return {4: launch(W.run_cases, 4, (W.FOUR, str(root / "four")), timeout_s=900),
            6: launch(W.run_cases, 6, (W.SIX, str(root / "six")), timeout_s=900)}


CASES = {**{k: (4, v) for k, v in W.FOUR.items()}, **{k: (6, v) for k, v in W.SIX.items()}}


@pytest.mark.parametrize("name", list(CASES))
def test_training_goes_on_as_from_a_checkpoint(results, name):
    n, (_w, _b, _old, _new, ranks, _lost) = CASES[name]
    survivors = ranks if ranks is not None else list(range(n))
    for r in range(n):
        got = results[n][r][name]
        assert got["left"] == (r not in survivors)
        if r in survivors:
            close(got["after"], got["reference"], rtol=1e-6, atol=0)
            assert got["before"] == results[n][0][name]["before"]


@pytest.mark.parametrize("name", list(CASES))
def test_one_batched_exchange(results, name):
    n, (_w, _b, _old, _new, ranks, lost) = CASES[name]
    survivors = ranks if ranks is not None else list(range(n))
    total = results[n][survivors[0]][name]["report"][2]
    assert total > 0
    for r in survivors:
        messages, sent, everyone, tensors = results[n][r][name]["report"]
        assert everyone == total and tensors > 0
        assert messages <= n - 1   # at most one message per peer: all tensors packed per pair
    for r in lost:
        assert results[n][r][name]["report"] is None   # lost ranks left; they sent nothing (checked by the table)


def test_lost_shards_are_refused(results):
    for r in range(6):
        msg = results[6][r]["refused"]
        assert msg is not None and "lived only on the lost ranks [4, 5]" in msg and "restore from a checkpoint" in msg
