"""Checkpoints of every layout kind, and resharding between kinds (issue 26).

One 4-rank launch (:func:`checkpoint_kinds_workers.chain`) trains one run for 10 AdamW steps,
handed on by a checkpoint every 2 steps: pipeline stages → fsdp on one mesh → pipeline → device
groups → one mesh. Each segment's losses and parameters equal an uninterrupted single-device run
(rtol 1e-4 / atol 1e-5: shards and micro-batches sum in another order); the optimizer state
(exp_avg, exp_avg_sq, step) a module loads is bitwise the one its predecessor saved; every kind
writes a checkpoint with the entries and shapes of the one-mesh one (a tied parameter once, the
persistent buffer, optimizer state under the canonical name); a pipeline save stopped after the
previous checkpoint was moved aside leaves it loadable (the device groups resume from it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import checkpoint_kinds_workers as W  # noqa: E402
import rank_checks  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("kinds"))
    return launch(W.chain, 4, (tmp,), timeout_s=900), tmp


@pytest.fixture(scope="module")
def one_device():
    """Losses of the 10 steps and the parameters (with the buffer) after every second step."""
    model = W.model()
    x, y = W.batch()
    opt = torch.optim.AdamW(model.parameters(), lr=W.LR)
    losses, states = [], []
    for k in range(2 * len(W.SEGMENTS)):
        opt.zero_grad()
        loss = W.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if k % 2:
            states.append({n: v.detach().clone() for n, v in model.state_dict().items()})
    return losses, states


@pytest.mark.matrix("one mesh", "save/resume")
@pytest.mark.matrix("pipeline", "save/resume")
@pytest.mark.matrix("device groups", "save/resume")
def test_every_segment_continues_the_uninterrupted_run(chain, one_device):
    losses, states = one_device
    for r in chain[0].values():
        got = [loss for seg in r["segments"] for loss in seg["losses"]]
        rank_checks.close(got, losses, RTOL, ATOL)
    r0 = chain[0][0]
    assert [seg["kind"] for seg in r0["segments"]] == list(W.SEGMENTS)
    for seg, want in zip(r0["segments"], states):
        assert set(seg["state"]) == set(want)   # the tied head and the buffer under the model's names
        rank_checks.close(seg["state"], want, RTOL, ATOL)


def test_optimizer_state_carries_over_exactly(chain):
    r0 = chain[0][0]
    assert [h["extra"] for h in r0["handoffs"]] == [{"step": 2 * (k + 1)} for k in range(len(W.SEGMENTS) - 1)]
    for before, after in zip(r0["segments"], r0["handoffs"]):
        saved, loaded = before["saved"], after["loaded"]
        assert set(saved) == set(loaded)
        assert {k.rsplit(".", 1)[1] for k in saved} == {"exp_avg", "exp_avg_sq", "step"}
        assert "emb.weight.exp_avg" in saved and not any(k.startswith("head.") for k in saved)
        for k in saved:
            assert torch.equal(saved[k], loaded[k]), (before["kind"], k)


def test_every_kind_writes_the_one_mesh_checkpoint(chain):
    got = chain[0][0]["entries"]
    one_mesh = got["fsdp"]
    assert one_mesh["model.head.weight"] == one_mesh["model.emb.weight"] == (W.VOCAB, W.DIM)
    assert "model.scale" in one_mesh and "optim.state.emb.weight.exp_avg" in one_mesh
    assert not any(k.startswith("optim.state.head.") for k in one_mesh)
    for kind in ("pipeline", "groups"):
        assert got[kind] == one_mesh, kind


def test_a_stopped_pipeline_save_keeps_the_previous_checkpoint(chain):
    for r in chain[0].values():
        stop = r["interrupted"]
        assert stop["error"] == "save stopped at 'aside' (SPMDC_TEST_SAVE_STOP)"
        assert stop["listing"] == [".pipeline6.replaced", ".pipeline6.saving"]
        assert stop["located"] == ".pipeline6.replaced"
    # the device groups loaded that checkpoint: step 6's extra, not the stopped save's
    assert chain[0][0]["handoffs"][2]["extra"] == {"step": 6}
