"""Start ranks with torch's own elastic launcher (what ``torchrun`` uses).

    results = launch(worker_fn, nproc=4, args=(config,))   # {rank: return value}

Every rank gets the usual torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, ...).
A rank that raises makes the launcher stop all ranks; :class:`LaunchError` carries
the failing rank's message.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any


class LaunchError(RuntimeError):
    pass


def launch(fn: Callable[..., Any], nproc: int, args: tuple = (), timeout_s: float = 300.0) -> dict[int, Any]:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"spmdc-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.1,
        start_method="spawn", rdzv_configs={"timeout": int(timeout_s)},
    )
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        return elastic_launch(config, fn)(*args)
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        msg = failure.message
        if isinstance(msg, dict):
            msg = msg.get("message", str(msg))
        raise LaunchError(f"rank {rank} failed: {msg}") from None
