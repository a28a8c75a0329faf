"""Every module path and file path the docs name exists.

In ``README.md`` and ``docs/*.md``: a dotted ``spmdc.a.b`` names a module (``spmdc/a/b.py`` or a
package), optionally followed by a name defined in it (``spmdc.sharding.apply.apply_plan``,
``spmdc.compiler.dump.Dump.write_stage``); a path ``spmdc/…``, ``tests/…``, ``bench/…`` or
``examples/…`` with a file suffix names a file of the repository. ``spmdc.<attr>`` IR attribute
names (``spmdc.param``, :mod:`spmdc.dialects.attrs`) are not module paths. The same holds for
the docstrings and messages of ``spmdc/`` itself.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from spmdc.dialects.attrs import ATTR_NAMES

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
DOTTED = re.compile(r"(?<![\w./-])spmdc(?:\.[A-Za-z_]\w*)+")
FILE = re.compile(r"(?<![\w./-])((?:spmdc|tests|bench|examples)/[\w./+-]*\.(?:py|md|mlir|yaml|json|lark|toml))\b")


@functools.cache
def _names(path: Path) -> dict[str, ast.AST | None]:
    """Top-level names a module defines (functions, classes, assignments, imports) → their node."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict[str, ast.AST | None] = {}
    for node in ast.walk(tree) if path.name == "__init__.py" else tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(node.name, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out.setdefault(n.id, None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out.setdefault((a.asname or a.name).split(".")[0], None)
    for node in tree.body:   # a class's members: Class.member
        if isinstance(node, ast.ClassDef):
            out[node.name] = node
    return out


@functools.cache
def _lazy(path: Path) -> dict[str, tuple[str, str]]:
    """A package's lazily imported names: ``_LAZY = {"compile": ("spmdc.api.entry", "compile"), ...}``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _module(parts: list[str]) -> tuple[Path, int] | None:
    """The longest prefix of ``parts`` that is a module: its file and how many parts it took."""
    for n in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:n])
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), n
        if (base / "__init__.py").is_file():
            return base / "__init__.py", n
    return None


def dotted_exists(ref: str) -> bool:
    parts = ref.split(".")
    found = _module(parts)
    if found is None:
        return False
    path, n = found
    rest = parts[n:]
    if not rest:
        return True
    lazy = _lazy(path)
    if rest[0] in lazy:   # spmdc.compile: spmdc/__init__.py's lazy names
        module, attr = lazy[rest[0]]
        return dotted_exists(".".join([module, attr, *rest[1:]]))
    names = _names(path)
    if rest[0] not in names:
        return False
    node = names[rest[0]]
    if len(rest) == 1 or not isinstance(node, ast.ClassDef):
        return True   # (attributes of values are not followed)
    members = {m.name for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    members |= {n.id for m in node.body if isinstance(m, (ast.Assign, ast.AnnAssign))
                for t in (m.targets if isinstance(m, ast.Assign) else [m.target]) for n in ast.walk(t)
                if isinstance(n, ast.Name)}
    return rest[1] in members


def stale_in(text: str) -> list[tuple[int, str]]:
    """(line, reference) for each module path or file path in ``text`` that does not exist."""
    bad = []
    for no, line in enumerate(text.splitlines(), 1):
        for m in DOTTED.finditer(line):
            ref = m.group(0).rstrip(".")
            if ref in ATTR_NAMES or any(ref.startswith(a + ".") for a in ATTR_NAMES):
                continue
            if not dotted_exists(ref):
                bad.append((no, ref))
        for m in FILE.finditer(line):
            if not (ROOT / m.group(1)).exists():
                bad.append((no, m.group(1)))
    return bad


def test_every_module_and_file_the_docs_name_exists():
    bad = [f"{doc.relative_to(ROOT)}:{no}: {ref}" for doc in DOCS
           for no, ref in stale_in(doc.read_text(encoding="utf-8"))]
    assert not bad, "the docs name what does not exist:\n" + "\n".join(bad)


def test_every_module_path_in_the_sources_docstrings_and_messages_exists():
    bad = [f"{path.relative_to(ROOT)}:{no}: {ref}" for path in sorted((ROOT / "spmdc").rglob("*.py"))
           for no, ref in stale_in(path.read_text(encoding="utf-8"))]
    assert not bad, "spmdc/ names modules or files that do not exist:\n" + "\n".join(bad)


def test_the_check_finds_stale_references():
    text = ("see `spmdc.runtime.meta_init`, `HeteroPlan.load` in spmdc/compiler/memory.py;\n"
            "`spmdc.sharding.apply.apply_plan`, `spmdc.compiler.dump.Dump.write_stage`, `spmdc.param`,\n"
            "`spmdc.sharding.device_groups.HeteroPlan.load`, spmdc/compiler/driver.py, `spmdc.compile`\n")
    assert stale_in(text) == [(1, "spmdc.runtime.meta_init"), (1, "spmdc/compiler/memory.py"),
                              (3, "spmdc.sharding.device_groups.HeteroPlan.load")]
