"""How the command-line tools fail: one clear line, exit 1; never a traceback for a user's mistake.

    spmdc show: error: cannot read 'step.mlir': No such file or directory
    x.mlir:3:24: error: unknown element type 'f3' in 'tensor<8x16xf3>'
      %0 = tensor.add %a, %b : tensor<8x16xf3>
                             ^
    spmdc: internal error: KeyError: 'x' (run with --verbose, or SPMDC_TRACEBACK=1, for the traceback)

:func:`guard` runs a tool's body and turns spmdc's own errors (bad input, bad options, a
model spmdc cannot capture, a failed rank) into that line; anything else is an internal
error (exit 2) whose traceback is shown only on request. Text from users and libraries is
printed as plain text (never as rich markup).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TextIO

EXIT_USER_ERROR = 1
EXIT_INTERNAL_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143   # 128 + SIGTERM, as the shell reports a process SIGTERM ended


class UserError(Exception):
    """A mistake in what the user asked for; its message is the whole story."""


def user_errors() -> tuple[type[BaseException], ...]:
    """spmdc's exceptions that describe bad input rather than a bug."""
    from spmdc.frontend.workloads import WorkloadError
    from spmdc.ir.diagnostics import DiagnosticError
    from spmdc.passes.registry import PipelineError
    from spmdc.runtime.launcher import LaunchError
    from spmdc.sharding.plan import PlanError

    errors: list[type[BaseException]] = [UserError, DiagnosticError, WorkloadError, PipelineError, PlanError,
                                         LaunchError, OSError]
    try:
        from spmdc.frontend.program import ExportError

        errors.append(ExportError)
    except ImportError:  # pragma: no cover - torch missing
        pass
    return tuple(errors)


def sigterm_interrupts() -> Callable[[], None]:
    """From now on SIGTERM ends the tool as Ctrl-C does (``finally`` blocks run: the launch's
    temporary files are removed, ranks stopped; :func:`guard` prints ``interrupted``, exit 143)
    instead of killing it on the spot. Returns the undo (a no-op off the main thread).

    A signal that lands while Python runs a finalizer or a weakref callback (an import's module
    lock released while torch is imported, an object's ``__del__``) raises there, where Python
    prints "Exception ignored" and goes on: the interruption would be lost and the run would go on
    to its end. :func:`_interrupts_again` sees such an interruption and delivers it again to the
    main thread's next bytecode."""
    import signal
    import threading

    from spmdc.runtime.launcher import raise_on_sigterm

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, raise_on_sigterm)
    hook = sys.unraisablehook
    sys.unraisablehook = _interrupts_again(hook)

    def undo() -> None:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = hook
    return undo


def _interrupts_again(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """A ``sys.unraisablehook``: an interruption (SIGTERM's :class:`~spmdc.runtime.launcher.Terminated`,
    Ctrl-C's ``KeyboardInterrupt``, torch elastic's ``SignalException`` while ranks run) raised where
    Python cannot raise it is signalled to the main thread again from a helper thread a few ms later
    (``_thread.interrupt_main``: the handler runs at the main thread's next bytecode, out of the
    finalizer by then; signalled from the hook itself it would run inside the hook, and be ignored
    again); anything else goes to ``hook``."""
    import _thread
    import signal
    import time

    from spmdc.runtime.launcher import Terminated

    def again(info: Any) -> None:
        exc = info.exc_value
        if isinstance(exc, KeyboardInterrupt):
            signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
        elif isinstance(getattr(exc, "sigval", None), signal.Signals):   # (torch elastic's handler while ranks run)
            signum = exc.sigval
        else:
            hook(info)
            return

        def deliver() -> None:
            time.sleep(0.01)
            _thread.interrupt_main(signum)
        try:
            _thread.start_new_thread(deliver, ())
        except RuntimeError:   # (the interpreter is shutting down: ending anyway; say what was ignored)
            hook(info)
    return again


def read_text(path: str, what: str = "") -> str:
    """The text of ``path`` (``-``: stdin) as UTF-8; a byte-order mark is dropped. Errors name the file."""
    label = f"{what} '{path}'" if what else f"'{path}'"
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except IsADirectoryError:
        raise UserError(f"cannot read {label}: it is a directory") from None
    except OSError as e:
        raise UserError(f"cannot read {label}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise UserError(f"{path}:{line}:{col}: error: not UTF-8 text (byte 0x{data[e.start]:02x}); "
                        "spmdc reads IR, plans and workloads as UTF-8") from None
    return text.removeprefix("\ufeff")


def write_text(path: str, text: str, what: str = "output") -> None:
    """Write ``text`` to ``path``; errors name the file and the reason."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        reason = e.strerror or str(e)
        if isinstance(e, FileNotFoundError):
            reason = f"directory '{os.path.dirname(path) or '.'}' does not exist"
        raise UserError(f"cannot write {what} '{path}': {reason}") from None


def render(e: BaseException, sources: object | None = None) -> str:
    """The one-line (plus source and caret for located diagnostics) text of a user error."""
    from spmdc.ir.diagnostics import DiagnosticError, SourceManager

    if isinstance(e, DiagnosticError):
        manager = sources if isinstance(sources, SourceManager) else SourceManager()
        pos = e.diagnostic.position()
        if pos is not None and manager.line(pos.file, pos.line) is None and os.path.isfile(pos.file):
            try:
                manager.add(pos.file, read_text(pos.file))
            except UserError:
                pass
        return manager.render(e.diagnostic)
    if isinstance(e, OSError) and not isinstance(e, UserError) and e.filename:
        return f"cannot use '{e.filename}': {e.strerror or e}"
    return str(e)


def _interruption_in(e: BaseException) -> KeyboardInterrupt | None:
    """The interruption (SIGTERM's ``Terminated``, Ctrl-C) behind ``e``, if one caused it: Python wraps what
    a class body's ``__set_name__`` raises in a ``RuntimeError`` (a SIGTERM landing while torch's elastic
    module defines its dataclasses: "Error calling __set_name__ on 'Field' instance ..."), and cleanup
    that fails while an interruption unwinds chains it as the context."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def guard(prog: str, body: Callable[[], int], verbose: bool = False, err: TextIO | None = None) -> int:
    """Run ``body``; a user error prints ``prog: error: ...`` (or a located diagnostic) and
    returns 1, an interruption 130 (Ctrl-C) or 143 (SIGTERM: see :func:`sigterm_interrupts`),
    anything else an internal-error line and 2."""
    from spmdc.runtime.launcher import Terminated

    err = err or sys.stderr
    try:
        return body()
    except KeyboardInterrupt as e:
        err.write(f"{prog}: interrupted\n")
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    except user_errors() as e:
        text = render(e)
        located = text.split("\n", 1)[0].count(": error: ") > 0
        err.write((text if located else f"{prog}: error: {text}") + "\n")
        if verbose:
            traceback.print_exc(file=err)
        return EXIT_USER_ERROR
    except Exception as e:  # a bug in spmdc: say so plainly, keep the traceback on request
        wrapped = _interruption_in(e)
        if wrapped is not None:   # an interruption something wrapped in another error
            err.write(f"{prog}: interrupted\n")
            return EXIT_TERMINATED if isinstance(wrapped, Terminated) else EXIT_INTERRUPTED
        err.write(f"{prog}: internal error: {type(e).__name__}: {e}\n")
        if verbose or os.environ.get("SPMDC_TRACEBACK"):
            traceback.print_exc(file=err)
        else:
            err.write("(run with --verbose, or SPMDC_TRACEBACK=1, for the Python traceback)\n")
        return EXIT_INTERNAL_ERROR
