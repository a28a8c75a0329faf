"""A workload whose rank 1 never arrives: rank 0 waits in a collective until --timeout."""

import os
import time

from spmdc.examples import mlp


def factory():
    if os.environ.get("RANK") == "1":
        time.sleep(3600)
    return mlp.factory()
