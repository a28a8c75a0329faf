"""Interleaved 1F1B (spmdc.api.pipeline_executor, virtual pipeline stages) on 2 gloo ranks, one launch.

P=2 ranks, v=2 stages each (4 stages; rank 0 runs stages 0 and 2, rank 1 stages 1 and 3), 4
micro-batches, 2 steps: with AdamW a 4-layer tanh MLP from a pipeline plan with ``virtual_stages`` and
from a mesh ``pp=2`` with ``pp_schedule="interleaved"``, and with SGD gpt2-tiny with 4 layers (its
tied embedding read by stage 0 on rank 0 and stage 3 on rank 1; under AdamW one device itself
differs from its 4-micro-batch accumulation by 1.7e-5, see the workers' note). Losses on every rank and every
parameter equal one device (rtol 1e-4, atol 1e-5); each rank sends exactly the messages of its
schedule IR (counted at the sender), runs its computations in the IR's order, and holds the
parameters of both its stages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import pipeline_interleaved_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return launch(W.run_cases, 2, (W.CASES,), timeout_s=900)


def one_device(factory: str, opt: tuple) -> tuple[list[float], dict[str, torch.Tensor]]:
    from spmdc.runtime.optimizers import make_optimizer

    model, inputs, loss_inputs, loss_fn = getattr(W, factory)()
    optim = make_optimizer(opt, list(model.parameters()))
    losses = []
    for _ in range(W.STEPS):
        optim.zero_grad()
        loss = loss_fn(model(*inputs), *loss_inputs)
        loss.backward()
        optim.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach() for k, v in model.named_parameters(remove_duplicate=False)}


@pytest.mark.matrix("pipeline", "interleaved")
@pytest.mark.parametrize("name", list(W.CASES))
def test_matches_one_device(results, name):
    losses, state = one_device(*W.CASES[name][:2])
    for r in range(2):
        assert results[r][name]["schedule"] == "interleaved1f1b"
        assert results[r][name]["n_stages"] == 4 and results[r][name]["stages"] == [r, r + 2]
        close(results[r][name]["losses"], losses)
    close(results[0][name]["state"], state)
    model = getattr(W, W.CASES[name][0])()[0]
    every = {n for n, _ in model.named_parameters()}
    assert set(results[0][name]["params"]) | set(results[1][name]["params"]) == every


@pytest.mark.parametrize("name", list(W.CASES))
def test_messages_are_the_schedule_irs(results, name):
    for r in range(2):
        res = results[r][name]
        assert res["ir_sends"] > 0
        assert res["sends"] == [res["ir_sends"]] * W.STEPS
        assert res["send_counts"] == res["ir_sends"]
    # a chain of 4 stages: 3 boundaries, each value forward and its gradient back, per micro-batch
    if name.startswith("tiny"):
        assert results[0][name]["ir_sends"] + results[1][name]["ir_sends"] == 3 * 2 * W.MICRO


def test_runs_in_the_irs_order(results):
    for r in range(2):
        res = results[r]["tiny plan"]
        labels = [{"pipe.forward": "F", "pipe.backward": "B", "pipe.forward_backward": "FB"}[n] + f"{mb}/{k}"
                  for n, k, mb in res["order"]]
        assert res["timeline"] == labels
    first = results[0]["tiny plan"]["order"][:5]   # warm-up: round 0 through stage 0, then through stage 2
    assert [(k, mb) for _, k, mb in first] == [(0, 0), (0, 1), (2, 0), (2, 1), (0, 2)]
