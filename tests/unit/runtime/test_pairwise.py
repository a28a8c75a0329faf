"""Gathers and reduce-scatters on gloo run as pairwise exchanges (spmdc.runtime.pairwise): exact
results for uneven and ragged pieces, every reduce op, overlapping started exchanges; a gather
allocates only its output (gloo's own gather allocated a transfer buffer as large), a reduce-scatter
of a packed buffer only one piece's receive buffer besides its pack."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import pairwise_workers  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.mark.parametrize("n", [3, 4])
def test_pairwise_exchanges(n):
    out = launch(pairwise_workers.exchanges, n, (), timeout_s=240)
    for rank, got in sorted(out.items()):
        assert got["bad"] == [], f"rank {rank}: {got['bad']}"
        out_bytes = n * 4096 * 4
        # the gathered buffer and the unpacked result (torch.cat of its rows), nothing of gloo's
        assert got["gather_peak"] <= 2 * out_bytes, got["gather_peak"]
        # the padded pack (a copy of the operand), one piece's receive buffer, the result
        assert got["scatter_peak"] <= out_bytes + 2 * 4096 * 4, got["scatter_peak"]
        assert got["used"] == []   # only point-to-point transfers
