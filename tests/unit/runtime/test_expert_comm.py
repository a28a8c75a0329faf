"""comm.expert_dispatch / comm.expert_combine on 4 gloo ranks equal the single-device expert ops
they lower (exactly: rows are moved, not computed), dropless and with a capacity that drops rows:
each rank's slot is its slice of tensor.expert_dispatch's buffer, combine gives back each rank's
rows of tensor.expert_combine, and the load counts are the rows each expert kept and dropped."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from expert_comm_workers import dispatch_and_combine  # noqa: E402

from spmdc.dialects.expert_helpers import expert_combine, expert_counts, expert_dispatch, expert_route  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402

WORLD, E, K, T, D = 4, 8, 2, 16, 3
S = T * K
CAPS = [S, 6, 1]   # dropless, a capacity that drops some rows, one row per slot


@pytest.fixture(scope="module")
def runs():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, E, (S,), generator=g)
    ids[ids == 5] = 0                       # expert 5 idle, expert 0 crowded
    x, w = torch.randn(T, D, generator=g), torch.rand(S, generator=g)
    return ids, x, w, launch(dispatch_and_combine, WORLD, (ids, x, w, E, K, CAPS), timeout_s=300)


@pytest.mark.parametrize("c", range(len(CAPS)), ids=[f"cap{c}" for c in CAPS])
def test_ranks_move_exactly_the_rows_the_global_ops_define(runs, c):
    ids, x, w, results = runs
    cap = CAPS[c]
    counts = expert_counts(ids, E, WORLD)
    dest, _, _ = expert_route(ids, counts, WORLD, cap, S // WORLD, 0)
    buf = expert_dispatch(x, dest, WORLD * cap, K)
    wbuf = expert_dispatch(w, dest, WORLD * cap, 1)
    back, tok = expert_combine(buf, dest, 1), expert_combine(buf, dest, K)
    per = S // WORLD
    dropped = int((dest < 0).sum())
    assert (dropped == 0) == (cap == S)
    for r in range(WORLD):
        got = results[r][c]
        torch.testing.assert_close(got["dest"], dest[r * per:(r + 1) * per], rtol=0, atol=0)
        torch.testing.assert_close(got["rows"], buf[r * cap:(r + 1) * cap], rtol=0, atol=0)
        torch.testing.assert_close(got["wrows"], wbuf[r * cap:(r + 1) * cap], rtol=0, atol=0)
        torch.testing.assert_close(got["back"], back[r * per:(r + 1) * per], rtol=0, atol=0)
        torch.testing.assert_close(got["tok"], tok[r * (per // K):(r + 1) * (per // K)], rtol=0, atol=0)
    kept = sum(sum(results[r][c]["load"].values()) for r in range(WORLD))
    lost = sum(sum(results[r][c]["dropped"].values()) for r in range(WORLD))
    assert (kept, lost) == (S - dropped, dropped)
