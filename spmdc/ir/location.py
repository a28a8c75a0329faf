"""Source locations, printed MLIR-style: ``loc("f.mlir":3:7)``, ``loc("fc1/aten.mm")``.

A parsed op always remembers where it was read (``FileLineColLoc``); an explicit
``loc("name")`` in the text becomes a :class:`NameLoc` whose hidden child keeps that
position, so diagnostics can still point at the line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spmdc.ir.attributes import quote


class Location:
    def file_line_col(self) -> FileLineColLoc | None:
        return None


@dataclass(frozen=True)
class UnknownLoc(Location):
    def __str__(self) -> str:
        return "loc(unknown)"


@dataclass(frozen=True)
class FileLineColLoc(Location):
    file: str
    line: int
    col: int

    def file_line_col(self) -> FileLineColLoc:
        return self

    def __str__(self) -> str:
        return f"loc({quote(self.file)}:{self.line}:{self.col})"


@dataclass(frozen=True)
class NameLoc(Location):
    """A named location (e.g. a module path and aten op); ``child`` is where it was parsed."""

    name: str
    child: Location | None = field(default=None, compare=False)

    def file_line_col(self) -> FileLineColLoc | None:
        return self.child.file_line_col() if self.child else None

    def __str__(self) -> str:
        return f"loc({quote(self.name)})"


UNKNOWN = UnknownLoc()
