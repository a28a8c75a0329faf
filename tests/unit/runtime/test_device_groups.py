"""Compiled modules on device groups: a 6-rank job where ranks 0-3 train gpt2-tiny under
megatron (tp=4) and ranks 4-5 under fsdp (dp=2), each group on its own batch, at once. Each
matches one device (losses and parameters rtol 1e-4, atol 1e-5; dropout draws as one device
after the same seed), resumes bitwise from its own DCP checkpoint, and a rank outside a
group's mesh is refused by name."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import group_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    return launch(W.groups_six, 6, (str(tmp_path_factory.mktemp("groups")),), timeout_s=900)


@pytest.mark.parametrize("name", list(W.GROUPS))
def test_each_group_matches_one_device(six, name):
    ranks, _, _, batch = W.GROUPS[name]
    model, ((x,), (y,)), loss_fn = W.job(batch)
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        losses.append(float(loss.detach()))
    state = {k: v.detach() for k, v in model.state_dict().items()}
    for r in ranks:
        got = six[r]
        assert got["group"] == name and got["mesh_rank"] == ranks.index(r)
        close(got["losses"], losses)
        close(got["state"], state)


def test_each_group_resumes_from_its_checkpoint(six):
    for r in six.values():
        assert r["resumed"] == r["losses"][2]


def test_a_rank_outside_the_mesh_is_refused(six):
    assert "is not in the device mesh" in six[0]["refused"] and "ranks [4, 5]" in six[0]["refused"]
