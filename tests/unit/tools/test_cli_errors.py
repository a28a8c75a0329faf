"""Every ordinary mistake ends in one clear line: the table of cases from issue 10.

Each case runs a command as a user would and checks the exit code, the message (what
and where) and that no Python traceback is printed. Cases that need no ranks call the
tools' ``main`` in this process; cases with ranks (and Ctrl-C) run ``spmdc`` as a
subprocess. Workload files used by the rank cases are in ``workloads/`` beside this file.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from spmdc.tools import cli, opt

HERE = Path(__file__).parent
EXAMPLES = HERE.parents[2] / "examples"
WORKLOADS = HERE / "workloads"
MLIR_OK = "func.func @f() {\n  func.return\n}\n"


@dataclass
class Case:
    name: str
    tool: str                    # "spmdc" | "spmdc-opt"
    args: list[str]
    code: int
    message: str                 # must appear in stdout+stderr (whitespace-normalized)
    files: dict[str, bytes] = field(default_factory=dict)   # written into the temporary directory first
    env: dict[str, str] = field(default_factory=dict)


def _deep(n: int, open_: str, close: str, prefix: str = "", suffix: str = "") -> bytes:
    return (prefix + open_ * n + close * n + suffix).encode()


CASES = [
    # -- spmdc-opt ---------------------------------------------------------------------------
    Case("opt-missing-file", "spmdc-opt", ["{d}/missing.mlir"], 1,
         "spmdc-opt: error: cannot read '{d}/missing.mlir': No such file or directory"),
    Case("opt-not-utf8", "spmdc-opt", ["{d}/x.mlir"], 1, "{d}/x.mlir:2:9: error: not UTF-8 text (byte 0xff)",
         {"x.mlir": b"func.func @f() {\n  // caf\xff\n  func.return\n}\n"}),
    Case("opt-byte-order-mark", "spmdc-opt", ["{d}/bom.mlir"], 0, "func.func @f()",
         {"bom.mlir": b"\xef\xbb\xbf" + MLIR_OK.encode()}),
    Case("opt-nesting-arrays", "spmdc-opt", ["{d}/deep.mlir"], 1,
         "{d}/deep.mlir:1:131: error: nesting too deep (limit 100",
         {"deep.mlir": _deep(10_000, "[", "]", "func.func @f() attributes {a = ", "} {\n func.return\n}\n")}),
    Case("opt-nesting-regions", "spmdc-opt", ["{d}/deep.mlir"], 1, "error: nesting too deep (limit 100",
         {"deep.mlir": _deep(10_000, "module {", "}")}),
    Case("opt-print-ir-after-unknown-pass", "spmdc-opt", ["{d}/ok.mlir", "--print-ir-after=canonicalise"], 1,
         "spmdc-opt: error: unknown pass 'canonicalise' in --print-ir-after; did you mean 'canonicalize'?",
         {"ok.mlir": MLIR_OK.encode()}),
    Case("opt-huge-mesh", "spmdc-opt", ["{d}/m.mlir", "-p", "partition"], 1,
         "{d}/m.mlir:1:1: error: 'shard.mesh' op has 100000000000000000000000 devices; spmdc supports meshes of "
         "at most 1048576 devices",
         {"m.mlir": b'shard.mesh @m = <["x" = 100000000000000000000000]>\n'
                    b'func.func @f(%a: tensor<8xf32> {shard.sharding = #shard<@m, [S(0)]>}) -> tensor<8xf32> {\n'
                    b'  func.return %a : tensor<8xf32>\n}\n'}),
    Case("opt-redistribute-from-disagrees", "spmdc-opt", ["{d}/r.mlir", "-p", "lower-redistribution,partition"], 1,
         "{d}/r.mlir:3:3: error: 'shard.redistribute' op 'from' #shard<@mesh, [R]> differs from the layout its "
         "operand has, #shard<@mesh, [S(0)]>",
         {"r.mlir": b'shard.mesh @mesh = <["tp" = 4]>\n'
                    b'func.func @f(%x: tensor<8xf32> {shard.sharding = #shard<@mesh, [S(0)]>}) -> tensor<8xf32> {\n'
                    b'  %0 = shard.redistribute %x {from = #shard<@mesh, [R]>, to = #shard<@mesh, [R]>} '
                    b': tensor<8xf32>\n  func.return %0 : tensor<8xf32>\n}\n'}),
    Case("opt-output-dir-missing", "spmdc-opt", ["{d}/ok.mlir", "-o", "{d}/nodir/out.mlir"], 1,
         "spmdc-opt: error: cannot write output '{d}/nodir/out.mlir': directory '{d}/nodir' does not exist",
         {"ok.mlir": MLIR_OK.encode()}),
    Case("opt-version", "spmdc-opt", ["--version"], 0, "spmdc-opt 0.1.0"),
    # -- spmdc show --------------------------------------------------------------------------
    Case("show-missing-file", "spmdc", ["show", "{d}/missing.mlir"], 1,
         "spmdc show: error: cannot read '{d}/missing.mlir': No such file or directory"),
    Case("show-not-utf8", "spmdc", ["show", "{d}/x.mlir"], 1, "{d}/x.mlir:1:3: error: not UTF-8 text (byte 0xfe)",
         {"x.mlir": b"//\xfe\n"}),
    Case("show-invalid-ir", "spmdc", ["show", "{d}/bad.mlir"], 1,
         "{d}/bad.mlir:1:27: error: unknown element type 'f3' in 'tensor<4xf3>' (expected one of f64, f32, f16, "
         "bf16, i64, i32, i16, i8, i1) func.func @f(%x: tensor<4xf3>) -> tensor<4xf32> { ^",
         {"bad.mlir": b"func.func @f(%x: tensor<4xf3>) -> tensor<4xf32> {\n  func.return %x : tensor<4xf32>\n}\n"}),
    Case("version", "spmdc", ["--version"], 0, "spmdc 0.1.0"),
    # -- spmdc capture -----------------------------------------------------------------------
    Case("capture-factory-raises", "spmdc", ["capture", "{d}/w.py:factory"], 1,
         "spmdc capture: error: the factory of workload '{d}/w.py:factory' raised RuntimeError: no data here "
         "(at {d}/w.py:3 in factory)",
         {"w.py": b"def factory():\n    # the user's bug\n    raise RuntimeError('no data here')\n"}),
    Case("capture-input-not-a-tensor", "spmdc", ["capture", "{d}/w.py:factory"], 1,
         "spmdc capture: error: input #0 of workload '{d}/w.py:factory' is a str, not a tensor",
         {"w.py": b"import torch.nn as nn\ndef factory():\n    return nn.Linear(4, 4), ('x',), None\n"}),
    Case("capture-input-wrong-shape", "spmdc", ["capture", "{d}/w.py:factory"], 1,
         "spmdc capture: error: torch.export.export failed: RuntimeError: a and b must have same reduction dim, "
         "but got [2, 3] X [4, 4].",
         {"w.py": b"import torch, torch.nn as nn\ndef factory():\n"
                  b"    return nn.Linear(4, 4), (torch.randn(2, 3),), None\n"}),
    Case("capture-output-dir-missing", "spmdc", ["capture", "mlp", "-o", "{d}/nodir/x.mlir"], 1,
         "spmdc capture: error: cannot write output '{d}/nodir/x.mlir': directory '{d}/nodir' does not exist"),
    Case("capture-unknown-workload", "spmdc", ["capture", "mpl"], 1, "spmdc capture: error: unknown workload 'mpl'"),
    # -- spmdc run: mistakes found before any rank starts ------------------------------------
    Case("run-nproc-zero", "spmdc", ["run", "mlp", "--nproc", "0"], 2,
         "spmdc run: error: argument --nproc: must be positive, got 0"),
    Case("run-nproc-negative", "spmdc", ["run", "mlp", "--nproc", "-2"], 2,
         "spmdc run: error: argument --nproc: must be positive, got -2"),
    Case("run-checkpoint-unknown", "spmdc", ["run", "mlp", "--nproc", "2", "--checkpoint", "layers"], 2,
         "spmdc run: error: argument --checkpoint: expected 'blocks' (recompute every repeated block) or 'blocks/K' "
         "(every K-th: blocks 0, K, 2K, ...), got 'layers'"),
    Case("run-yaml-plan-syntax", "spmdc", ["run", "mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "{d}/p.yaml"], 1,
         "{d}/p.yaml:3:8: error: invalid YAML plan: expected ',' or ']', but got ':'",
         {"p.yaml": b'params:\n  "*.weight": [S(0)\n inputs: []\n'}),
    Case("run-json-plan-syntax", "spmdc", ["run", "mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "{d}/p.json"], 1,
         "{d}/p.json:1:33: error: invalid JSON plan: Expecting value",
         {"p.json": b'{"params": {"*.weight": ["S(0)",]}}'}),
    Case("run-dump-ir-is-a-file", "spmdc", ["run", "mlp", "--nproc", "2", "--mesh", "dp=2", "--dump-ir", "{d}/f"], 1,
         "spmdc run: error: --dump-ir '{d}/f' exists and is not a directory", {"f": b"x"}),
    Case("run-dump-dir-not-empty", "spmdc",
         ["run", "mlp", "--nproc", "2", "--mesh", "dp=2", "--dump-codegen", "{d}/gen"], 1,
         "spmdc run: error: --dump-codegen '{d}/gen' is not empty; spmdc would overwrite what is there",
         {"gen/old.py": b"# mine\n"}),
    Case("run-cache-dir-is-a-file", "spmdc", ["run", "mlp", "--nproc", "2", "--mesh", "dp=2"], 1,
         "spmdc run: error: SPMDC_CACHE_DIR '{d}/f' is not a directory", {"f": b"x"},
         env={"SPMDC_CACHE_DIR": "{d}/f"}),
    Case("run-path-with-brackets", "spmdc", ["run", "{d}/data[/tmp]/x.py:factory"], 1,
         "spmdc run: error: workload file '{d}/data[/tmp]/x.py' does not exist"),
    Case("run-plan-name-with-markup", "spmdc", ["run", "mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "[bold]x"],
         1, "spmdc run: error: unknown plan preset '[bold]x'"),
    # -- pipelines and switching (issue 16) ---------------------------------------------------
    Case("run-pp-schedule-without-stages", "spmdc", ["run", "gpt2-tiny", "--pp-schedule", "gpipe"], 1,
         "spmdc run: error: --pp-schedule is for a pipeline plan (a plan file with 'stages', or --mesh with a 'pp' "
         "axis; see docs/plans.md); plan 'default' has none"),
    Case("run-microbatches-without-stages", "spmdc", ["run", "gpt2-tiny", "--microbatches", "4"], 1,
         "has none (micro-batches of one plan: --grad-accum)"),
    Case("run-pipeline-with-mesh", "spmdc", ["run", "gpt2-tiny", "--plan", "{x}/pp2_tp2.yaml", "--mesh", "tp=4"], 1,
         "spmdc run: error: --mesh tp=4: plan '{x}/pp2_tp2.yaml' has pipeline stages with their own meshes"),
    Case("run-pipeline-microbatches-do-not-divide", "spmdc",
         ["run", "gpt2-tiny", "--plan", "{x}/pp2_tp2.yaml", "--microbatches", "3"], 1,
         "spmdc run: error: 3 micro-batches split every input along dim 0, but input #0 of workload 'gpt2-tiny' has "
         "shape (8, 8)"),
    Case("run-pipeline-unknown-module", "spmdc", ["run", "gpt2-tiny", "--plan", "{d}/pp.yaml"], 1,
         "spmdc run: error: plan '{d}/pp.yaml', stage 1 (stage1): workload 'gpt2-tiny' has no module 'h.2' "
         "(did you mean",
         {"pp.yaml": b"stages:\n  - {modules: [h.0], ranks: [0]}\n  - {modules: [h.2], ranks: [1]}\n"}),
    Case("run-pipeline-grad-accum-does-not-divide", "spmdc",
         ["run", "gpt2-tiny", "--plan", "{x}/pp2_tp2.yaml", "--grad-accum", "4"], 1,
         "spmdc run: error: 4 micro-batches x 4 rounds (--grad-accum) split every input along dim 0, but input #0 "
         "of workload 'gpt2-tiny' has shape (8, 8)"),
    Case("run-pipeline-misspelt-schedule", "spmdc", ["run", "gpt2-tiny", "--plan", "{d}/pp.yaml"], 1,
         "unknown schedule '1f1f' (schedules: gpipe, 1f1b, interleaved1f1b); did you mean '1f1b'?",
         {"pp.yaml": b"schedule: 1f1f\nstages:\n  - {ranks: [0]}\n  - {ranks: [1]}\n"}),
    # -- a --mesh with a pp axis: stages over its coordinates (issue 26) ------------------------------
    Case("run-pp-mesh-with-stages-plan", "spmdc", ["run", "llama-tiny", "--mesh", "pp=2,tp=2", "--plan",
                                                   "{x}/pp2_tp2.yaml"], 1,
         "spmdc run: error: --mesh pp=2,tp=2 has a 'pp' axis, which cuts the job into pipeline stages, but plan "
         "'{x}/pp2_tp2.yaml' has pipeline stages with their own meshes"),
    Case("run-pp-mesh-with-groups-plan", "spmdc", ["run", "llama-tiny", "--mesh", "pp=2,dp=2", "--plan",
                                                   "{x}/hetero_dp.yaml"], 1,
         "but plan '{x}/hetero_dp.yaml' has device groups with their own meshes"),
    Case("run-pp-mesh-nproc", "spmdc", ["run", "llama-tiny", "--mesh", "pp=2,dp=2", "--nproc", "2"], 1,
         "spmdc run: error: mesh pp=2,dp=2 has 4 devices but --nproc is 2"),
    Case("run-pp-mesh-preset-misfits-stage", "spmdc", ["run", "llama-tiny", "--mesh", "pp=2,dp=2", "--plan",
                                                       "megatron"], 1,
         "spmdc run: error: mesh pp=2,dp=2: each pipeline stage runs plan 'megatron' on the other axes, dp=2: "
         "plan preset 'megatron' needs mesh axis 'tp'"),
    Case("run-pp-mesh-axis-unused-in-stages", "spmdc", ["run", "llama-tiny", "--mesh", "pp=2,dp=2,tp=2", "--plan",
                                                        "fsdp", "--batch", "8"], 1,
         "spmdc run: error: each pipeline stage of mesh pp=2,dp=2,tp=2 (on dp=2,tp=2): mesh axis 'tp' (size 2) is "
         "used by no layout of plan 'fsdp'"),
    Case("run-capacity-factor-check", "spmdc", ["run", "tests/models/hf_tiny.py:mixtral", "--mesh", "ep=4", "--plan",
                                                 "ep", "--moe-capacity-factor", "1.25", "--check"], 1,
         "spmdc run: error: --check compares with one device, which drops no token; --moe-capacity-factor drops"),
    Case("run-capacity-factor-negative", "spmdc", ["run", "--moe-capacity-factor", "-1"], 2,
         "--moe-capacity-factor: must be positive, got -1"),
    Case("run-switch-format", "spmdc", ["run", "gpt2-tiny", "--switch", "megatron"], 1,
         "spmdc run: error: --switch 'megatron': expected STEP:PLAN[:MESH], e.g. 2:megatron:tp=4"),
    Case("run-switch-step-out-of-range", "spmdc", ["run", "gpt2-tiny", "--switch", "3:megatron:tp=4"], 1,
         "spmdc run: error: --switch '3:megatron:tp=4': STEP must be after the previous switch and in 1..2"),
    Case("run-switch-adds-ranks", "spmdc", ["run", "gpt2-tiny", "--switch", "1:megatron:tp=8"], 1,
         "spmdc run: error: --switch '1:megatron:tp=8': mesh tp=8 has 8 devices but the job has 4 ranks"),
    Case("run-switch-misspelt-preset", "spmdc", ["run", "gpt2-tiny", "--switch", "1:megatorn:tp=4"], 1,
         "spmdc run: error: --switch '1:megatorn:tp=4': unknown plan preset 'megatorn'"),
    Case("run-switch-from-pipeline-adds-ranks", "spmdc", ["run", "gpt2-tiny", "--plan", "{x}/pp2_tp2.yaml",
                                                          "--switch", "1:fsdp:dp=8"], 1,
         "spmdc run: error: --switch '1:fsdp:dp=8': mesh dp=8 has 8 devices but the job has 4 ranks"),
]


def _fill(text: str, d: Path) -> str:
    return text.replace("{d}", str(d)).replace("{x}", str(EXAMPLES))


def call(tool: str, args: list[str], env: dict[str, str]) -> tuple[int, str]:
    main = opt.main if tool == "spmdc-opt" else cli.main
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as e:   # argparse: --version, usage errors
                code = int(e.code or 0)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mistake_gives_one_clear_line(case, tmp_path, monkeypatch):
    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path / "cache"))
    for rel, data in case.files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    code, text = call(case.tool, [_fill(a, tmp_path) for a in case.args],
                      {k: _fill(v, tmp_path) for k, v in case.env.items()})
    flat = " ".join(text.split())
    assert code == case.code, text
    assert " ".join(_fill(case.message, tmp_path).split()) in flat, text
    assert "Traceback" not in text


# -- cases with ranks: run spmdc as the user does -------------------------------------------------

def _spmdc(*args: str, tmpdir: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _leftovers(tmpdir: Path) -> list[str]:
    """What a launch left in its temporary directory besides the one log file it names (caches that
    torch and lark keep there on purpose, torchinductor_* and .lark_cache_*, are not the launch's)."""
    launch = ("torchelastic_", "pytorch-errorfile-", "spmdc-", "pymp-", "tmp")
    return sorted(p.name for p in tmpdir.iterdir()
                  if p.name.startswith(launch) and not (p.name.startswith("spmdc-") and p.suffix == ".log"))


RANK_CASES = [
    ("unsupported-op", ["{w}/fft_model.py:factory", "--nproc", "2", "--mesh", "dp=2", "--plan", "dp"], 1,
     ["spmdc run: error: rank", "failed: UnsupportedOpError: spmdc cannot capture this model: PyTorch op "
      "'aten.fft_rfft'", "fft_model.py\", line 14, in forward", "every rank's output, tracebacks included: "]),
    ("collective-timeout", ["{w}/hangs_on_rank1.py:factory", "--nproc", "2", "--mesh", "dp=2", "--plan", "dp",
                            "--timeout", "8"], 1,
     ["spmdc run: error: rank 0 failed: RuntimeError: [/", "Timed out waiting 8000ms"]),
    ("model-returns-its-loss", ["{w}/returns_loss.py:factory", "--nproc", "2", "--mesh", "dp=2", "--plan", "fsdp",
                                "--steps", "2", "--check"], 0, ["returns_loss.py:factory", "check passed"]),
    ("partial-parameter-in-plan", ["mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "{w}/partial_plan.yaml"], 1,
     ["failed: PlanError: parameter 'fc1.weight' (plan pattern 'fc1.weight'): storage layout [P(sum)] is Partial, "
      "which is not a layout a parameter can have"]),
    ("too-many-input-layouts", ["mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "{w}/three_inputs_plan.yaml"], 1,
     ["failed: PlanError: the plan lays out 3 inputs but the model takes 2 (x, target)"]),
]


@pytest.mark.parametrize("name,args,code,messages", RANK_CASES, ids=[c[0] for c in RANK_CASES])
def test_mistake_on_ranks_gives_one_clear_line_and_leaves_nothing(name, args, code, messages, tmp_path):
    res = _spmdc(*[a.replace("{w}", str(WORKLOADS)) for a in args], tmpdir=tmp_path)
    text = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == code, res.stdout + res.stderr
    for m in messages:
        assert m in text, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) <= 4, res.stderr   # the message, its frame and the log path
    assert _leftovers(tmp_path) == []                                # no torchelastic_* or error files
    logs = list(tmp_path.glob("spmdc-*.log"))
    if code:   # the log the message names holds the full tracebacks
        assert len(logs) == 1 and str(logs[0]) in text and "Traceback" in logs[0].read_text()
    else:
        assert logs == []
    if name == "unsupported-op":
        assert "fft_model.py:factory:" in res.stdout   # 'factory:' stays text (no emoji)


def test_ctrl_c_ends_every_rank_without_tracebacks(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "spmdc.tools.cli", "run", f"{WORKLOADS}/hangs_on_rank1.py:factory",
                             "--nproc", "2", "--mesh", "dp=2", "--plan", "dp", "--timeout", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    time.sleep(10)   # ranks started, rank 0 waiting for rank 1
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert err.strip() == "spmdc run: interrupted", err
    assert "Traceback" not in out + err
    assert _leftovers(tmp_path) == []
