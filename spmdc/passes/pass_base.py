"""Base class of passes: a dataclass whose fields are the pass's options.

    @dataclass
    class Canonicalize(ModulePass):
        '''...'''
        name: ClassVar[str] = "canonicalize"
        max_iterations: int = 10          # written canonicalize{max-iterations=3}

        def run(self, module: ModuleOp) -> None: ...
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, get_type_hints

from spmdc.ir.core import Operation


class ModulePass:
    """Runs on a ``builtin.module``; raise ``DiagnosticError`` on failure."""

    name: ClassVar[str] = ""

    def run(self, module: Operation) -> None:
        raise NotImplementedError

    @classmethod
    def option_fields(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else []

    @classmethod
    def option_types(cls) -> dict[str, object]:
        return get_type_hints(cls)

    def describe(self) -> str:
        """``name{opt=value ...}`` listing options that differ from their defaults."""
        parts = []
        for f in self.option_fields():
            value = getattr(self, f.name)
            if value != f.default:
                text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
                if isinstance(value, bool):
                    text = text.lower()
                parts.append(f"{f.name.replace('_', '-')}={text}")
        return self.name + ("{" + " ".join(parts) + "}" if parts else "")
