"""``spmdc plan`` compiles a pipeline's stages in forked workers (spmdc.api.forked): the same
predictions as one after the other, results in order, a worker's error raised here."""

from __future__ import annotations

import os

import pytest

from spmdc.api.dry_run import dry_run
from spmdc.api.forked import forked_map
from spmdc.compiler.devices import device_profile
from spmdc.frontend.workloads import load_workload
from spmdc.sharding.pipeline_plan import PipelinePlan


def _square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_results_come_back_in_order_from_other_processes():
    out = forked_map(_square_and_pid, range(5), jobs=2)
    assert [v for v, _ in out] == [0, 1, 4, 9, 16]
    assert os.getpid() not in {pid for _, pid in out}
    assert forked_map(_square_and_pid, range(3), jobs=1) == [(0, os.getpid()), (1, os.getpid()), (4, os.getpid())]


class Unpicklable(Exception):
    def __init__(self, a, b):   # (pickling re-creates it from one argument: fails)
        super().__init__(f"{a} and {b}")


def _fail(x: int) -> int:
    if x == 2:
        raise KeyError(f"no stage {x}")
    if x == 3:
        raise Unpicklable("left", "right")
    return x


def test_a_workers_error_is_raised_here():
    with pytest.raises(KeyError, match="no stage 2"):
        forked_map(_fail, [0, 1, 2], jobs=2)
    with pytest.raises(RuntimeError, match="Unpicklable: left and right"):
        forked_map(_fail, [0, 3], jobs=2)


def test_stages_in_workers_predict_what_they_predict_one_after_the_other():
    w = load_workload("gpt2-tiny", batch=8)
    plan = PipelinePlan.from_mesh("pp=2,dp=2", "fsdp")
    kw = dict(mesh=None, plan=plan, device=device_profile("h100"), train=True, loss_fn=w.loss_fn,
              loss_inputs=w.loss_inputs, kwargs=w.kwargs, optimizer="adamw")
    here = dry_run(w.model, w.inputs, jobs=1, **kw)
    forked = dry_run(w.model, w.inputs, jobs=2, **kw)
    assert [(r.group, r.ranks, r.ops) for r in here.roles] == [(r.group, r.ranks, r.ops) for r in forked.roles]
    assert [r.prediction for r in here.roles] == [r.prediction for r in forked.roles]
    assert len(here.roles) == 2


_AFTER_PARALLEL_OPS = """
import torch
from spmdc.api.forked import forked_map
torch.set_num_threads(2)
x = torch.ones(1 << 22)
for _ in range(3):
    x.mul_(1.0).add_(0.0)          # the parent's OpenMP pool is running now
p = torch.nn.Parameter(torch.zeros(1 << 20))
p.grad = torch.ones_like(p)
opt = torch.optim.Adam([p])

def step(_):
    opt.step()                     # parallel elementwise ops in the forked worker
    return float(p.detach().sum())

print(forked_map(step, [0, 1], jobs=2))
"""


def test_a_worker_runs_torch_ops_after_the_parent_ran_parallel_ones():
    """A forked worker's first parallel region once waited for ever on the parent's OpenMP pool
    (an Adam step measured by the pipeline dry run's memory prediction)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _AFTER_PARALLEL_OPS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("[") and "-" in done.stdout   # two sums of a stepped parameter
