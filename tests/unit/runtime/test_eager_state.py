"""Eager mode (spmdc.eager) keeps its training state across layout kinds (issue 26): saved and
resumed under compiled programs and back, switched at run time to a compiled plan and back,
strided shards included — one 4-rank launch (:mod:`eager_state_workers`).

Each run of 6 AdamW steps equals one device trained without interruption: the losses on every
rank, every parameter, AdamW's exp_avg / exp_avg_sq and step count at the end (rtol 1e-4 /
atol 1e-5: shards sum in another order). An eager module writes the checkpoint a compiled one
writes (the same entries and global shapes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import eager_state_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
N = W.STEPS * 3


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return launch(W.run, 4, (str(tmp_path_factory.mktemp("eager")),), timeout_s=900)


def one_device(model, step) -> tuple[list[float], dict, dict, float]:
    opt = torch.optim.AdamW(model.parameters(), lr=W.LR)
    losses = []
    for _ in range(N):
        opt.zero_grad()
        loss = step(model)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    names = {id(p): n for n, p in model.named_parameters()}
    optim = {names[id(p)]: {k: v for k, v in st.items() if k != "step"} for p, st in opt.state.items()}
    return losses, {k: v.detach() for k, v in model.state_dict().items()}, optim, float(
        next(iter(opt.state.values()))["step"])


def _check(four, case, want) -> None:
    losses, state, optim, step = want
    for r in range(4):
        close(four[r][case]["losses"], losses, RTOL, ATOL)
        assert set(four[r][case]["steps"].values()) == {step}   # AdamW's step count carried
    got = four[0][case]
    assert set(got["state"]) == set(state)
    close(got["state"], state, RTOL, ATOL)
    close(got["optim"], {n: optim[n] for n in got["optim"]}, RTOL, ATOL)
    assert set(got["optim"]) == set(optim)


@pytest.mark.matrix("eager", "save/resume")
def test_eager_checkpoint_resumes_compiled_and_back_as_one_device(four):
    model, (x, y), loss = W.llama()
    _check(four, "checkpoints", one_device(model, lambda m: loss(m(x), y)))
    got = four[0]["checkpoints"]
    assert got["execution"] == [("eager", "EagerProgram"), ("compiled", "RankProgram"), ("eager", "EagerProgram")]
    assert got["extra"] == [{"step": 2}, {"step": 4}]


def test_eager_writes_the_compiled_modules_checkpoint(four):
    entries = four[0]["checkpoints"]["entries"]
    assert entries["eager"] == entries["compiled"]
    assert any(k.startswith("optim.state.") and k.endswith(".exp_avg") for k in entries["eager"])
    assert entries["eager"]["model.embed_tokens.weight"] == (128, 32)


@pytest.mark.matrix("eager", "switch")
@pytest.mark.matrix("eager", "dropout")
def test_eager_switches_to_compiled_and_back_as_one_device(four):
    w = W.gpt2()
    torch.manual_seed(1)
    _check(four, "switches", one_device(w.model, lambda m: m(*w.inputs, **w.kwargs).loss
                                        if w.loss_fn is None else w.loss_fn(m(*w.inputs, **w.kwargs), *w.loss_inputs)))


def test_switch_moves_strided_shards_and_changes_execution(four):
    got = four[0]["switches"]
    # eager keeps bucketing and overlap off; compiled after eager has them back at their defaults
    assert got["execution"] == [("eager", "EagerProgram", False, False), ("compiled", "RankProgram", True, True),
                                ("eager", "EagerProgram", False, False)]
    c_attn = sorted(f"transformer.h.{i}.attn.c_attn.{k}" for i in range(2) for k in ("weight", "bias"))
    for names in got["strided"]:   # fsdp+tp and megatron both store the fused c_attn SS(., 3) on tp
        assert names == c_attn
    for r in got["reports"]:   # the strided ones (param, exp_avg, exp_avg_sq) through their whole value
        assert r["streamed"] == 3 * len(c_attn) and r["tensors"] > r["streamed"] and r["bytes_total"] > 0
