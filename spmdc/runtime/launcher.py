"""Start ranks with torch's own elastic launcher (what ``torchrun`` uses).

    results = launch(worker_fn, nproc=4, args=(config,))   # {rank: return value}

Every rank gets the usual torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, ...).
A rank that raises makes the launcher stop all ranks; :class:`LaunchError` carries the
failing rank's message and the user-code frame it came from, and, unless ``verbose``,
the path of one log file with every rank's stderr (tracebacks included) instead of
printing them. Everything the launch creates in the temporary directory (torch elastic's
run directories, error files) is removed when it ends; Ctrl-C ends every rank and raises
``KeyboardInterrupt``.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

_SPMDC_DIR = str(Path(__file__).resolve().parents[1])
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)\s*$', re.M)


class LaunchError(RuntimeError):
    """A rank failed; the message names the rank, its error and where it came from."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is (every rank ended, the launch's files removed), exit 143."""


def raise_on_sigterm(signum: int, frame: Any) -> None:
    """A SIGTERM handler: end the run as Ctrl-C does, by raising :class:`Terminated`."""
    raise Terminated()


def launch(fn: Callable[..., Any], nproc: int, args: tuple = (), timeout_s: float = 300.0,
           verbose: bool = False) -> dict[int, Any]:
    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    run_id = f"spmdc-{uuid.uuid4().hex[:8]}"
    saved = tempfile.tempdir
    work = tempfile.mkdtemp(prefix="spmdc-launch-")
    try:   # from here on, whatever ends the launch (a signal included) removes ``work``
        return _run(fn, nproc, args, timeout_s, verbose, work, run_id)
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(work, ignore_errors=True)


def _run(fn: Callable[..., Any], nproc: int, args: tuple, timeout_s: float, verbose: bool, work: str,
         run_id: str) -> dict[int, Any]:
    """The launch itself, its temporary files in ``work`` (removed by :func:`launch`)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=run_id,
        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.1,
        rdzv_configs={"timeout": int(timeout_s)},
        logs_specs=DefaultLogsSpecs(log_dir=os.path.join(work, "logs"),
                                    redirects=Std.NONE if verbose else Std.ERR),
    )
    # torch's launcher writes this into the environment at every launch; written here first, the fork
    # server starts in the environment every later launch has (and is not started again for it)
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = config.signals_to_handle
    config.start_method = _start_method()
    entry = _Values(fn)
    if config.start_method == "forkserver":
        # a forked rank receives its function and arguments through the fork server, which passes at
        # most 252 file descriptors, and torch's pickler sends every tensor's storage as one (a Hugging
        # Face model has more): they go by value instead, each rank its own copy (as every torchrun
        # process builds its own). What only multiprocessing's pickler can send (a queue) makes the
        # ranks spawned, as before.
        try:
            entry = _Values(fn, payload=pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL))
            args = ()
        except (pickle.PicklingError, TypeError, AttributeError, RuntimeError):
            config.start_method = "spawn"
    # the agent's temporary files (torchelastic_* run directories, pytorch-errorfile-* pickles) go
    # into ``work``; the ranks keep the user's TMPDIR (AF_UNIX socket paths there must stay short)
    tempfile.tempdir = work
    # the agent logs every failure with tracebacks: into the log file, not onto the terminal
    restore_logs = _agent_logs_to(os.path.join(work, "agent.log")) if not verbose else (lambda: None)
    try:
        return elastic_launch(config, entry)(*args)
    except ChildFailedError as e:
        failures = _all_failures(work, e.failures)
        rank, failure = _root_failure(e.failures, failures)
        log = None if verbose else _collect_logs(work, run_id, {r: _stack(f) for r, f in failures.items()})
        raise LaunchError(_describe(rank, failure, log)) from None
    except SignalException as e:
        raise (Terminated() if e.sigval == signal.SIGTERM else KeyboardInterrupt()) from None
    finally:
        restore_logs()


# what every rank imports before it runs (layers above add theirs: :func:`preload_in_ranks`): the fork
# server imports those of them this process has imported (so they import here), once; each rank forked
# from it starts with them
_PRELOAD = ["torch", "torch.distributed"]
_server: dict[str, Any] = {"started_with": None}


def preload_in_ranks(module: str) -> None:
    """Names a module that ranks import before they run anything (a layer above the runtime names its
    own entry point at import, as ``spmdc.api.entry`` does): once this process has imported it, the
    fork server that starts ranks imports it too, and every rank starts with it imported."""
    if module not in _PRELOAD:
        _PRELOAD.append(module)


def _start_method() -> str:
    """``forkserver`` where the platform has it, else ``spawn``.

    A spawned rank is a new interpreter that imports torch and spmdc itself (on 2 cores, 4 spawned
    ranks took 3.8 s to a first barrier, 0.66 s forked: bench/launch_start.py). Ranks are forked
    instead from one server process that imported them once (:data:`_PRELOAD`,
    :func:`preload_in_ranks`) and has run nothing else: no threads, no state but the imports'. The
    server lives as long as this process and serves every later launch; it is started again when
    this process's environment (or what it has imported of :data:`_PRELOAD`) is not the one it was
    started with, so a rank sees the environment of its launch as a spawned rank does, and when this
    process's stdout or stderr is another file (a rank writes where the server's point). It is
    started here, before the launch points ``tempfile`` at its own directory: the server's socket
    lives in multiprocessing's temporary directory, which must outlive the launch."""
    import multiprocessing
    import sys

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    from multiprocessing import forkserver

    key = (dict(os.environ), tuple(m for m in _PRELOAD if m in sys.modules), _stdio())
    if _server["started_with"] is not None and _server["started_with"] != key:
        _stop_server()
    forkserver.set_forkserver_preload(list(key[1]))
    forkserver.ensure_running()
    _server["started_with"] = key
    return "forkserver"


def _stop_server() -> None:
    """Stops the fork server (if one runs): the next launch starts another."""
    from multiprocessing import forkserver

    forkserver._forkserver._stop()   # (multiprocessing's own way; it has no public one)
    _server["started_with"] = None


def _stdio() -> tuple:
    """Which files this process's stdout and stderr are (None for a closed one)."""
    out = []
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
            out.append((st.st_dev, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


class _Values:
    """``fn`` whose result comes back as values: every tensor in it detached (a tensor that is part
    of an autograd graph, e.g. a compiled module's output, cannot cross the process boundary)."""

    def __init__(self, fn: Callable[..., Any], payload: bytes | None = None):
        self.fn = None if payload is not None else fn
        self.payload = payload   # (a forked rank's function and arguments, pickled by value)
        self.__name__ = getattr(fn, "__name__", "fn")   # (torch elastic names the ranks' function)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)

    def __call__(self, *args: Any) -> Any:
        import atexit

        import torch
        from torch.utils._pytree import tree_map

        # torch elastic points this rank's stdout/stderr at its log files only while ``fn`` runs; what the
        # process prints after (a backend's destructor aborting at exit) would reach the user's terminal
        exit_state: dict[str, Any] = {"fds": (os.dup(1), os.dup(2)), "code": 1}
        atexit.register(_end_rank, exit_state)
        fn = self.fn
        if self.payload is not None:   # forked: (run once torch's wrapper has returned, just before it leaves)
            from multiprocessing import util

            util.Finalize(None, _leave_as_an_interpreter_would, exitpriority=0)
            fn, args = pickle.loads(self.payload)
        try:
            value = tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, fn(*args))
        except SystemExit as e:
            exit_state["code"] = e.code if isinstance(e.code, int) and e.code else 1
            raise
        exit_state["code"] = None
        return value


def _leave_as_an_interpreter_would() -> None:
    """A forked rank's end: it leaves by ``os._exit``, so what an interpreter's exit would do for it
    is done here: its atexit handlers run (:func:`_end_rank` among them), then every open file's
    buffer is written out (a file the rank's code left open would otherwise lose its last writes)."""
    import atexit
    import gc
    import io

    atexit._run_exitfuncs()
    for obj in gc.get_objects():
        if isinstance(obj, io.IOBase):
            try:
                if not obj.closed and obj.writable():
                    obj.flush()
            except (OSError, ValueError):
                pass


def _end_rank(state: dict[str, Any]) -> None:
    """At a rank's exit (its interpreter's, or a forked rank's atexit handlers): its output back into
    the launch's log files; a failed rank (its error already recorded) leaves at once with its status
    (1 for an exception), before its process group's destructors (left alive on purpose: destroying it
    would close the peers' connections first) abort or hang the process."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    for fd, saved in zip((1, 2), state["fds"]):
        os.dup2(saved, fd)
    if state["code"] is not None:
        os._exit(state["code"])


# what a rank reports when *another* rank died under it: a symptom, not the cause
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing", "Broken pipe",
              "timed out after")


def _all_failures(work: str, failures: dict[int, Any]) -> dict[int, Any]:
    """The failures torch elastic reports (the first process it finds dead) and every other rank that
    recorded an error (a rank that died of a peer's error can be found dead before that peer)."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    found = dict(failures)
    for path in Path(work, "logs").rglob("error.json"):
        if path.parent.name.isdigit() and int(path.parent.name) not in found:
            try:
                found[int(path.parent.name)] = ProcessFailure(int(path.parent.name), 0, 1, str(path))
            except (OSError, ValueError, KeyError, TypeError):   # (a rank killed while writing it)
                continue
    return found


def _symptom(failure: Any) -> bool:
    """Whether ``failure`` is a rank losing its peers (another rank died under it)."""
    data = failure.message
    text = data.get("message", str(data)) if isinstance(data, dict) else str(data)
    return any(p in text for p in _PEER_LOST)


def _root_failure(reported: dict[int, Any], recorded: dict[int, Any]) -> tuple[int, Any]:
    """The failure to report: the first one (by time, then rank) torch elastic reports that is not a rank
    losing its peers; when every reported one is, the first such among every rank's recorded errors, so a
    user error on rank 1 is named instead of rank 0's "connection closed" in the collective it was waiting
    in; the first symptom when every rank reports one."""
    pool = reported if not all(map(_symptom, reported.values())) else {**recorded, **reported}
    return min(pool.items(), key=lambda kv: (_symptom(kv[1]), kv[1].timestamp, kv[0]))


def _stack(failure: Any) -> str:
    """The Python traceback a failed rank recorded (empty when it recorded none)."""
    if isinstance(failure.error_file_data, dict):
        info = failure.error_file_data.get("message")
        if isinstance(info, dict):
            return str(info.get("extraInfo", {}).get("py_callstack", ""))
    return ""


def _agent_logs_to(path: str) -> Callable[[], None]:
    """Send the launcher's (torch elastic's) log records to ``path``; returns the undo."""
    prefixes = ("torch.distributed.elastic", "torch.multiprocessing")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    saved = []
    for name in prefixes:
        lg = logging.getLogger(name)
        saved.append((lg, lg.handlers[:], lg.propagate))
        lg.handlers, lg.propagate = [handler], False

    def undo() -> None:
        for lg, handlers, propagate in saved:
            lg.handlers, lg.propagate = handlers, propagate
        handler.close()
    return undo


def _describe(rank: int, failure: Any, log: str | None) -> str:
    data = failure.message
    message = data.get("message", str(data)) if isinstance(data, dict) else str(data)
    if not _stack(failure) and message.startswith("To enable traceback"):  # died without a Python error
        message = (f"the process ended with exit code {failure.exitcode} without reporting a Python error"
                   + (" (see the log)" if log else ""))
    text = f"rank {rank} failed: {message.strip()}"
    frame = user_frame(_stack(failure))
    if frame:
        text += f"\n  at {frame}"
    if log:
        text += f"\n  (every rank's output, tracebacks included: {log})"
    return text


def user_frame(stack: str) -> str | None:
    """``file:line in function`` of the innermost frame outside spmdc, torch and the standard library."""
    frames = _FRAME.findall(stack)
    for path, line, fn in reversed(frames):
        if path.startswith(_SPMDC_DIR) or "/site-packages/" in path or "/lib/python3" in path or path.startswith("<"):
            continue
        return f"{path}:{line} in {fn}"
    return None


def _collect_logs(work: str, run_id: str, stacks: dict[int, str]) -> str:
    """Every rank's stderr and the tracebacks of failed ranks in one file beside the
    temporary directory (kept: its path is printed)."""
    logs = {int(p.parent.name): p for p in Path(work, "logs").rglob("stderr.log") if p.parent.name.isdigit()}
    fd, path = tempfile.mkstemp(prefix=f"{run_id}-", suffix=".log", dir=os.path.dirname(work))
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        agent = Path(work, "agent.log")
        if agent.is_file() and agent.stat().st_size:
            out.write("==== launcher (torch elastic) ====\n" + agent.read_text(encoding="utf-8", errors="replace"))
        for rank in sorted(set(logs) | set(stacks)):
            out.write(f"==== rank {rank} ====\n")
            if rank in logs:
                out.write(logs[rank].read_text(encoding="utf-8", errors="replace"))
            if stacks.get(rank):
                out.write(f"-- traceback of rank {rank}:\n{stacks[rank]}\n")
    os.chmod(path, 0o644)
    return path
