"""``spmdc run --eager --switch``: an eager run switched to another one-mesh plan stays eager and
goes on as one device (``--check``: losses and parameters, rtol 1e-4 / atol 1e-5); a switch of an
eager run to pipeline stages or device groups is refused before ranks start, naming why."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest

from spmdc.tools import cli

GROUPS = "groups:\n  - {ranks: [0], mesh: dp=1, plan: fsdp}\n  - {ranks: [1], mesh: dp=1, plan: fsdp}\n"


@pytest.mark.matrix("eager", "switch")
def test_eager_run_switches_plan_and_matches_one_device(tmp_path):
    trace = tmp_path / "trace.txt"
    res = subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", "mlp", "--mesh", "dp=2", "--plan", "fsdp",
                          "--eager", "--eager-trace", str(trace), "--switch", "2:megatron:tp=2", "--steps", "3",
                          "--check"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert res.returncode == 0, res.stdout + res.stderr
    out = " ".join(res.stdout.split())
    assert "eager (op by op)" in out and "switched to megatron on tp=2 after step 2" in out
    assert "check passed" in out and "(rtol 0.0001, atol 1e-05)" in out
    lines = trace.read_text().splitlines()   # the last step ran op by op, under the new plan (megatron: fc1 S(1))
    assert lines and "tensor.matmul at loc(\"fc1/aten.mm\"): ([R], [S(1)]) -> ([S(1)])" in lines


def test_eager_switch_to_device_groups_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path / "cache"))
    plan = tmp_path / "g.yaml"
    plan.write_text(GROUPS)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(["run", "mlp", "--mesh", "dp=2", "--eager", "--switch", f"1:{plan}", "--steps", "2"])
        except SystemExit as e:
            code = int(e.code or 0)
    text = out.getvalue() + err.getvalue()
    assert code != 0
    assert (f"--switch '1:{plan}': --eager runs one mesh's global program op by op; pipeline stages and device "
            "groups have no eager mode: switch to a one-mesh plan") in " ".join(text.split())
    assert "Traceback" not in text
