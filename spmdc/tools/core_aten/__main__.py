"""``python -m spmdc.tools.core_aten [--check]``: write (or, with ``--check``, compare)
``docs/core_aten.md`` and ``tests/lit/rules/core_aten_rules.txt`` from the samples."""

from __future__ import annotations

import sys
from pathlib import Path

from spmdc.tools.core_aten.table import render

ROOT = Path(__file__).resolve().parents[3]
TARGETS = {"docs/core_aten.md": "table", "tests/lit/rules/core_aten_rules.txt": "rules"}


def main(argv: list[str]) -> int:
    texts = render()
    stale = []
    for rel, key in TARGETS.items():
        path = ROOT / rel
        if "--check" in argv:
            if not path.exists() or path.read_text() != texts[key]:
                stale.append(rel)
        else:
            path.write_text(texts[key])
            print(f"wrote {rel}")
    if stale:
        print("stale: " + ", ".join(stale) + " (run python -m spmdc.tools.core_aten)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
