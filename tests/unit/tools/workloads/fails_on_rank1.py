"""A workload whose factory fails on rank 1 only (a user-code error on one rank)."""

import os

from spmdc.examples import mlp


def factory():
    if os.environ.get("RANK") == "1":
        raise RuntimeError("deliberate failure in the workload factory on rank 1")
    return mlp.factory()
