"""Checkpoints lose nothing and fail in one line (issue 25): the optimizer's own settings win,
an optimizer of the user's own is saved and loaded, another optimizer class or shape is refused
by name, a damaged checkpoint names its file, and a save that stops at any point leaves the
previous checkpoint whole.

One 2-rank launch (:func:`checkpoint_safety_workers.all_cases`) runs every case on ranks; the
damage checks that need no ranks run here on a checkpoint it wrote. Tolerances: losses against
one device rtol 1e-5 / atol 1e-6 (a mean over shards adds in another order); what a checkpoint
restores and resumed losses against the uninterrupted run: bitwise.
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import checkpoint_safety_workers as W  # noqa: E402
import rank_checks  # noqa: E402

from spmdc.runtime.checkpointing import CheckpointError, read_meta, read_metadata  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("ckpt"))
    return launch(W.all_cases, 2, (tmp,), timeout_s=600), tmp


def eager(steps, opt_fn, model=None, change=None):
    """Single-device losses of ``steps`` AdamW steps; ``change(opt, k)`` before step k."""
    model = copy.deepcopy(model if model is not None else W.mlp())
    x, y = W.batch()
    opt = opt_fn(model.parameters())
    losses = []
    for k in range(steps):
        if change is not None:
            change(opt, k)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _bitwise(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k


# -- issue 6: the caller's optimizer settings win -----------------------------------------------------

def test_another_optimizer_class_is_refused_by_name(ranks):
    for r in ranks[0].values():
        msg = r["settings"]["adam_into_adamw"]
        assert msg is not None and "holds the state of optimizer Adam, not AdamW" in msg, msg
        assert "model_only=True" in msg


def test_loaded_state_keeps_the_callers_settings_and_warns_once(ranks):
    # one device: 2 steps with weight_decay 0, then 2 with 0.1 (the state carried over)
    def to_wd(opt, k):
        if k == 2:
            opt.param_groups[0]["weight_decay"] = 0.1
    want = eager(4, lambda ps: torch.optim.AdamW(ps, lr=W.LR, weight_decay=0.0), change=to_wd)
    for r in ranks[0].values():
        s = r["settings"]
        rank_checks.close(s["wd0_before"] + s["wd_after"], want, RTOL, ATOL)
        assert s["wd_group"] == {"lr": W.LR, "weight_decay": 0.1, "eps": 1e-8}
        _bitwise(s["wd_state"], s["wd0_state"])
        assert s["wd_warnings"] == [f"checkpoint '{ranks[1]}/wd0': optimizer AdamW keeps its own settings, which "
                                    "differ from the saved ones: weight_decay 0.0 there, 0.1 now"]
        assert s["same_warnings"] == []


def test_a_scheduled_learning_rate_comes_from_the_checkpoint(ranks):
    for r in ranks[0].values():
        assert r["settings"]["sched_warnings"] == []
        assert r["settings"]["sched_lr"] == W.LR / 4


# -- issue 7: the user's own optimizer is never left out -----------------------------------------------

def test_own_optimizer_is_saved_and_loaded_without_being_passed(ranks):
    want = eager(4, lambda ps: torch.optim.AdamW(ps, lr=W.LR))
    for r in ranks[0].values():
        e = r["external"]
        _bitwise(e["own_loaded_state"], e["own_state"])
        rank_checks.close(e["own_before"] + e["own_after"], want, RTOL, ATOL)


def test_optimizer_state_is_never_silently_dropped_or_made_up(ranks):
    tmp = ranks[1]
    for r in ranks[0].values():
        e = r["external"]
        assert e["no_optimizer_refused"] == (
            f"checkpoint '{tmp}/own' holds the state of optimizer AdamW, and this module has no optimizer to load "
            "it into: pass it (cm.load(path, opt)), or model_only=True to load the model alone")
        assert e["model_only"] is None and e["forward_only"] is None
        _bitwise(e["model_only_params"], e["saved_params"])
        assert e["bare_record"] is None   # saved without an optimizer: "no optimizer state"
        assert e["no_state_refused"] == (
            f"checkpoint '{tmp}/bare' holds no optimizer state (it was saved without an optimizer): AdamW's state "
            "cannot come from it; pass model_only=True to load the model alone and start AdamW fresh")
        assert e["no_state_model_only"] is None
        # opt2 (AdamW) and a second optimizer over some of the parameters (the first SGD is gone)
        assert e["two_refused"] == (f"cm.save('{tmp}/two'): 2 optimizers (AdamW, SGD) are over this module's "
                                    "parameters; pass the one to save (cm.save(path, opt))")


# -- another model ------------------------------------------------------------------------------------

def test_another_shape_or_layer_count_names_the_first_difference(ranks):
    tmp = ranks[1]
    m = ranks[0][0]["model"]
    assert m["wider"] == (f"checkpoint '{tmp}/mlp': parameter '0.weight' has shape (30, 12) there, (32, 12) in "
                          "this model")
    assert m["deeper"] == (f"checkpoint '{tmp}/mlp' lacks 2 of the 8 entries of this model (model.6.bias, "
                           "model.6.weight; nearest there: '4.bias'): it was saved from another model")
    assert m["shallower"] == (f"checkpoint '{tmp}/mlp' holds 2 model entries this model does not have ('4.weight', "
                              "'4.bias'; nearest here: '2.weight'): it was saved from another model")
    assert {k: v for k, v in ranks[0][1]["model"].items() if k != "damage"} == {k: v for k, v in m.items()
                                                                              if k != "damage"}


# -- a damaged checkpoint -----------------------------------------------------------------------------

def test_damaged_checkpoint_on_ranks_is_one_error_naming_the_file(ranks):
    tmp = ranks[1]
    for r in ranks[0].values():
        d = r["model"]["damage"]
        assert d["truncated"].startswith(f"checkpoint {tmp}/truncated/__1_0.distcp is damaged (truncated: ")
        # the right length, zeros inside: DCP's own failure, the file found by reading each entry
        assert d["garbage"].startswith(f"checkpoint {tmp}/garbage/__1_0.distcp is damaged ("), d["garbage"]
        assert "\n" not in d["garbage"] and d["good_after"] is None


@pytest.mark.parametrize("name,damage,message", [
    ("empty-shard", lambda d: open(d / "__0_0.distcp", "w").close(), "__0_0.distcp is damaged (truncated: 0 of"),
    ("missing-shard", lambda d: (d / "__1_0.distcp").unlink(), "__1_0.distcp is missing (.metadata names it)"),
    ("empty-metadata", lambda d: open(d / ".metadata", "w").close(), ".metadata is damaged (EOFError"),
    ("garbled-metadata", lambda d: (d / ".metadata").write_bytes(b"not a pickle"), ".metadata is damaged ("),
    ("no-metadata", lambda d: (d / ".metadata").unlink(), "has no .metadata file: it is not a checkpoint, or its"),
])
def test_damaged_checkpoint_is_named_without_ranks(ranks, tmp_path, name, damage, message):
    copy_ = tmp_path / name
    shutil.copytree(Path(ranks[1]) / "mlp", copy_)
    assert read_meta(str(copy_))["optimizer"]["class"] == "torch.optim.adamw.AdamW"   # whole, before the damage
    damage(copy_)
    with pytest.raises(CheckpointError) as e:
        read_metadata(str(copy_))
    assert message in str(e.value) and "\n" not in str(e.value)


# -- an interrupted save ------------------------------------------------------------------------------

@pytest.mark.parametrize("point", W.STOPS)
def test_a_stopped_save_leaves_a_checkpoint_that_resumes_the_run(ranks, point):
    a = ranks[0][0]["atomic"]
    res = a[point]
    assert res["error"] == f"save stopped at '{point}' (SPMDC_TEST_SAVE_STOP)"
    want_step = 4 if point == "renamed" else 2   # only a save that got into place replaced step 2's
    assert res["step"] == want_step
    assert res["resumed"] == a["whole"][want_step:want_step + 2]   # bitwise the uninterrupted run
    listing = {"shards": [".ckpt.saving", "ckpt"], "metadata": [".ckpt.saving", "ckpt"],
               "aside": [".ckpt.replaced", ".ckpt.saving"], "renamed": [".ckpt.replaced", "ckpt"]}
    assert res["listing"] == listing[point]
    assert res["located"] == (".ckpt.replaced" if point == "aside" else "ckpt")
    for r in ranks[0].values():
        assert r["atomic"][point] == res


def test_the_next_save_tidies_up_after_stopped_ones(ranks):
    a = ranks[0][0]["atomic"]
    assert a["tidy_listing"] == ["ckpt"] and a["tidy_step"] == 4
    rank_checks.close(a["whole"], eager(6, lambda ps: torch.optim.AdamW(ps, lr=W.LR)), RTOL, ATOL)
    assert not os.path.exists(Path(ranks[1]) / "atomic" / ".ckpt.saving")


def test_a_save_before_the_first_step_changes_nothing(ranks):
    """An optimizer that has taken no step is saved fresh (torch's get_state_dict made its state up
    by a step of lr 0; the first real step then counted 2 for Adam's bias correction): the run that
    saved at step 0 and the one resumed from that save train bitwise as the run that never saved,
    and the checkpoint read on one device holds no optimizer state."""
    from spmdc.runtime.checkpointing import read_whole

    for r in ranks[0].values():
        out = r["fresh"]
        assert out["fresh_state_after_save"] == 0
        assert out["saved_then_trained"] == out["trained"] == out["resumed"]
        assert out["trained"] == pytest.approx(eager(3, lambda p: torch.optim.AdamW(p, lr=W.LR)), rel=RTOL, abs=ATOL)
    tmp = ranks[1]
    model, optim = read_whole(f"{tmp}/fresh")
    assert optim == {} and set(model) == set(W.mlp().state_dict())
