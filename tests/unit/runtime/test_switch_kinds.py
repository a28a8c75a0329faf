"""Switching between layout kinds at run time (spmdc.api.switch), one 4-rank gloo launch: llama-tiny
fsdp (dp=4) -> a pp=2 x tp=2 pipeline -> device groups (megatron tp=2 | fsdp dp=2) -> fsdp, and HF
GPT-2 at its defaults (dropout on) megatron on tp=4 — its fused c_attn stored strided — -> fsdp.
Each segment trains 2 AdamW steps; the whole run equals one device trained without interruption:
the losses on every rank, every parameter and AdamW's exp_avg / exp_avg_sq / step at the end
(rtol 1e-4, atol 1e-5; lr 1e-3: AdamW divides by sqrt(v), so where a gradient is near zero the
rounding of another summation order shows up in the parameters in proportion to lr). Pipeline stages
refuse random ops, so the pipeline chain uses llama-tiny (no dropout)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import switch_kinds_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.fixture(scope="module")
def four():
    return launch(W.run_chains, 4, (), timeout_s=900)


def one_device(name: str) -> tuple[list[float], dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]], float]:
    from spmdc.frontend.workloads import load_workload

    workload, batch, _first, switches = W.CHAINS[name]
    torch.manual_seed(0)
    w = load_workload(workload, batch=batch)
    model = copy.deepcopy(w.model)
    opt = torch.optim.AdamW(model.parameters(), lr=W.LR)
    torch.manual_seed(1)
    losses = []
    for _ in range(W.STEPS * (len(switches) + 1)):
        opt.zero_grad()
        out = model(*w.inputs, **w.kwargs)
        loss = w.loss_fn(out, *w.loss_inputs) if w.loss_fn is not None else out.loss
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    names = {id(p): n for n, p in model.named_parameters()}
    optim = {names[id(p)]: {k: v for k, v in st.items() if k != "step"} for p, st in opt.state.items()}
    step = float(next(iter(opt.state.values()))["step"])
    return losses, {k: v.detach() for k, v in model.state_dict().items()}, optim, step


# the kinds each chain switches out of and into, its cells of the matrix
CELLS = {"llama fsdp>pp>groups>fsdp": [("one mesh", "switch"), ("pipeline", "switch"), ("device groups", "switch")],
         "hf-gpt2 megatron>fsdp": [("one mesh", "switch"), ("one mesh", "dropout")]}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.matrix(*c) for c in CELLS[n]], id=n)
                                  for n in W.CHAINS])
def test_switched_run_matches_one_device_uninterrupted(four, name):
    losses, state, optim, step = one_device(name)
    for r in range(4):
        close(four[r][name]["losses"], losses)
        assert set(four[r][name]["steps"].values()) == {step}   # AdamW's step count carried
    got = four[0][name]
    close({k: got["state"][k] for k in state}, state)
    close(got["optim"], optim)


def test_each_switch_lands_in_its_kind_and_moves_the_state(four):
    reports = four[0]["llama fsdp>pp>groups>fsdp"]["reports"]
    assert [r["kind"] for r in reports] == ["pipeline", "groups", "mesh"]
    for r in reports:
        assert r["tensors"] > 0 and r["bytes_total"] > 0
    assert reports[0]["streamed"] == 0 and reports[2]["streamed"] == 0   # the direct path: slice tables
    assert reports[1]["streamed"] == reports[1]["tensors"]              # direct=False: every tensor whole
    for r in range(4):   # the direct path: at most one message per peer (all tensors packed per pair)
        for rep in (four[r]["llama fsdp>pp>groups>fsdp"]["reports"][k] for k in (0, 2)):
            assert rep["messages"] <= 3


def test_strided_shards_go_through_the_whole_tensor(four):
    # megatron keeps GPT-2's fused c_attn (q, k, v side by side) as SS: those tensors (2 layers x
    # weight and bias, each with exp_avg and exp_avg_sq) take the general path, the others the tables
    (rep,) = four[0]["hf-gpt2 megatron>fsdp"]["reports"]
    assert rep["streamed"] == 2 * 2 * 3
    assert rep["tensors"] > rep["streamed"]
