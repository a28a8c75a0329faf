"""Generated source on disk, keyed by content hash; loading it as a callable.

    fn, path = load_program(module, "main")     # emits once per distinct IR, then reuses the file
    outs = fn(args, comm)
    dump_codegen(module, "out/")               # what ``--dump-codegen DIR`` writes

The key is sha256 of the emitter version, the target (``torch`` or ``triton``), the entry
function and the printed IR. Files
live under ``$SPMDC_CACHE_DIR`` (default ``~/.cache/spmdc``) in ``codegen/`` and are
written to a temporary file in the same directory, then ``os.replace``d into place, so
ranks compiling the same program at once never see a partial file.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any

from spmdc.codegen.names import py_name
from spmdc.codegen.python_emitter import EMITTER_VERSION, bind_tables, emit_python
from spmdc.dialects.attrs import RANK_ATTR
from spmdc.ir.core import Operation

_END = "# end of generated module\n"


def cache_dir() -> Path:
    """``$SPMDC_CACHE_DIR/codegen`` (default ``~/.cache/spmdc/codegen``); an error names the
    variable when it points at something that is not a directory."""
    env = os.environ.get("SPMDC_CACHE_DIR")
    root = Path(env or os.path.join(os.path.expanduser("~"), ".cache", "spmdc"))
    for p in (root, root / "codegen"):
        if p.exists() and not p.is_dir():
            what = f"SPMDC_CACHE_DIR '{env}'" if env else f"the code cache '{root}'"
            raise NotADirectoryError(f"{what} is not a directory ('{p}' is a file); point SPMDC_CACHE_DIR "
                                     "at a directory spmdc may write generated code into")
    return root / "codegen"


def program_key(module: Operation, func_name: str = "main", target: str = "torch") -> str:
    from spmdc.ir.printer import print_module

    h = hashlib.sha256()
    for part in (EMITTER_VERSION, target, func_name, print_module(module)):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes it private; generated code is not secret
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def cached_text(module: Operation, func_name: str = "main", target: str = "torch") -> tuple[Path, str]:
    """``(path, source)`` of the generated code for ``@func_name``, emitting it if not cached.

    The source returned is the one in memory: a cache file deleted or replaced meanwhile
    (another process cleaning the cache) costs a re-emission, never a failure."""
    key = program_key(module, func_name, target)
    path = cache_dir() / f"spmdc_{key[:40]}.py"
    header = f"# spmdc-codegen-key: {key}\n"
    try:
        text = path.read_text(encoding="utf-8")
        if text.startswith(header) and text.endswith(_END):
            return path, text
    except (OSError, UnicodeDecodeError):
        pass
    text = header + emit_python(module, func_name, target)
    write_atomic(path, text)
    return path, text


def cached_source(module: Operation, func_name: str = "main", target: str = "torch") -> Path:
    """The path of the generated source for ``@func_name``, emitting it if not cached yet."""
    return cached_text(module, func_name, target)[0]


def load_source(module: Operation, func_name: str = "main",
                target: str = "torch") -> tuple[Callable[[list[Any], Any], list[Any]], Path, str]:
    """``(fn, source_path, source)``: ``fn(args, comm)`` runs ``@func_name``; ``source`` is the
    very text that was executed.

    With ``target="triton"`` and no GPU, ``TRITON_INTERPRET=1`` is set first (kernels run
    under the Triton interpreter)."""
    if target == "triton":
        prepare_triton()
    path, source = cached_text(module, func_name, target)
    namespace: dict[str, Any] = {"__name__": f"spmdc_generated_{path.stem}", "__file__": str(path)}
    exec(compiled_code(path, source), namespace)
    bind_tables(namespace, module)
    return namespace["ENTRY"], path, source


def compiled_code(path: Path, source: str) -> CodeType:
    """``compile(source, str(path), "exec")``, kept beside ``path`` as Python keeps a ``.pyc``: a
    marshal of the code object under ``<stem>.<cache tag>.code``, headed by this Python's bytecode
    magic number and a SHA-256 of ``source`` (another source or Python compiles again). Compiling
    gpt2-tiny's training step takes 12 ms; loading it, under 1 ms."""
    import importlib.util
    import marshal

    header = importlib.util.MAGIC_NUMBER + hashlib.sha256(source.encode("utf-8")).digest()
    kept = path.with_name(f"{path.stem}.{sys.implementation.cache_tag}.code")
    try:
        data = kept.read_bytes()
        if data.startswith(header):
            code = marshal.loads(data[len(header):])
            if isinstance(code, CodeType) and code.co_filename == str(path):
                return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile(source, str(path), "exec")
    try:
        _write_bytes_atomic(kept, header + marshal.dumps(code))
    except OSError:
        pass   # (a read-only cache still runs: it compiles every time)
    return code


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".code")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_program(module: Operation, func_name: str = "main",
                 target: str = "torch") -> tuple[Callable[[list[Any], Any], list[Any]], Path]:
    """``(fn, source_path)``: :func:`load_source` without the text."""
    fn, path, _ = load_source(module, func_name, target)
    return fn, path


def prepare_triton() -> None:
    """Without a CUDA device, make Triton interpret kernels (must precede their definition)."""
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def dump_codegen(module: Operation, directory: str | os.PathLike[str], target: str = "torch") -> list[Path]:
    """Write one ``.py`` per top-level function of ``module`` into ``directory``."""
    from spmdc.codegen.names import Namer
    from spmdc.dialects.func import FuncOp

    out, stems = [], Namer(prefix="f")
    for op in module.body.ops:
        if isinstance(op, FuncOp):
            rank = op.attr_value(RANK_ATTR)
            stem = py_name(op.sym_name, "f") + (f"_rank{int(rank)}" if rank is not None else "")  # type: ignore[arg-type]
            path = Path(directory) / f"{stems.fresh(stem)}.py"
            write_atomic(path, emit_python(module, op.sym_name, target))
            out.append(path)
    return out
