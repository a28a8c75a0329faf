"""``spmdc run --save/--load``: a damaged checkpoint is one line (exit 1, no traceback), and a
save killed while it replaces the checkpoint it resumed from leaves that checkpoint to resume.

Damage found before ranks start (a file missing or cut short, an unreadable ``.metadata``) is
checked by calling ``spmdc``'s ``main`` in this process; damage only a read finds (garbage of
the right length) and the killed save run ``spmdc run`` as a subprocess, as a user would.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from spmdc.tools import cli

RUN = ("mlp", "--nproc", "2", "--mesh", "dp=2", "--plan", "fsdp", "--optimizer", "adamw", "--lr", "0.01")


def _spmdc(*args: str, env: dict[str, str] | None = None, tmpdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spmdc.tools.cli", "run", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TMPDIR": str(tmpdir), **(env or {})})


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A checkpoint of step 2 of mlp (fsdp on 2 ranks)."""
    root = tmp_path_factory.mktemp("cli_ckpt")
    res = _spmdc(*RUN, "--steps", "2", "--save", str(root / "ck"), tmpdir=root)
    assert res.returncode == 0, res.stdout + res.stderr
    return root / "ck"


def _main(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(args)
    return code, out.getvalue() + err.getvalue()


def _zero_entry(ck: Path, fqn: str) -> str:
    """Overwrite the bytes of checkpoint entry ``fqn`` with zeros (the file keeps its length); its file's name."""
    from torch.distributed.checkpoint import FileSystemReader

    md = FileSystemReader(str(ck)).read_metadata()
    info = next(i for k, i in md.storage_data.items() if k.fqn == fqn)
    with open(ck / info.relative_path, "r+b") as f:
        f.seek(info.offset)
        f.write(b"\0" * info.length)
    return info.relative_path


DAMAGE = [
    ("empty-shard", lambda d: open(d / "__1_0.distcp", "w").close(),
     "spmdc run: error: checkpoint {d}/__1_0.distcp is damaged (truncated: 0 of at least"),
    ("cut-shard", lambda d: os.truncate(d / "__0_0.distcp", os.path.getsize(d / "__0_0.distcp") - 1),
     "spmdc run: error: checkpoint {d}/__0_0.distcp is damaged (truncated: "),
    ("missing-shard", lambda d: (d / "__0_0.distcp").unlink(),
     "spmdc run: error: checkpoint {d}/__0_0.distcp is missing (.metadata names it)"),
    ("empty-metadata", lambda d: open(d / ".metadata", "w").close(),
     "spmdc run: error: checkpoint {d}/.metadata is damaged (EOFError: Ran out of input)"),
]


@pytest.mark.parametrize("name,damage,message", DAMAGE, ids=[c[0] for c in DAMAGE])
def test_damaged_checkpoint_is_one_line_before_ranks_start(saved, tmp_path, name, damage, message):
    ck = tmp_path / "ck"
    shutil.copytree(saved, ck)
    damage(ck)
    code, text = _main(["run", *RUN, "--steps", "1", "--load", str(ck)])
    assert code == 1, text
    assert text.strip().startswith(message.replace("{d}", str(ck))), text
    assert len(text.strip().splitlines()) == 1 and "Traceback" not in text and "rank" not in text


def test_damage_only_a_read_finds_is_one_error_from_the_ranks(saved, tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(saved, ck)
    name = _zero_entry(ck, "model.fc1.weight")
    res = _spmdc(*RUN, "--steps", "1", "--load", str(ck), tmpdir=tmp_path)
    text = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"failed: CheckpointError: checkpoint {ck}/{name} is damaged (model.fc1.weight: " in text
    assert "Traceback" not in res.stdout + res.stderr and "without reporting a Python error" not in text
    assert len(res.stderr.strip().splitlines()) <= 3, res.stderr   # the message, the log path


def test_save_killed_while_replacing_the_checkpoint_leaves_it_to_resume(saved, tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(saved, ck)
    # resume into the same directory; the save is killed after moving the old checkpoint aside
    res = _spmdc(*RUN, "--steps", "2", "--load", str(ck), "--save", str(ck), env={"SPMDC_TEST_SAVE_STOP": "aside"},
                 tmpdir=tmp_path)
    assert res.returncode == 1 and "exit code 75" in res.stderr, res.stdout + res.stderr
    assert not ck.exists() and (tmp_path / ".ck.replaced" / ".metadata").is_file()
    # the previous checkpoint (step 2) resumes: steps 3-4 as one device gives them; the save tidies up
    res = _spmdc(*RUN, "--steps", "2", "--load", str(ck), "--save", str(ck), "--check", tmpdir=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "step 3/4" in res.stdout and "step 4/4" in res.stdout and "check passed" in res.stdout
    # the checkpoint, nothing of the save beside it (.ck.replaced, .ck.<...>)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name == "ck" or p.name.startswith(".ck")) == ["ck"]
    assert f"checkpoint of step 4 written to {ck}/" in res.stdout


def test_force_replaces_only_a_checkpoint(tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, text = _main(["run", *RUN, "--steps", "1", "--save", str(other), "--force"])
    assert code == 1 and text.strip() == (
        f"spmdc run: error: --save: cannot save checkpoint '{other}': the directory holds 1 file(s) a checkpoint "
        "does not (notes.txt); spmdc replaces only checkpoints: give a new or empty directory"), text
    assert (other / "notes.txt").read_text() == "mine"
