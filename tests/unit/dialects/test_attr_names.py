"""Every ``spmdc.*`` attribute name is spelled once, in :mod:`spmdc.dialects.attrs`.

A quoted ``"spmdc.<name>"`` (or ``'spmdc.<name>'``) of a defined attribute anywhere else in
``spmdc/`` fails this test with its file and line: use the constant (``PARAM_ATTR``, ``RANK_ATTR`` ...).
"""

from __future__ import annotations

import re
from pathlib import Path

from spmdc.dialects import attrs

ROOT = Path(__file__).resolve().parents[3] / "spmdc"
DEFINING = ROOT / "dialects" / "attrs.py"
# Files whose owner converts them separately (the lead's refactoring of the compiled modules);
# remove an entry once that file uses the constants.
ALLOWED = {
    ROOT / "api" / "compiled_module.py",
    ROOT / "api" / "pipeline_module.py",
    ROOT / "api" / "pipeline_executor.py",
}


def literal_uses(root: Path = ROOT) -> list[str]:
    """``file:line: "spmdc.x"`` for each quoted attribute name outside the defining file."""
    names = "|".join(re.escape(n) for n in sorted(attrs.ATTR_NAMES, key=len, reverse=True))
    pattern = re.compile(rf"""(["'])({names})\1""")
    out = []
    for path in sorted(root.rglob("*.py")):
        if path == DEFINING or path in ALLOWED:
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in pattern.finditer(line):
                out.append(f"{path.relative_to(root.parent)}:{no}: {m.group(0)}")
    return out


def test_every_attribute_name_is_a_constant_of_the_attrs_module():
    bad = literal_uses()
    assert not bad, "spell these with the constants of spmdc/dialects/attrs.py:\n" + "\n".join(bad)


def test_the_check_finds_a_literal(tmp_path):
    (tmp_path / "x.py").write_text('a = f.arg_attrs(0).get("spmdc.param")\nb = "spmdc.compile"\n')
    assert literal_uses(tmp_path) == [f"{tmp_path.name}/x.py:1: \"spmdc.param\""]


def test_constants_are_distinct_and_namespaced():
    assert len(set(attrs.ATTR_NAMES)) == len(attrs.ATTR_NAMES)
    assert all(n.startswith("spmdc.") for n in attrs.ATTR_NAMES)
    defined = {v for k, v in vars(attrs).items() if k.endswith(("_ATTR", "_LOC"))}
    assert defined == set(attrs.ATTR_NAMES)
