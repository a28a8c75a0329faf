"""Rank side of test_calibrate.py's timing windows (spmdc.tools.calibrate._for_a_while) on gloo ranks."""

from __future__ import annotations

import time
from typing import Any


def windows(seconds: float) -> dict[str, Any]:
    """Every rank calls back to back for ``seconds``, then rank 0 alone while the others wait: the
    (start, end) of each call, and when each rank left each window."""
    import torch.distributed as dist

    from spmdc.tools.calibrate import _for_a_while

    dist.init_process_group("gloo")
    try:
        def call() -> tuple[float, float]:
            t = time.time()
            time.sleep(0.01)
            return t, time.time()

        every = _for_a_while(dist, call, seconds, 3)
        left_every = time.time()
        alone = _for_a_while(dist, call, seconds, 3, mine=dist.get_rank() == 0)
        return {"every": every, "left_every": left_every, "alone": alone, "left_alone": time.time()}
    finally:
        dist.destroy_process_group()
