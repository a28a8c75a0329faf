"""Heterogeneous data parallelism (Hetu v2's HSPMD) on 6 gloo ranks: megatron tp=4 on ranks 0-3 and
tp=2 on ranks 4-5 (and heterogeneous FSDP: fsdp dp=4 and dp=2; llama-tiny's only with 2
micro-batches), the batch of 6 split 4 + 2, gradients summed across the groups by split all-reduce.
gpt2-tiny and llama-tiny each match one device after 3 SGD steps (losses and every parameter on both
groups, rtol 1e-4, atol 1e-5; dropout draws as one device after the same seed), and every rank
issues exactly the split all-reduces of its program: one per holder set it is in. The MLP's
mean-squared error averages over the batch: with pieces of 4 and 2 rows a mean of means would be
wrong, so no mean is taken per piece."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import hetero_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.fixture(scope="module")
def six():
    return launch(W.hetero_six, 6, (), timeout_s=900)


def one_device(name: str) -> tuple[list[float], dict[str, torch.Tensor]]:
    from spmdc.frontend.workloads import load_workload

    torch.manual_seed(0)
    w = load_workload(W.spec(name), batch=W.BATCH)
    model = copy.deepcopy(w.model)
    opt = torch.optim.SGD(model.parameters(), lr=W.LR)
    torch.manual_seed(1)
    losses = []
    for _ in range(W.STEPS):
        opt.zero_grad()
        out = model(*w.inputs, **w.kwargs)
        loss = w.loss_fn(out, *w.loss_inputs) if w.loss_fn is not None else out.loss
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=[pytest.mark.matrix("device groups", "dropout")]
                                               if n == "hf-gpt2" else []) for n in W.CASES])
def test_matches_one_device(six, name):
    losses, state = one_device(name)
    for r in range(6):
        close(six[r][name]["losses"], losses)
    for r in (0, 4):   # one rank of each group: the whole model
        close(six[r][name]["state"], state)


@pytest.mark.parametrize("name", list(W.CASES))
def test_ranks_run_their_groups_program(six, name):
    for r in range(6):
        got = six[r][name]
        g = 0 if r < 4 else 1
        assert got["grp"] == g
        assert got["virtual_rank"] == (r if g == 0 else 2 + r - 4)   # (grp, own axis) on 2x4 and on 2x2
        assert "comm.split_all_reduce" in got["comm_ops"]


def test_split_all_reduces_issued_are_the_holder_sets(six):
    # gpt2-tiny: the loss (one set: all six ranks) and one gradient bucket whose slices are held
    # by {0..5} (replicated parameters) and {0,4} {1,4} {2,5} {3,5} (rows of tp-sharded ones)
    sets = six[0]["gpt2-tiny"]["holder_sets"]
    assert sets == [(0, 1, 2, 3, 4, 5), (0, 4), (1, 4), (2, 5), (3, 5)]
    for r in range(6):
        got = six[r]["gpt2-tiny"]
        ops = got["comm_ops"]["comm.split_all_reduce"]
        assert ops == 2
        per_step = sum(1 for s in sets if r in s) + 1   # the loss op's set, and the gradient bucket's
        assert got["issued"]["comm.split_all_reduce"] == W.STEPS * per_step


def test_hetero_fsdp_reduces_gradient_shards_across_groups(six):
    # inside a group: fsdp's gathers and reduce-scatters; across: rows of rank i (dp=4) meet the
    # rows of rank 4 + i // 2 (dp=2), replicated values (the loss) over all six ranks
    got = six[0]["gpt2-tiny fsdp"]
    assert {(0, 4), (1, 4), (2, 5), (3, 5)} <= set(got["holder_sets"])
    assert got["comm_ops"].get("comm.all_gather_bucket", 0) > 0
    assert got["comm_ops"].get("comm.reduce_scatter_bucket", 0) > 0


@pytest.mark.parametrize("name", [c for c in W.CASES if c not in ("contrastive", "mlp", "hf-gpt2")])
def test_split_all_reduce_bytes_are_the_analytic_count(six, name):
    # each rank all-reduces exactly its own piece of every gradient once (every finest slice of it
    # is held by one rank of the other group too), plus the loss bucket (loss sum, token count)
    for r in range(6):
        got = six[r][name]
        assert got["bytes"]["comm.split_all_reduce"] == W.STEPS * (4 * got["local_numel"] + 2 * 4)


def test_contrastive_scores_cross_the_groups_by_send_recv(six):
    # z (6x8, rows split 4 + 2) is gathered whole in both groups and its partial gradients cut back
    # into the row split, by batched send/recv: every rank has the same comm.bsr ops, the first
    # sending rows 0-3 from two @fast ranks to the two @slow ranks and rows 4-5 back to all four
    # (6 messages); each rank issues exactly the messages of those tables it takes part in
    tables = six[0]["contrastive"]["bsr_messages"]
    assert len(tables) >= 2
    assert tables[0] == [(0, 4), (1, 5), (4, 0), (4, 2), (5, 1), (5, 3)]
    for r in range(6):
        got = six[r]["contrastive"]
        assert got["bsr_messages"] == tables
        assert got["comm_ops"]["comm.bsr"] == len(tables)
        assert got["issued"]["comm.bsr"] == W.STEPS * sum(r in pair for t in tables for pair in t)


def one_device_accumulated(name: str) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The whole batch on one device, AdamW: what grad_accum=2 must give (a mean loss)."""
    from spmdc.frontend.workloads import load_workload

    torch.manual_seed(0)
    w = load_workload(name.split()[0], batch=W.ACCUM_BATCH)
    model = copy.deepcopy(w.model)
    opt = torch.optim.AdamW(model.parameters(), lr=W.ACCUM_LR)
    losses = []
    for _ in range(W.STEPS):
        opt.zero_grad()
        loss = w.loss_fn(model(*w.inputs), *w.loss_inputs)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach() for k, v in model.state_dict().items()}


@pytest.mark.matrix("device groups", "accum")
@pytest.mark.parametrize("name", list(W.ACCUM))
def test_gradient_accumulation_with_device_groups_matches_one_device(six, name):
    # grad_accum=2: two micro-batches of 6 rows (each split 4 + 2 across the groups), gradients summed
    # locally and reduced once per step (lr 1e-3: AdamW divides by sqrt(v), so a gradient near zero
    # turns summation-order rounding into parameter differences of the order of lr)
    losses, state = one_device_accumulated(name)
    for r in range(6):
        close(six[r][name]["losses"], losses)
    for r in (0, 4):
        close(six[r][name]["state"], state)


def test_accumulated_gradients_cross_the_groups_once_per_step(six):
    # gpt2-tiny under megatron groups: each micro-batch's program sums only its loss across the groups;
    # the gradients cross once per step, one split all-reduce per holder set the rank is in: the
    # replicated parameters' set (all six ranks) and its rows' sets ((0, 4), (1, 4), (2, 5), (3, 5))
    sets = [(0, 1, 2, 3, 4, 5), (0, 4), (1, 4), (2, 5), (3, 5)]
    for r in range(6):
        got = six[r]["gpt2-tiny accum"]
        assert got["micro_ops"] == 1
        assert got["issued"]["comm.split_all_reduce"] == W.STEPS * (2 * 1 + sum(r in s for s in sets))

