"""On-disk cache of generated source: content-addressed, written atomically, safe for
concurrent ranks; ``dump_codegen`` writes one file per program."""

from __future__ import annotations

import multiprocessing as mp
import sys
from pathlib import Path

import torch

from spmdc.codegen.cache import cache_dir, cached_source, dump_codegen, load_program, write_atomic
from spmdc.ir import parse_module

PROGRAM = """
  shard.mesh @mesh = <["tp" = 2]>
  func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {{spmdc.param = "fc.weight"}}) -> tensor<4x8xf32> {{
    %0 = tensor.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %1 = tensor.{act} %0 : tensor<4x8xf32>
    func.return %1 : tensor<4x8xf32>
  }}
  func.func @"second.program"(%x: tensor<4xf32>) -> tensor<4xf32> attributes {{spmdc.rank = 1}} {{
    %0 = comm.all_reduce %x {{axes = ["tp"], mesh = @mesh, op = "sum"}} : tensor<4xf32>
    func.return %0 : tensor<4xf32>
  }}
"""


def program(act: str = "relu"):
    return parse_module(PROGRAM.format(act=act))


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    assert cache_dir() == tmp_path / "cache" / "codegen"
    monkeypatch.delenv("SPMDC_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "spmdc" / "codegen"


def test_same_ir_same_file_written_once():
    fn, path = load_program(program())
    stat = path.stat()
    fn2, path2 = load_program(program())          # a fresh parse of the same text
    assert path2 == path and path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_ino == stat.st_ino
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    torch.testing.assert_close(fn([x, w], None)[0], torch.relu(x @ w), rtol=0, atol=0)
    assert path.read_text().startswith("# spmdc-codegen-key: ")


def test_changed_ir_or_entry_gives_a_new_file():
    _, a = load_program(program("relu"))
    _, b = load_program(program("tanh"))
    _, c = load_program(program("relu"), "second.program")
    assert len({a, b, c}) == 3 and all(p.exists() for p in (a, b, c))
    assert "torch.tanh" in b.read_text() and "torch.relu" in a.read_text()


def test_a_truncated_cache_file_is_regenerated():
    _, path = load_program(program())
    full = path.read_text()
    path.write_text(full[: len(full) // 2])
    fn, path2 = load_program(program())
    assert path2 == path and path.read_text() == full


def test_tracebacks_point_into_the_cached_file():
    fn, path = load_program(program())
    try:
        fn([torch.randn(4, 8), torch.randn(7, 7)], None)
    except RuntimeError as e:
        frames = [f.filename for f in __import__("traceback").extract_tb(e.__traceback__)]
        assert str(path) in frames
    else:  # pragma: no cover
        raise AssertionError("shape mismatch not raised")


def _write_many(path: str, text: str, n: int) -> None:
    for _ in range(n):
        write_atomic(Path(path), text)


def _read_many(path: str, texts: list[str], n: int, out) -> None:
    bad = 0
    for _ in range(n):
        try:
            t = Path(path).read_text()
        except FileNotFoundError:
            continue
        bad += t not in texts
    out.put(bad)


def _emit_in_child(text: str, q) -> None:
    q.put(str(cached_source(parse_module(text))))


def test_concurrent_writers_never_leave_a_partial_file(tmp_path):
    ctx = mp.get_context("fork")
    path = str(tmp_path / "cache" / "codegen" / "x.py")
    texts = [f"# writer {i}\n" + ("y = 1\n" * 200_000) for i in range(3)]   # ~1.2 MB each
    q = ctx.Queue()
    procs = [ctx.Process(target=_write_many, args=(path, t, 8)) for t in texts]
    procs += [ctx.Process(target=_read_many, args=(path, texts, 200, q)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert q.get() == 0 and q.get() == 0
    assert Path(path).read_text() in texts
    assert [p.name for p in Path(path).parent.iterdir()] == ["x.py"]   # no temp files left


def test_ranks_emitting_the_same_program_at_once_agree():
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    text = PROGRAM.format(act="relu")
    procs = [ctx.Process(target=_emit_in_child, args=(text, q)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    paths = {q.get() for _ in procs}
    assert len(paths) == 1
    fn, path = load_program(parse_module(text))
    assert {str(path)} == paths
    kept = f"{path.stem}.{sys.implementation.cache_tag}.code"   # (its compiled form: compiled_code)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, kept])   # no temporary files


def test_dump_codegen_writes_one_file_per_program(tmp_path):
    files = dump_codegen(program(), tmp_path / "dump")
    assert sorted(p.name for p in files) == ["main.py", "second_program_rank1.py"]
    for p in files:
        compile(p.read_text(), str(p), "exec")
    assert "comm.all_reduce(x, ['tp'], 'sum')" in (tmp_path / "dump" / "second_program_rank1.py").read_text()


def test_a_cache_file_deleted_meanwhile_costs_a_re_emission_not_a_failure(tmp_path, monkeypatch):
    """Another process cleaning the cache right after this one wrote: the program still loads."""
    import spmdc.codegen.cache as cache

    monkeypatch.setenv("SPMDC_CACHE_DIR", str(tmp_path))
    real_write = cache.write_atomic

    def write_then_lose(path, text):
        real_write(path, text)
        path.unlink()

    monkeypatch.setattr(cache, "write_atomic", write_then_lose)
    fn, path, source = cache.load_source(program(), "main")
    assert not path.exists() and "def main(args, comm)" in source
    assert callable(fn)


def test_generated_files_are_readable_by_others(tmp_path):
    import stat

    files = dump_codegen(program(), tmp_path / "dump")
    mode = stat.S_IMODE(files[0].stat().st_mode)
    assert mode & stat.S_IRGRP and mode & stat.S_IROTH, oct(mode)
