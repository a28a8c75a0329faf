"""``--verify-diagnostics``: compare emitted diagnostics with ``expected-*`` comments.

    // expected-error@+1 {{'tensor.add' op result type}}
    %0 = tensor.add %a, %b : ...

``@+N`` / ``@-N`` are relative lines, ``@above`` / ``@below`` mean -1 / +1, none
means the comment's own line. The text between ``{{ }}`` must occur in the message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spmdc.ir.diagnostics import Diagnostic

_EXPECT = re.compile(r"expected-(error|warning|note|remark)\s*(?:@([+-]\d+|above|below))?\s*\{\{(.*?)\}\}")


@dataclass
class Expectation:
    severity: str
    line: int
    text: str
    comment_line: int
    matched: bool = False


def collect_expectations(text: str, first_line: int) -> list[Expectation]:
    out = []
    for i, line in enumerate(text.split("\n")):
        lineno = first_line + i
        for m in _EXPECT.finditer(line):
            where = m.group(2)
            offset = {None: 0, "above": -1, "below": 1}.get(where)
            if offset is None:
                offset = int(where)  # type: ignore[arg-type]
            out.append(Expectation(m.group(1), lineno + offset, m.group(3), lineno))
    return out


def check(diags: list[Diagnostic], expectations: list[Expectation], filename: str) -> list[str]:
    """Problems, as rendered messages; empty when everything matched."""
    problems = []
    for d in diags:
        pos = d.position()
        line = pos.line if pos else -1
        hit = next((e for e in expectations if not e.matched and e.severity == d.severity
                    and e.line == line and e.text in d.message), None)
        if hit is None:
            where = f"{pos.file}:{pos.line}:{pos.col}: " if pos else ""
            problems.append(f"{where}error: unexpected {d.severity}: {d.message}")
        else:
            hit.matched = True
    for e in expectations:
        if not e.matched:
            problems.append(f"{filename}:{e.comment_line}:1: error: expected {e.severity} "
                            f"\"{e.text}\" was not produced (at line {e.line})")
    return problems
