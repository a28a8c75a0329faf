"""``spmdc run`` end to end: ranks started by torch's launcher, --check against eager, failures."""

import os
import subprocess
import sys
import time
from pathlib import Path

from rank_procs import rank_processes

WORKLOADS = Path(__file__).with_name("workloads")


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
    res = _run(f"{WORKLOADS / 'fails_on_rank1.py'}:factory", "--nproc", "2", "--mesh", "dp=2", "--plan", "dp")
    assert res.returncode == 1
    text = " ".join((res.stdout + res.stderr).split())
    assert "rank 1 failed" in text and "deliberate failure in the workload factory on rank 1" in text
    assert time.time() - start < 120
    time.sleep(1)
    assert rank_processes() == []  # no rank left behind


def test_run_with_triton_target_on_cpu_matches_one_device_and_dumps_what_ran(tmp_path):
    ir, gen = tmp_path / "ir", tmp_path / "gen"
    res = _run("mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "fsdp", "--steps", "2", "--target", "triton",
               "--check", "--dump-ir", str(ir), "--dump-codegen", str(gen))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "target triton" in res.stdout and "kernels launched per step" in res.stdout
    assert "check passed" in res.stdout
    # the code each rank loaded: Triton kernels, not the torch target's aten calls
    for rank in (0, 1):
        src = (gen / "train" / f"rank{rank}.py").read_text()
        assert "@triton.jit" in src and "target triton" in src and "ENTRY = main" in src
    # the IR after every pass, up to the kernel stage, written by the ranks that ran it
    glob = sorted(p.name for p in (ir / "train" / "global").iterdir())
    assert glob[0] == "00-captured.mlir" and any("planned" in n for n in glob)
    assert glob[-1].endswith("after-lower-redistribution.mlir")
    for rank in (0, 1):
        names = sorted(p.name for p in (ir / "train" / f"rank{rank}").iterdir())
        assert names[0].endswith("after-partition.mlir") and any("after-fuse-kernels" in n for n in names)
        last = (ir / "train" / f"rank{rank}" / names[-1]).read_text()
        assert "kernel.fused" in last and f"spmdc.rank = {rank}" in last


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


MODELS = Path(__file__).parents[2] / "models"


def test_dropout_training_passes_check_under_megatron_and_fsdp():
    """GPT-2 at its defaults (dropout 0.1), 3 steps on 4 ranks: --check compares with eager in
    training mode (same seed, so the same masks); checkpointing every block changes nothing but
    the memory."""
    peaks = {}
    for plan, mesh, extra in (("megatron", "tp=4", ()), ("fsdp", "dp=4", ()),
                              ("fsdp", "dp=4", ("--checkpoint", "blocks"))):
        res = _run(f"{MODELS / 'hf_tiny.py'}:gpt2", "--nproc", "4", "--mesh", mesh, "--plan", plan, "--steps", "3",
                   "--check", "--seed", "7", *extra, timeout=400)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "step 3/3" in res.stdout and "check passed" in res.stdout
        peaks[extra] = res.stdout.split("peak ")[1].split(" KiB")[0]
    assert peaks[()] != peaks[("--checkpoint", "blocks")]


def test_philox_mode_refuses_check_and_runs_without_it():
    res = _run("mlp", "--nproc", "2", "--mesh", "dp=2", "--rng", "philox", "--check", timeout=60)
    assert res.returncode == 1 and "--rng philox" in res.stderr
    res = _run(f"{MODELS / 'hf_tiny.py'}:gpt2", "--nproc", "2", "--mesh", "dp=2", "--plan", "fsdp", "--steps", "2",
               "--rng", "philox")
    assert res.returncode == 0 and "step 2/2" in res.stdout, res.stdout + res.stderr
