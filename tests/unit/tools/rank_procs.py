"""Helper for the CLI tests: list this user's python processes running spmdc ranks."""

import os
import subprocess


def rank_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    me = str(os.getpid())
    return [line for line in out if "spmdc" in line and "multiprocessing" in line and not line.strip().startswith(me)]
