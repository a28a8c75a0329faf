"""``spmdc run`` end to end: ranks started by torch's launcher, --check against eager, failures."""

import os
import subprocess
import sys
import time

from rank_procs import rank_processes


def _run(*args, env=None, timeout=240):
    return subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_run_check_passes_and_prints_summary():
    res = _run("mlp", "--nproc", "2", "--mesh", "tp=2", "--plan", "megatron", "--steps", "3", "--check",
               "--optimizer", "adamw", "--lr", "0.01")
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "step 3/3" in out and "check passed" in out
    assert "comm.all_reduce" in out  # the collectives table (one all_reduce per step: Megatron MLP)


def test_failing_rank_aborts_all_ranks_with_its_message():
    start = time.time()
    res = _run("mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "dp", env={"SPMDC_TEST_FAIL_RANK": "1"})
    assert res.returncode == 1
    assert "rank 1 failed" in res.stdout and "injected failure on rank 1" in res.stdout
    assert time.time() - start < 120
    time.sleep(1)
    assert rank_processes() == []  # no rank left behind


def test_run_with_triton_target_on_cpu_matches_one_device():
    res = _run("mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "fsdp", "--steps", "2", "--target", "triton",
               "--check")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "target triton" in res.stdout and "kernels launched per step" in res.stdout
    assert "check passed" in res.stdout


def test_bad_arguments_fail_before_starting_ranks():
    cases = [(("nosuch",), "unknown workload 'nosuch'"),
             (("mlp", "--plan", "fdsp", "--mesh", "dp=2"), "did you mean 'fsdp'"),
             (("mlp", "--plan", "megatron", "--mesh", "dp=2"), "needs mesh axis 'tp'"),
             (("mlp", "--mesh", "dp=x"), "invalid mesh 'dp=x'")]
    for args, message in cases:
        res = _run(*args, timeout=60)
        text = " ".join((res.stdout + res.stderr).split())
        assert res.returncode == 1 and message in text, text
        assert "Traceback" not in res.stderr and "rank 0 failed" not in text  # no rank was started
