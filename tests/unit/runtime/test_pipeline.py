"""Pipeline parallelism over device groups (spmdc.api.pipeline_executor) on gloo: pp=2 on 2 ranks,
pp=2 x tp=2 and three heterogeneous stages on 4 ranks, gpt2-tiny (and llama-tiny on 2 ranks; on pp=2 x
tp=2 it is test_pipeline_features.py's), each under GPipe and 1F1B. After 3 optimizer steps the losses
(every rank) and every parameter equal one device
(rtol 1e-4, atol 1e-5); every rank issues exactly the sends and receives of its schedule in the
IR and runs its computations in the IR's order; 1F1B holds less activation memory than GPipe on
every stage but the last (which runs each micro-batch's forward and backward at once in both)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import pipeline_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

CASES = {**{k: (2, v) for k, v in W.TWO_RANKS.items()}, **{k: (4, v) for k, v in W.FOUR_RANKS.items()}}


@pytest.fixture(scope="module")
def results():
    two = launch(W.run_cases, 2, (W.TWO_RANKS,), timeout_s=900)
    four = launch(W.run_cases, 4, (W.FOUR_RANKS,), timeout_s=900)
    return {2: two, 4: four}


def one_device(workload: str, batch: int, opt: tuple) -> tuple[list[float], dict[str, torch.Tensor]]:
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.optimizers import make_optimizer

    torch.manual_seed(0)
    w = load_workload(workload, batch=batch)
    model = copy.deepcopy(w.model)
    optim = make_optimizer(opt, list(model.parameters()))
    losses = []
    for _ in range(W.STEPS):
        optim.zero_grad()
        loss = w.loss_fn(model(*w.inputs), *w.loss_inputs)
        loss.backward()
        optim.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach() for k, v in model.named_parameters(remove_duplicate=False)}


@pytest.mark.parametrize("sched", W.SCHEDULES)
@pytest.mark.parametrize("name", list(CASES))
def test_matches_one_device(results, name, sched):
    n, (workload, _plan, batch, opt) = CASES[name]
    losses, state = one_device(workload, batch, opt)
    for r in range(n):
        close(results[n][r][f"{name} {sched}"]["losses"], losses)
    close(results[n][0][f"{name} {sched}"]["state"], state)


@pytest.mark.parametrize("sched", W.SCHEDULES)
@pytest.mark.parametrize("name", list(CASES))
def test_ranks_run_their_schedule(results, name, sched):
    n = CASES[name][0]
    for r in range(n):
        got = results[n][r][f"{name} {sched}"]
        assert got["sends"] == got["ir_sends"] and got["recvs"] == got["ir_recvs"]
        assert got["ran"] == got["ir_compute"]
    assert sum(results[n][r][f"{name} {sched}"]["sends"] for r in range(n)) > 0


@pytest.mark.parametrize("name", list(CASES))
def test_1f1b_holds_less_than_gpipe(results, name):
    n = CASES[name][0]
    for r in range(n):
        gpipe, onef = results[n][r][f"{name} gpipe"], results[n][r][f"{name} 1f1b"]
        if gpipe["stage"] < gpipe["n_stages"] - 1:
            assert 0 < onef["peak"] < gpipe["peak"], (r, onef["peak"], gpipe["peak"])
        else:
            assert onef["peak"] == gpipe["peak"]


def test_three_stage_middle_rank_program(results):
    ir = results[4][2]["gpt2-tiny pp3 hetero 1f1b"]["ir"]
    lines = [ln.strip() for ln in ir.splitlines()[1:7]]
    assert lines == ["pipe.recv {from = [0], mb = 0, value = 0}", "pipe.forward {mb = 0, stage = 1}",
                     "pipe.send {mb = 0, to = [3], value = 1}", "pipe.recv {from = [0], mb = 1, value = 0}",
                     "pipe.forward {mb = 1, stage = 1}", "pipe.send {mb = 1, to = [3], value = 1}"], ir


def test_refusals_name_the_reason_on_every_rank(results):
    for r in range(2):
        got = results[2][r]["refused"]
        assert "is not the mean of its 2 micro-batches' losses" in got["batch-coupled loss"]
        assert "is not the mean of its 2 micro-batches' losses" in got["batch-coupled loss with dropout"]
