"""``spmdc run`` checks up front what would otherwise be silently wrong or lost (issue 25).

Each refusal is one line, exit 1, no traceback, before any rank starts (the in-process cases call
``cli.main``, which would have to launch ranks to get further). The cases with ranks run ``spmdc``
as a subprocess: device groups with ``--clip-grad-norm`` against one device, and SIGTERM.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from spmdc.tools import cli
from spmdc.tools.run_cmd import RunConfig, resolve_mesh_and_plan, validate

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"

CASES = [
    # -- mesh strings -----------------------------------------------------------------------------
    ("mesh-empty", ["mlp", "--mesh", ""], "spmdc run: error: --mesh: invalid mesh '': it is empty; expected "
                                          "name=size pairs like dp=2,tp=2"),
    ("mesh-no-name", ["mlp", "--mesh", "=4"], "spmdc run: error: --mesh: invalid mesh '=4': mesh axis name '' "
                                              "is empty"),
    ("mesh-space", ["mlp", "--mesh", "d p=4"], "mesh axis name 'd p' is not an identifier"),
    ("mesh-twice", ["mlp", "--mesh", "dp=2,dp=2"], "invalid mesh 'dp=2,dp=2': mesh axis 'dp' is given twice"),
    ("mesh-zero", ["mlp", "--mesh", "dp=0"], "mesh axis 'dp' has size 0; sizes must be positive integers"),
    ("mesh-negative", ["mlp", "--mesh", "dp=-4"], "mesh axis 'dp' has size -4; sizes must be positive integers"),
    ("mesh-fraction", ["mlp", "--mesh", "dp=1.5"], "mesh axis 'dp' has size '1.5'; sizes must be positive"),
    # -- mesh axes the plan never uses ----------------------------------------------------------------
    ("unused-axis-preset", ["gpt2-tiny", "--mesh", "x=2,dp=2,tp=2", "--plan", "fsdp+tp"],   # (pp: stages)
     "spmdc run: error: mesh axis 'x' (size 2) is used by no layout of plan 'fsdp+tp': 4 of the 8 ranks would "
     "duplicate the others' work; drop the axis, or use a plan that shards over it"),
    ("unused-axis-dp-plan", ["mlp", "--mesh", "dp=2,tp=2", "--plan", "dp"],
     "mesh axis 'tp' (size 2) is used by no layout of plan 'dp': 2 of the 4 ranks would duplicate"),
    ("unused-axis-custom-plan", ["mlp", "--mesh", "dp=2,tp=2", "--plan", "{d}/rows.yaml"],
     "mesh axis 'tp' (size 2) is used by no layout of plan 'rows'",
     {"rows.yaml": "name: rows\nparams:\n  fc1.weight: {storage: {dp: S(0)}}\ninputs: [{dp: S(0)}, {dp: S(0)}]\n"}),
    ("unused-axis-after-switch", ["gpt2-tiny", "--switch", "1:megatron:dp=2,tp=2"],
     "spmdc run: error: --switch '1:megatron:dp=2,tp=2': mesh axis 'dp' (size 2) is used by no layout of plan "
     "'megatron': 2 of the 4 ranks would duplicate"),
    ("switch-empty-mesh", ["gpt2-tiny", "--switch", "1:megatron:"], "--switch '1:megatron:': mesh: invalid mesh '': "
                                                                    "it is empty"),
    # -- plan keys and patterns -----------------------------------------------------------------------
    ("plan-misspelt-key", ["mlp", "--mesh", "dp=2", "--plan", "{d}/p.yaml"],
     "{d}/p.yaml:1:1: error: unknown key 'parmas' in a plan (keys: params, inputs, outputs, reshard_after_forward, "
     "name, checkpoint, buckets, fsdp_shard, preset, mesh); did you mean 'params'?",
     {"p.yaml": "parmas:\n  '*.weight': [S(0)]\n"}),
    ("plan-misspelt-layout-key", ["mlp", "--mesh", "dp=2", "--plan", "{d}/p.yaml"],
     "{d}/p.yaml:3:23: error: unknown key 'compue' in the layout of plan pattern 'fc1.weight' (keys: storage, "
     "compute); did you mean 'compute'?",
     {"p.yaml": "params:\n  fc1.weight:\n    {storage: [S(0)], compue: [R]}\n"}),
    ("plan-misspelt-group-key", ["mlp", "--plan", "{d}/g.yaml"],
     "{d}/g.yaml:2:33: error: unknown key 'shares' in group #0 of a heterogeneous plan",
     {"g.yaml": "groups:\n  - {ranks: [0, 1], mesh: tp=2, shares: 2, plan: megatron}\n"
                "  - {ranks: [2], mesh: tp=1, plan: megatron}\n"}),
    ("plan-misspelt-stage-key", ["gpt2-tiny", "--plan", "{d}/s.yaml"],
     "{d}/s.yaml:3:5: error: unknown key 'modles' in stage #1 of a pipeline plan",
     {"s.yaml": "stages:\n  - {modules: [h.0], ranks: [0]}\n  - modles: [h.1]\n    ranks: [1]\n"}),
    ("plan-pattern-matches-nothing", ["mlp", "--mesh", "dp=2", "--plan", "{d}/p.yaml"],
     "spmdc run: error: plan pattern 'fc3.weight' matches no parameter; near matches: fc2.weight, fc1.weight",
     {"p.yaml": "params:\n  fc3.weight: [S(0)]\n"}),
    # -- features with device groups ---------------------------------------------------------------
    ("groups-forward", ["mlp", "--plan", "{d}/g.yaml", "--forward"],
     "spmdc run: error: --forward (device groups train) is not supported with a heterogeneous plan (device groups) "
     "yet", {"g.yaml": "groups:\n  - {ranks: [0, 1], mesh: tp=2, plan: megatron}\n"
                       "  - {ranks: [2], mesh: tp=1, plan: megatron}\n"}),
    ("groups-switch-without-mesh", ["mlp", "--plan", "{d}/g.yaml", "--switch", "1:fsdp"],
     "spmdc run: error: --switch '1:fsdp': this run's plan has device groups or stages; give the new mesh "
     "(STEP:PLAN:MESH, e.g. 1:fsdp:dp=3)", {"g.yaml": "groups:\n  - {ranks: [0, 1], mesh: tp=2, plan: megatron}\n"
                                     "  - {ranks: [2], mesh: tp=1, plan: megatron}\n"}),
    # -- --save ----------------------------------------------------------------------------------------
    ("save-parent-is-a-file", ["mlp", "--save", "{d}/f/ckpt"], "spmdc run: error: --save '{d}/f/ckpt': cannot "
                                                                 "create it: Not a directory", {"f": "x"}),
]


def _fill(text: str, d: Path) -> str:
    return text.replace("{d}", str(d))


def call(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(["run", *args])
        except SystemExit as e:   # argparse
            code = int(e.code or 0)
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_refused_before_ranks_start_in_one_line(case, tmp_path, monkeypatch):
    name, args, message, files = (*case, {})[:4]
    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path / "cache"))
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    code, text = call([_fill(a, tmp_path) for a in args])
    flat = " ".join(text.split())
    assert code == 1, text
    assert " ".join(_fill(message, tmp_path).split()) in flat, text
    assert "Traceback" not in text and "ranks finished" not in text and len(text.strip().splitlines()) == 1, text


def test_save_into_a_read_only_directory_is_refused_before_ranks_start(tmp_path, monkeypatch):
    """An empty directory this process cannot write into (or whose parent it cannot: the save is
    written beside it, then renamed) is found before the steps run, not after them. Root ignores
    permission bits, so as root the probe's file creation is made to honour them (fail in a
    directory without its write bit, as for any other user or on a read-only mount)."""
    ro = tmp_path / "ro"
    (ro / "ckpt").mkdir(parents=True)
    if os.geteuid() == 0:
        import tempfile

        real = tempfile.mkstemp

        def read_only(*args, **kw):
            if not os.stat(kw["dir"]).st_mode & 0o200:
                raise PermissionError(13, "Permission denied")
            return real(*args, **kw)
        monkeypatch.setattr(tempfile, "mkstemp", read_only)
    ro.chmod(0o555)
    (ro / "ckpt").chmod(0o555)
    try:
        code, text = call(["mlp", "--save", str(ro / "ckpt")])
        (ro / "ckpt").chmod(0o755)
        code2, text2 = call(["mlp", "--save", str(ro / "ckpt")])   # writable itself, in a read-only parent
    finally:
        ro.chmod(0o755)
        (ro / "ckpt").chmod(0o755)
    assert code == 1 and f"spmdc run: error: --save '{ro}/ckpt' is not writable: Permission denied" in text, text
    assert code2 == 1 and f"--save '{ro}/ckpt': its directory '{ro}' is not writable: Permission denied" in text2, \
        text2
    assert len(text.strip().splitlines()) == 1 and "Traceback" not in text + text2, text


@pytest.mark.parametrize("mesh,plan", [("rep=2,dp=2", "hsdp"), ("dp=1,tp=2", "megatron"), ("dp=2,tp=2", "fsdp+tp")])
def test_plans_that_use_every_axis_pass_the_checks(mesh, plan, tmp_path, monkeypatch):
    """hsdp's rep axis is used (the batch is S(0) over it); a size-1 axis needs no use."""
    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path / "cache"))
    cfg = RunConfig("mlp", 0, mesh, plan)
    m, p = resolve_mesh_and_plan(cfg)
    validate(cfg, m, p)
    assert str(m) == mesh and cfg.nproc == m.size


# -- with ranks ---------------------------------------------------------------------------------------

HETERO = "groups:\n  - {ranks: [0, 1], mesh: tp=2, plan: megatron}\n  - {ranks: [2], mesh: tp=1, plan: megatron}\n"


def _spmdc(*args: str, tmpdir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TMPDIR": str(tmpdir)})


def test_device_groups_clip_accumulate_and_switch_as_one_device(tmp_path):
    """Each group holds the whole (cross-group reduced) gradient, so its norm is the global one:
    --check compares losses and parameters with one device's clip_grad_norm_ (rtol 1e-4, atol 1e-5).
    The norm 0.01 is far below the gradients' (about 1): every step is clipped. With --grad-accum 2
    the two micro-batches' gradients cross the groups once per step; after step 2 the run switches
    from the groups to fsdp on all three ranks and goes on as one device would."""
    plan = tmp_path / "hetero.yaml"
    plan.write_text(HETERO)
    res = _spmdc("mlp", "--plan", str(plan), "--clip-grad-norm", "0.01", "--grad-accum", "2", "--switch",
                 "2:fsdp:dp=3", "--steps", "3", "--check", tmpdir=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = " ".join(res.stdout.split())
    assert "check passed" in out and "(rtol 0.0001, atol 1e-05)" in out
    assert "mesh per group" in out and "switched to fsdp on dp=3 after step 2" in out


@pytest.mark.matrix("pipeline", "switch")
def test_pipeline_run_switches_to_fsdp_and_goes_on_as_one_device(tmp_path):
    """A mesh with a pp axis (two stages, fsdp inside each) trains 2 steps, then --switch moves the
    training state (parameters, AdamW's moments) to fsdp on all four ranks for step 3; --check
    compares the losses and parameters with one device (rtol 1e-4, atol 1e-5)."""
    res = _spmdc("llama-tiny", "--mesh", "pp=2,dp=2", "--plan", "fsdp", "--batch", "4", "--optimizer", "adamw",
                 "--lr", "0.01", "--switch", "2:fsdp:dp=4", "--steps", "3", "--check", tmpdir=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = " ".join(res.stdout.split())
    assert "check passed" in out and "(rtol 0.0001, atol 1e-05)" in out
    assert "stages over pp" in out and "switched to fsdp on dp=4 after step 2" in out


def _leftovers(tmpdir: Path) -> list[str]:
    launch = ("torchelastic_", "pytorch-errorfile-", "spmdc-", "pymp-")
    return sorted(p.name for p in tmpdir.iterdir() if p.name.startswith(launch))


@pytest.mark.parametrize("when", ["validating", "launching", "running"])
def test_sigterm_cleans_up_and_says_interrupted(when, tmp_path):
    """SIGTERM while the run checks its options (torch being imported), as soon as the launch has
    made its temporary directory (before ranks exist), or while rank 0 waits for rank 1: exit 143,
    'interrupted', nothing left in TMPDIR."""
    proc = subprocess.Popen([sys.executable, "-m", "spmdc.tools.cli", "run", f"{WORKLOADS}/hangs_on_rank1.py:factory",
                             "--nproc", "2", "--mesh", "dp=2", "--plan", "dp", "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    deadline = time.monotonic() + 120
    if when != "launching":
        time.sleep(1.0 if when == "validating" else 12.0)
    else:
        while not any(p.name.startswith("spmdc-launch-") for p in tmp_path.iterdir()):
            assert time.monotonic() < deadline and proc.poll() is None, "the launch never made its directory"
            time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, out + err
    assert err.strip().endswith("interrupted") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interruption_wrapped_in_another_error_is_still_an_interruption(signum):
    """SIGTERM landing while a class is defined (torch elastic's dataclasses, imported as the launch
    starts) reaches the tool as Python's ``RuntimeError: Error calling __set_name__ ...``, the
    interruption as its cause: exit 143 (Ctrl-C: 130) and "interrupted", not an internal error."""
    import io

    from spmdc.runtime.launcher import Terminated
    from spmdc.tools.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, guard

    def body() -> int:
        class Hook:
            def __set_name__(self, owner, name):
                raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

        class Owner:   # noqa: F841  (defining it runs the hook)
            field = Hook()
        return 0

    err = io.StringIO()
    assert guard("spmdc run", body, err=err) == (EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED)
    assert err.getvalue() == "spmdc run: interrupted\n"
    err = io.StringIO()   # an error with no interruption behind it stays an internal error
    assert guard("spmdc run", lambda: int("x"), err=err) == 2 and "internal error: ValueError" in err.getvalue()


class _SignalledWhileFinalized:
    """An object whose finalizer takes a signal: its handler raises inside ``__del__``, where Python
    prints "Exception ignored" and goes on (what a SIGTERM landing in importlib's module-lock
    callback while torch is imported did: the run went on to its end)."""

    def __init__(self, signum: int):
        self.signum = signum

    def __del__(self):
        signal.raise_signal(self.signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interruption_raised_in_a_finalizer_is_not_lost(signum, capsys):
    """SIGTERM or Ctrl-C while a finalizer runs still ends the tool: the interruption Python could
    not raise there is delivered again to the main thread's next bytecode, nothing printed."""
    from spmdc.runtime.launcher import Terminated
    from spmdc.tools.errors import sigterm_interrupts

    hook, handler = sys.unraisablehook, signal.getsignal(signal.SIGTERM)
    ctrl_c = signal.signal(signal.SIGINT, signal.default_int_handler)   # (Python's, as the tool starts with)
    undo = sigterm_interrupts()
    try:
        with pytest.raises(Terminated if signum == signal.SIGTERM else KeyboardInterrupt) as got:
            obj = _SignalledWhileFinalized(signum)
            del obj   # (the handler raises in __del__: ignored there)
            end = time.monotonic() + 5
            while time.monotonic() < end:
                pass
        assert signum == signal.SIGTERM or not isinstance(got.value, Terminated)
    finally:
        undo()
        signal.signal(signal.SIGINT, ctrl_c)
    assert "Exception ignored" not in capsys.readouterr().err
    assert sys.unraisablehook is hook and signal.getsignal(signal.SIGTERM) is handler   # (undone)


def test_torch_elastics_signal_exception_in_a_finalizer_is_delivered_again():
    """While ranks run, torch elastic's handler turns SIGINT into its SignalException (the launch
    makes it Ctrl-C's KeyboardInterrupt): raised in a finalizer, it is delivered again too."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from spmdc.tools.errors import sigterm_interrupts

    def elastic(signum, frame):
        raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))

    ctrl_c = signal.signal(signal.SIGINT, elastic)
    undo = sigterm_interrupts()
    try:
        with pytest.raises(SignalException):
            obj = _SignalledWhileFinalized(signal.SIGINT)
            del obj
            end = time.monotonic() + 5
            while time.monotonic() < end:
                pass
    finally:
        undo()
        signal.signal(signal.SIGINT, ctrl_c)
