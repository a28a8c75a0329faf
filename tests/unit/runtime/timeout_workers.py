"""Launched-rank entry point of test_collective_timeout: one rank of a 1-D ``dp`` mesh never
joins a collective (it sleeps far longer than the collective timeout)."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from spmdc.runtime.collectives import Collectives


def one_rank_missing(missing: int) -> float:
    """Every rank all-reduces once; then all but ``missing`` all-reduce again while ``missing``
    sleeps. Returns the first all-reduce's value (what a rank returns if nothing times out)."""
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    comm = Collectives(mesh)
    first = float(comm.all_reduce(torch.ones(2), ["dp"], "sum")[0])
    if dist.get_rank() == missing:
        time.sleep(300)
        return first
    comm.all_reduce(torch.ones(2), ["dp"], "sum")
    return first
