"""The compile cache: a job's global program and each rank's program on disk, so that a second run
skips capture, the global passes and the per-rank passes (a warm start).

    step = cached_compile(lambda: compile_global(model, mesh=mesh, plan=plan, **job),
                          model, job, mesh=mesh, plan=plan)      # loaded on a hit, else compiled and stored
    job_key(model, job, mesh=mesh, plan=plan)                    # Key(digest=None, reason=...) when uncacheable
    cached_rank_stages(c, compile_program)                       # compile_rank's stages 06-08, or their IR
    stats.hits, stats.misses, stats.uncacheable, stats.rank_hits # this process's counts

The key (:func:`job_key`) is a SHA-256 (:mod:`spmdc.compiler.fingerprint`) of everything the global
program depends on: the model's structure and code (every module's class, its source and methods,
the globals they name, parameter and buffer names / shapes / dtypes / requires_grad, every
module's ``training`` flag and other attributes), the example inputs' shapes, dtypes and
requires_grad (positional, loss and keyword, by position and name), the mesh, the plan, every
:class:`~spmdc.compiler.options.CompileOptions` field, ``train`` / ``partial_grads``, the loss
function (its code and closure; a class instance by its class and fields), the default dtype and
grad mode, the versions of Python, torch, torch-mlir and triton, spmdc's version and a hash of
spmdc's own source files (editing spmdc invalidates every entry). What cannot be hashed reliably
(a lambda closing over tensors, an object with no fields) makes the job uncacheable: it compiles
as without the cache, never a wrong hit.

A rank's program (after partition and the per-rank passes, before code generation) is keyed by
:func:`rank_key`: the global program's text, its options, mesh, the rank's index, the target, the
versions and spmdc's sources; it is stored as IR text only when that text reads back as the same
text, beside its flat form (:mod:`spmdc.ir.serialize`: kept only when it loads back printing that
text). A hit loads the flat form (milliseconds; parsing the text takes 0.1-0.2 s), else parses the
text; the generated code then comes from the codegen cache.

Entries live in ``$SPMDC_CACHE_DIR/steps/`` (default ``~/.cache/spmdc/steps``, beside the generated
code's ``codegen/``): one pickle per key holding the CompiledStep (or a device-group job's list of
them) without tensors, or a rank's IR text, and the warnings its compile gave (a hit gives them
again). They are written to a temporary file, fsynced and ``os.replace``d into place. An unreadable entry warns once
(:class:`CompileCacheWarning`) and is compiled again and overwritten (a rank's entry whose flat
form does not load warns and parses its text; one whose text does not parse is compiled again). The cache is off with
``compile_cache=False`` (``--no-compile-cache``) and when a dump of the global stages is asked for
(``Dump.ir_dir``; for a rank's program: a dump of its IR) or ``SPMDC_TRACE_PROPAGATION`` is set:
those want the compile to run. The
directory is trusted as the codegen cache's is (entries are unpickled; generated code is run).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from spmdc.compiler.fingerprint import Fingerprint, Uncacheable, distribution_id

FORMAT = 1
T = TypeVar("T")
_INPUTS = ("inputs", "loss_inputs", "kwargs")


class CompileCacheWarning(UserWarning):
    """A compile cache entry could not be read or written (the job compiles as without the cache)."""


@dataclass
class CacheStats:
    """What the compile cache did in this process (tests and ``bench/warm_start.py`` read it)."""

    hits: int = 0
    misses: int = 0          # looked up, not there (or unreadable): compiled and stored
    stores: int = 0
    uncacheable: int = 0     # no reliable key: compiled without the cache (``last_reason`` says why)
    bypassed: int = 0        # the cache is off for this job (option, IR dump, propagation trace)
    corrupt: int = 0
    rank_hits: int = 0       # per-rank programs (partition and the per-rank passes) loaded
    rank_misses: int = 0
    rank_stores: int = 0
    rank_parsed: int = 0     # rank programs (module or unfused) read from their text, not their flat form
    last_reason: str = ""
    last_key: str = ""

    def reset(self) -> None:
        self.__init__()   # type: ignore[misc]


stats = CacheStats()
_warned: set[str] = set()


@dataclass(frozen=True)
class Key:
    """A job's cache key: ``digest`` (hex SHA-256), or None and the ``reason`` it has none."""

    digest: str | None
    reason: str = ""


def steps_dir() -> Path:
    """``$SPMDC_CACHE_DIR/steps`` (default ``~/.cache/spmdc/steps``); the cache root is checked as the
    codegen cache checks it (an error names SPMDC_CACHE_DIR when it is not a directory)."""
    from spmdc.codegen.cache import cache_dir

    d = cache_dir().parent / "steps"
    if d.exists() and not d.is_dir():
        raise NotADirectoryError(f"the compile cache '{d}' is not a directory; remove it or point SPMDC_CACHE_DIR "
                                 "at a directory spmdc may write into")
    return d


@functools.lru_cache(maxsize=1)
def spmdc_fingerprint() -> str:
    """spmdc's version and a SHA-256 of every file of its package (sources, grammar): editing spmdc
    invalidates every entry. Computed once per process."""
    import spmdc

    root = Path(__file__).resolve().parents[1]   # the spmdc package
    h = hashlib.sha256(spmdc.__version__.encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and p.suffix not in (".pyc", ".pyo")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return f"{spmdc.__version__} {h.hexdigest()}"


@functools.lru_cache(maxsize=1)
def library_versions() -> tuple[tuple[str, str], ...]:
    """Python's version; torch's, torch-mlir's and triton's versions and installed files' hashes
    (:func:`~spmdc.compiler.fingerprint.distribution_id`; ``-`` where not installed)."""
    import sys
    from importlib import metadata

    out = [("python", sys.version)]
    for dist in ("torch", "torch-mlir", "triton"):
        try:
            out.append((dist, distribution_id(dist)))
        except metadata.PackageNotFoundError:
            out.append((dist, "-"))
    return tuple(out)


def job_key(model: Any, job: Mapping[str, Any], *, mesh: Any, plan: Any, kind: str = "global") -> Key:
    """The key of one compile job (``job``: :func:`~spmdc.compiler.driver.compile_global`'s keyword
    arguments less mesh and plan; ``dump`` is left out). ``kind`` names what is stored (a one-mesh
    step, a device-group job's steps)."""
    import torch

    fp = Fingerprint()
    try:
        fp.add("format", FORMAT).add("kind", kind).add("versions", library_versions())
        fp.add("spmdc", spmdc_fingerprint())
        fp.add("torch-state", (str(torch.get_default_dtype()), torch.is_grad_enabled()))
        fp.add("mesh", mesh).add("plan", plan).add("model", model)
        for name in sorted(job):
            if name == "dump":
                continue
            if name in _INPUTS:
                fp.add_inputs(name, job[name] if job[name] is not None else ())
            else:
                fp.add(name, job[name])
    except Uncacheable as e:
        return Key(None, str(e))
    except RecursionError:
        return Key(None, "the model's objects nest too deeply to hash")
    return Key(fp.hexdigest())


def enabled(job: Mapping[str, Any]) -> bool:
    from spmdc.compiler.options import CompileOptions

    opts = job.get("options")
    return bool(job.get("compile_cache", (opts if opts is not None else CompileOptions()).compile_cache))


def bypass_reason(job: Mapping[str, Any]) -> str | None:
    """Why this job compiles without looking at the cache, or None."""
    if not enabled(job):
        return "compile_cache=False"
    dump = job.get("dump")
    if dump is not None and getattr(dump, "ir_dir", None) is not None:
        return "the global stages' IR is to be dumped (Dump.ir_dir)"
    if os.environ.get("SPMDC_TRACE_PROPAGATION"):
        return "SPMDC_TRACE_PROPAGATION asks for sharding propagation's trace"
    return None


def cached_compile(compile_fn: Callable[[], T], model: Any, job: Mapping[str, Any], *, mesh: Any, plan: Any,
                   kind: str = "global") -> T:
    """``compile_fn()``'s result for this job: loaded from the cache on a hit (its compile's warnings
    given again, ``timings["compile_cache"]``: seconds to load), else compiled and stored. The result
    must hold no tensors (the ranks take the values from their own model)."""
    why = bypass_reason(job)
    if why is not None:
        stats.bypassed += 1
        stats.last_reason = why
        return compile_fn()
    key = job_key(model, job, mesh=mesh, plan=plan, kind=kind)
    if key.digest is None:
        stats.uncacheable += 1
        stats.last_reason = key.reason
        return compile_fn()
    stats.last_key = key.digest
    start = time.perf_counter()
    value, hit, stored = _through(key.digest, compile_fn)
    stats.stores += stored
    if hit:
        stats.hits += 1
        for s in value if isinstance(value, list) else [value]:
            if isinstance(getattr(s, "timings", None), dict):
                s.timings["compile_cache"] = time.perf_counter() - start
    else:
        stats.misses += 1
    return value


def rank_key(step: Any, at: int, target: str) -> str:
    """The key of one rank's program (stages 06-08): the global program's text, its options, the
    mesh, the rank's index on it, the codegen target, the versions and spmdc's sources."""
    fp = Fingerprint()
    fp.add("format", FORMAT).add("kind", "rank").add("versions", library_versions())
    fp.add("spmdc", spmdc_fingerprint())
    fp.add("global_ir", step.global_ir).add("options", step.options).add("mesh", step.mesh)
    fp.add("rank", at).add("target", target)
    return fp.hexdigest()


def cached_rank_stages(c: Any, run: Callable[[Any], Any]) -> None:
    """Stages 06-08 of the Compilation ``c`` (``c.last`` at most ``pipeline-schedule``): ``run(c)``,
    or this rank's program from the cache (the per-rank passes skipped): its flat form
    (:mod:`spmdc.ir.serialize`, milliseconds), else its IR text parsed. Stored only when its text
    reads back to the same text (and the flat form only when it loads back printing that text); off
    with the option or an IR dump. An entry whose flat form or text does not load warns
    (:class:`CompileCacheWarning`): its text is parsed, or the rank's program compiled again."""
    step = c.step
    c.target = c.target or step.options.resolved_target()
    if not step.options.compile_cache or (c.dump is not None and c.dump.ir_dir is not None):
        run(c)
        return
    digest = rank_key(step, c.at, c.target)

    def compile_rank_ir() -> dict[str, Any]:
        run(c)
        return rank_entry(c)

    entry, hit, stored = _through(digest, compile_rank_ir, keep=lambda v: v.get("store", True))
    stats.rank_stores += stored
    if not hit:
        stats.rank_misses += 1
        return
    path = steps_dir() / f"{digest}.pkl"
    try:
        module, unfused = entry_modules(entry, c.at, path)
    except Exception as e:   # noqa: BLE001 - any damage: this rank's program is compiled again
        _warn_once(path, f"the compile cache entry '{path}' holds a rank's program that does not read back "
                         f"({type(e).__name__}: {e}); compiling it again")
        stats.corrupt += 1
        stats.rank_misses += 1
        stats.rank_stores += _compute(path, digest, compile_rank_ir, keep=lambda v: v.get("store", True))[1]
        return
    stats.rank_hits += 1
    c.module, c.unfused = module, unfused


def rank_entry(c: Any) -> dict[str, Any]:
    """Rank program ``c.module`` (and ``c.unfused``) as IR text and flat form (:mod:`spmdc.ir.serialize`):
    what the cache stores and a role's compiling rank sends (``{"store": False}`` when the text
    would not read back as the same text)."""
    from spmdc.ir.parser import parse_module
    from spmdc.ir.printer import print_module
    from spmdc.ir.serialize import checked_dump

    texts = {"module": print_module(c.module, debuginfo=True),
             "unfused": print_module(c.unfused, debuginfo=True) if c.unfused is not None else None}
    for text in texts.values():   # (nothing kept that would not read back as it was)
        if text is not None and print_module(parse_module(text, "<rank>"), debuginfo=True) != text:
            return {"store": False}
    flat = {"module": checked_dump(c.module, texts["module"]),
            "unfused": checked_dump(c.unfused, texts["unfused"]) if c.unfused is not None else None}
    return {**texts, "flat": flat}


def entry_modules(entry: dict[str, Any], at: int, where: Any) -> tuple[Any, Any]:
    """``(module, unfused)`` of a :func:`rank_entry` (``where`` names it in warnings)."""
    module = _rank_ir(entry, "module", at, where)
    unfused = _rank_ir(entry, "unfused", at, where) if entry["unfused"] is not None else None
    return module, unfused


def _rank_ir(entry: dict[str, Any], name: str, at: int, path: Path) -> Any:
    """``entry[name]`` (a rank's program) as a module: its flat form loaded, else its text parsed
    (a flat form that does not load warns once)."""
    from spmdc.ir.parser import parse_module
    from spmdc.ir.serialize import load_ir

    blob = (entry.get("flat") or {}).get(name)
    if blob is not None:
        try:
            return load_ir(blob)
        except Exception as e:   # noqa: BLE001 - the text is the reference: parse it
            _warn_once(path, f"the compile cache entry '{path}' holds a flat form of rank {at}'s program that "
                             f"does not load ({type(e).__name__}: {e}); parsing its text instead", tag="flat")
            stats.corrupt += 1
    stats.rank_parsed += 1
    return parse_module(entry[name], f"<rank {at}>")


def _through(digest: str, compile_fn: Callable[[], T],
             keep: Callable[[T], bool] = lambda v: True) -> tuple[T, bool, bool]:
    """``(value, hit, stored)``: the entry ``digest`` (its compile's warnings given again), else
    ``compile_fn()``'s value, stored when ``keep(value)``."""
    path = steps_dir() / f"{digest}.pkl"
    entry = _load(path, digest)
    if entry is not None:
        _replay(entry["warnings"])
        return entry["value"], True, False
    value, stored = _compute(path, digest, compile_fn, keep)
    return value, False, stored


def _compute(path: Path, digest: str, compile_fn: Callable[[], T], keep: Callable[[T], bool]) -> tuple[T, bool]:
    """``(compile_fn()'s value, stored)``: stored in ``path`` (with its warnings) when ``keep(value)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = compile_fn()
    recorded = [_warning_record(w) for w in caught]
    stored = keep(value) and _store(path, digest, value, recorded)
    _replay(recorded)
    return value, stored


# -- entries -------------------------------------------------------------------------------------

def _load(path: Path, digest: str) -> dict[str, Any] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn_once(path, f"the compile cache entry '{path}' cannot be read ({e}); compiling again")
        stats.corrupt += 1
        return None
    try:
        entry = pickle.loads(data)
        if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != digest:
            raise ValueError("not an entry of this key and format")
        entry["value"], entry["warnings"]   # noqa: B018 - both must be there
    except Exception as e:   # noqa: BLE001 - any damage: recompile
        _warn_once(path, f"the compile cache entry '{path}' is unreadable ({type(e).__name__}: {e}); compiling "
                         "again and overwriting it")
        stats.corrupt += 1
        return None
    return entry


def _store(path: Path, digest: str, value: Any, recorded: list[tuple[Any, ...]]) -> bool:
    import spmdc

    try:
        data = pickle.dumps({"format": FORMAT, "key": digest, "value": value, "warnings": recorded,
                             "spmdc": spmdc.__version__, "written": time.time()}, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:   # noqa: BLE001 - nothing to store; the compile's result is still right
        _warn_once(path, f"the compiled program cannot be stored in the compile cache ({type(e).__name__}: {e})")
        return False
    try:
        write_bytes_atomic(path, data)
    except OSError as e:
        _warn_once(path, f"the compile cache entry '{path}' cannot be written ({e}); the next run compiles again")
        return False
    return True


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path`` all at once: a temporary file in the same directory, fsynced, then
    ``os.replace``d (readers see the old entry or the new one, never part of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pkl")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:   # the rename itself, durably (best effort: not every file system opens directories)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _warning_record(w: warnings.WarningMessage) -> tuple[Any, ...]:
    category = w.category
    try:
        pickle.dumps(category)
    except Exception:   # noqa: BLE001 - a local warning class: given again as a UserWarning
        category = UserWarning
    return (category, str(w.message), w.filename, w.lineno)


def _replay(recorded: list[tuple[Any, ...]]) -> None:
    for category, message, filename, lineno in recorded:
        warnings.warn_explicit(message, category, filename, lineno)


def _warn_once(path: Path, message: str, tag: str = "") -> None:
    if str(path) + tag not in _warned:
        _warned.add(str(path) + tag)
        warnings.warn("spmdc: " + message, CompileCacheWarning, stacklevel=3)
