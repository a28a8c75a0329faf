"""Frozen submodules in eval mode inside a model in training mode, on 4 gloo ranks (one launch).

tests/models/frozen_parts.py: an encoder with ``nn.Dropout(0.5)`` in eval (``requires_grad=False``),
a BatchNorm in eval (running statistics, never updated) and a trainable head. Under fsdp (dp=4),
fsdp+tp (2x2), megatron (tp=4), eager execution (fsdp+tp), a pipeline (2 stages x dp=2) and device
groups (two megatron tp=2 groups, the batch split 1:1): every flag is as the user set it after
compiling and after a step, and the loss, the gradients and the SGD-updated parameters equal eager
PyTorch in those modes (rtol 1e-4, atol 1e-5); so does a HuggingFace GPT-2 backbone left in eval
inside a wrapper in training mode, under fsdp (dp=4). ``cm.train()`` / ``cm.eval()`` set the user's
model's flags as ``nn.Module.train`` does; flags changed after compiling (on the model, or through
``cm.enc``) run the program compiled for them, never a stale one (a pipeline refuses a step after
they change); ranks whose flags differ are refused. And ``spmdc run
tests/models/frozen_parts.py:factory --check`` passes with eager's losses.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "models"))
import frozen_parts as FP  # noqa: E402
import module_modes_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
STEPPED = [*W.STEP_CASES, "eager", "hetero"]


@pytest.fixture(scope="module")
def four():
    return launch(W.modes_four, 4, (), timeout_s=900)


def one_device(job):
    """One device, the same flags: loss, gradients and the parameters after one SGD step."""
    model, x, y = job()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= W.LR * p.grad
    return {"loss": loss.detach(), "grads": grads, "state": {k: v.detach().clone() for k, v in
                                                              model.state_dict().items()}}


@pytest.fixture(scope="module")
def eager():
    return one_device(W.frozen_job)


@pytest.mark.parametrize("case", STEPPED)
def test_step_keeps_flags_and_matches_eager(four, eager, case):
    want = W.flags(FP.frozen_parts())
    assert set(eager["grads"]) == {"bn.weight", "bn.bias", "head.fc1.weight", "head.fc1.bias",
                                   "head.fc2.weight", "head.fc2.bias"}   # the encoder is frozen
    for rank, r in four.items():
        res = r[case]
        assert res["flags"] == want and res["flags_after_step"] == want, f"rank {rank}"
        close(res["loss_backward"], eager["loss"], RTOL, ATOL)
        close(res["loss_step"], eager["loss"], RTOL, ATOL)
        close(res["grads"], eager["grads"], RTOL, ATOL)
        close(res["state"], eager["state"], RTOL, ATOL)   # bn running statistics unchanged


def test_hf_backbone_in_eval_inside_a_wrapper_under_fsdp(four):
    want_flags = W.flags(FP.wrapped_gpt2())
    assert want_flags[""] and not want_flags["backbone"] and not want_flags["backbone.drop"]
    want = one_device(W.hf_job)
    assert set(want["grads"]) == set(dict(FP.wrapped_gpt2().named_parameters()))
    for rank, r in four.items():
        res = r["hf"]
        assert res["flags"] == want_flags and res["flags_after_step"] == want_flags, f"rank {rank}"
        close(res["loss_backward"], want["loss"], RTOL, ATOL)
        close(res["loss_step"], want["loss"], RTOL, ATOL)
        close(res["grads"], want["grads"], RTOL, ATOL)
        close(res["state"], want["state"], RTOL, ATOL)


def test_pipeline_keeps_flags_and_matches_eager(four, eager):
    want = W.flags(FP.frozen_parts())
    for r in four.values():
        assert r["pipeline"]["flags"] == want
        close(r["pipeline"]["loss_step"], eager["loss"], RTOL, ATOL)
        assert r["pipeline"]["changed"] == (
            "the model's module modes changed since the pipeline was built (train; enc=eval, bn=eval -> train; "
            "bn=eval): its stages were cut in the old modes; set them back or call spmdc.compile again")
    state = {}
    for r in four.values():
        state.update(r["pipeline"]["state"])
    params = {k: v for k, v in eager["state"].items() if k in dict(FP.frozen_parts().named_parameters())}
    close({k: state[k] for k in params}, params, RTOL, ATOL)


def _forward(model, x, seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        return model(x)


def test_train_eval_and_flags_changed_after_compiling(four):
    model = FP.frozen_parts()
    x, _ = FP.batch()
    start = _forward(model, x)
    every_eval = _forward(model.eval(), x)
    model.train()
    model.bn.eval()   # the encoder in training mode: dropout on, the ranks' seed
    enc_train = _forward(model, x, W.SEED)
    assert not torch.allclose(enc_train, start)   # (every_eval equals start: only enc and bn depend on modes)
    for rank, r in four.items():
        m = r["modes"]
        assert m["start"] == (True, False, False, True), f"rank {rank}"
        close(m["out_start"], start)
        assert set(m["after_eval"].values()) == {False} and m["cm_after_eval"] == (False, False, False)
        close(m["out_eval"], every_eval)
        assert set(m["after_train"].values()) == {True}   # nn.Module.train(): every flag
        close(m["out_back"], start)
        assert m["programs_back"] == 2   # the first program again, not a third
        close(m["out_enc_train"], enc_train)
        assert m["programs_enc_train"] == 3
        assert m["after_sub_eval"]["enc"] is False and m["after_sub_eval"]["enc.drop"] is False
        close(m["out_sub_eval"], start)
        assert m["programs_end"] == 3
        assert m["mismatch"] is not None and "modes differ between ranks" in m["mismatch"]
        assert ("(rank 0: train; enc=eval, bn=eval, head.act=eval; rank 1: train; enc=eval, bn=eval, head.fc1=eval, "
                "head.act=eval)") in m["mismatch"]


def test_spmd_run_check_of_frozen_parts_matches_eager():
    workload = f"{Path(__file__).parents[2] / 'models' / 'frozen_parts.py'}:factory"
    res = subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", workload, "--nproc", "2", "--mesh",
                          "tp=2", "--plan", "megatron", "--steps", "3", "--check", "--lr", "0.1"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "check passed" in res.stdout
    got = [float(v) for v in re.findall(r"step \d/3: loss ([0-9.]+(?:e-?\d+)?)", res.stdout)]
    model, ((x,), (y,)), loss_fn = FP.factory()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    want = []
    for _ in range(3):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        want.append(float(loss))
    assert len(got) == 3, res.stdout
    close(torch.tensor(got), torch.tensor(want), RTOL, ATOL)
