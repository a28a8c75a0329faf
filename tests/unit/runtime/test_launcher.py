"""How ranks are started (spmdc.runtime.launcher): forked from one server that imported torch and
spmdc once, each rank seeing the environment of its own launch and running its atexit handlers, as a
spawned rank would."""

from __future__ import annotations

import multiprocessing
import os

import torch
from failing_rank import (
    environment,
    leaves_a_file_at_exit,
    puts_its_rank,
    sums_and_scales,
    writes_to_a_file_it_leaves_open,
)

from spmdc.runtime.launcher import launch

PROBE = "SPMDC_LAUNCHER_PROBE"


def test_ranks_see_the_environment_of_their_launch_from_one_server(monkeypatch):
    monkeypatch.delenv(PROBE, raising=False)
    first = launch(environment, 2, ([PROBE, "RANK", "WORLD_SIZE"],), timeout_s=120)
    again = launch(environment, 2, ([PROBE, "RANK", "WORLD_SIZE"],), timeout_s=120)
    for got in (first, again):
        assert [got[r]["env"] for r in (0, 1)] == [{PROBE: None, "RANK": str(r), "WORLD_SIZE": "2"} for r in (0, 1)]
    # the same server started both launches' ranks (forked from it: not this process, not each other)
    servers = {got[r]["parent"] for got in (first, again) for r in (0, 1)}
    assert len(servers) == 1 and os.getpid() not in servers
    assert len({got[r]["pid"] for got in (first, again) for r in (0, 1)}) == 4
    monkeypatch.setenv(PROBE, "set after the server started")
    changed = launch(environment, 2, ([PROBE],), timeout_s=120)
    assert [changed[r]["env"][PROBE] for r in (0, 1)] == ["set after the server started"] * 2
    monkeypatch.delenv(PROBE)
    unset = launch(environment, 2, ([PROBE],), timeout_s=120)
    assert [unset[r]["env"][PROBE] for r in (0, 1)] == [None, None]


def test_a_ranks_atexit_handlers_run_when_it_ends(tmp_path):
    assert launch(leaves_a_file_at_exit, 2, (str(tmp_path),), timeout_s=120) == {0: 0, 1: 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]
    assert (tmp_path / "rank1").read_text() == "exited\n"


def test_a_file_a_rank_left_open_keeps_what_it_wrote(tmp_path):
    assert launch(writes_to_a_file_it_leaves_open, 2, (str(tmp_path),), timeout_s=120) == {0: 0, 1: 1}
    assert [(tmp_path / f"log{r}").read_text() for r in (0, 1)] == ["rank 0 trained\n", "rank 1 trained\n"]


def test_many_tensors_reach_every_rank_as_its_own_copy():
    """More tensors than the fork server can pass as file descriptors (252): they go by value, and
    what a rank does to its copy is not seen by this process."""
    tensors = [torch.full((3,), float(i)) for i in range(300)]
    total = 3.0 * sum(range(300))
    assert launch(sums_and_scales, 2, (tensors,), timeout_s=120) == {0: total, 1: total}
    assert all(torch.equal(t, torch.full((3,), float(i))) for i, t in enumerate(tensors))


def test_what_only_inheritance_can_send_makes_the_ranks_spawned():
    queue = multiprocessing.get_context("spawn").SimpleQueue()
    assert launch(puts_its_rank, 2, (queue,), timeout_s=120) == {0: None, 1: None}
    assert sorted(queue.get() for _ in range(2)) == [0, 1]
