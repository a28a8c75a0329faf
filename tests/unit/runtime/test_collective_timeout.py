"""A collective timeout names the ranks that never arrived, not only the rank that waited, and
the whole job ends within a bound (3 gloo ranks, ``SPMDC_COLLECTIVE_TIMEOUT=3``)."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))

import timeout_workers  # noqa: E402

from spmdc.runtime.collectives import TIMEOUT_ENV, absent_ranks, collective_timeout  # noqa: E402
from spmdc.runtime.launcher import LaunchError, launch  # noqa: E402

BOUND_S = 60   # 3 s timeout + 3 s grace + starting and ending 3 ranks


def test_timeout_comes_from_the_environment():
    assert collective_timeout({}) is None   # unset: the process group's own timeout, as before
    assert collective_timeout({TIMEOUT_ENV: "2.5"}) == 2.5
    for bad in ("soon", "0", "-1"):
        with pytest.raises(ValueError, match=f"{TIMEOUT_ENV}='{bad}': expected a positive number of seconds"):
            collective_timeout({TIMEOUT_ENV: bad})


def test_absent_ranks_are_those_without_an_arrival_mark():
    store = dist.HashStore()
    assert absent_ranks(store, [0, 1, 2], 1, "g/1", 0.1) == [0, 2]   # marks rank 1 itself
    assert absent_ranks(store, [0, 1, 2], 0, "g/1", 0.1) == [2]
    assert absent_ranks(store, [0, 1, 2], 0, "g/2", 0.1) == [1, 2]   # another collective: its own marks
    assert absent_ranks(None, [0, 1], 0, "g/1", 0.1) is None


@pytest.mark.parametrize("missing", [2, 0])
def test_a_timed_out_collective_names_the_rank_that_never_arrived(monkeypatch, missing):
    monkeypatch.setenv(TIMEOUT_ENV, "3")
    start = time.monotonic()
    with pytest.raises(LaunchError) as info:
        launch(timeout_workers.one_rank_missing, 3, (missing,), timeout_s=120)
    elapsed = time.monotonic() - start
    text = " ".join(str(info.value).split())
    waiting = [r for r in range(3) if r != missing]
    assert re.search(rf"rank [{''.join(map(str, waiting))}] failed: CollectiveTimeout: collective all_reduce on "
                     rf"axis 'dp' \(ranks \[0, 1, 2\]\) timed out after 3\.\ds on rank [{''.join(map(str, waiting))}]: "
                     rf"ranks \[{missing}\] never arrived", text), text
    assert elapsed < BOUND_S, f"the job took {elapsed:.0f}s to end"
