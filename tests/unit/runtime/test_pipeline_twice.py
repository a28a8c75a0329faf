"""Two pipelines in one job (4 gloo ranks): one of four one-rank stages, then one of two stages of
two ranks. The second's stage process groups are made by every rank (``new_group`` in stage
order); groups made by their members alone hung here in ``new_group``. Both train; the second's
losses are the same on every rank and finite."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import pipeline_twice_workers as W  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


def test_a_second_pipeline_over_other_rank_sets_trains():
    out = launch(W.two_pipelines, 4, timeout_s=300)
    assert all(len(out[r]) == 2 for r in range(4))
    assert all(out[r] == out[0] for r in range(4)) and all(math.isfinite(x) for x in out[0])
