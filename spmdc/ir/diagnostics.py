"""Diagnostics in MLIR's shape::

    t.mlir:3:12: error: 'tensor.matmul' op contracting dims differ: 16 vs 8
      %0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
               ^

A :class:`SourceManager` remembers the text of every buffer that was parsed so a
diagnostic can show the line and a caret under the column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spmdc.ir.location import UNKNOWN, FileLineColLoc, Location, NameLoc


@dataclass
class Diagnostic:
    severity: str  # "error" | "warning" | "note" | "remark"
    message: str
    location: Location = UNKNOWN
    notes: list[Diagnostic] = field(default_factory=list)

    def position(self) -> FileLineColLoc | None:
        return self.location.file_line_col()


class DiagnosticError(Exception):
    """Raised by the parser, verifier and passes; carries one :class:`Diagnostic`.

    Survives pickling whatever a subclass's constructor takes (errors cross ranks), with
    its message, location and extra fields.
    """

    def __init__(self, message: str, location: Location = UNKNOWN, notes: list[Diagnostic] | None = None):
        super().__init__(message)
        self.diagnostic = Diagnostic("error", message, location, notes or [])

    def __reduce__(self) -> tuple:
        return _rebuild_error, (type(self), self.args, dict(self.__dict__))


def _rebuild_error(cls: type, args: tuple, state: dict) -> Exception:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class SourceManager:
    """File name → text, for rendering the source line under a diagnostic."""

    def __init__(self) -> None:
        self._buffers: dict[str, list[str]] = {}

    def add(self, name: str, text: str, first_line: int = 1) -> None:
        lines = self._buffers.setdefault(name, [])
        needed = first_line - 1 + text.count("\n") + 1
        if len(lines) < needed:
            lines.extend([""] * (needed - len(lines)))
        for i, line in enumerate(text.split("\n")):
            lines[first_line - 1 + i] = line

    def line(self, name: str, line: int) -> str | None:
        lines = self._buffers.get(name)
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1]

    def render(self, diag: Diagnostic) -> str:
        pos = diag.position()
        where = f"{pos.file}:{pos.line}:{pos.col}: " if pos else _describe(diag.location)
        out = [f"{where}{diag.severity}: {diag.message}"]
        if pos:
            src = self.line(pos.file, pos.line)
            if src is not None:
                text, col = _window(src, pos.col)
                out.append(text)
                out.append(" " * max(col - 1, 0) + "^")
        for note in diag.notes:
            out.append(self.render(note))
        return "\n".join(out)


SOURCE_WIDTH = 120


def _window(line: str, col: int) -> tuple[str, int]:
    """A long source line cut to about :data:`SOURCE_WIDTH` characters around ``col``
    (``...`` marks the cuts); returns the text and the caret's column in it."""
    if len(line) <= SOURCE_WIDTH:
        return line, col
    start = max(0, min(col - 1 - SOURCE_WIDTH // 2, len(line) - SOURCE_WIDTH))
    end = start + SOURCE_WIDTH
    head = "..." if start > 0 else ""
    tail = "..." if end < len(line) else ""
    return head + line[start:end] + tail, col - start + len(head)


def _describe(loc: Location) -> str:
    if isinstance(loc, NameLoc):
        return f"{loc}: "
    return ""
