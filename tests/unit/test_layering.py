"""The package layering holds: imports (lazy ones and module-name strings included) only go down

    ir <- dialects <- {sharding, frontend} <- passes <- codegen <- compiler <- runtime <- api <- tools

the runtime only executes: it imports none of compiler, frontend, passes (what compiles and runs
together is ``api``), and every module imports on its own (no import cycles)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "spmdc"
LAYERS = ["ir", "dialects", "sharding", "frontend", "passes", "codegen", "compiler", "runtime", "api", "tools"]
FORBIDDEN = {"runtime": {"compiler", "frontend", "passes"}}   # below it in LAYERS, yet not imported
LEVEL = {p: i for i, p in enumerate(LAYERS)} | {"frontend": LAYERS.index("sharding")}
EXEMPT = {"examples"}   # model definitions; they import torch only


def _package(path: Path, root: Path) -> str:
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else "(top)"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def references(path: Path) -> list[tuple[str, int]]:
    """(package, line) for every import of spmdc.<package> and every 'spmdc.<package>...' string."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            names = [w for w in node.value.split() if w.startswith("spmdc.")]
        for n in names:
            parts = n.split(".")
            if parts[0] == "spmdc" and len(parts) > 1 and parts[1] in LEVEL:
                out.append((parts[1], node.lineno))
    return out


def violations(root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        pkg = _package(path, root)
        if pkg in ("(top)", *EXEMPT):
            continue
        for target, line in references(path):
            if target == pkg:
                continue
            if LEVEL[target] >= LEVEL[pkg] or target in FORBIDDEN.get(pkg, ()):   # upward, sideways, forbidden
                bad.append(f"{path.relative_to(root.parent)}:{line}: {pkg} -> {target}")
    return bad


def test_imports_only_go_down_the_layers():
    assert violations() == []


def test_the_check_sees_lazy_and_string_imports(tmp_path):
    probe = tmp_path / "spmdc" / "ir" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text('"""Mentions spmdc.runtime in a docstring: fine."""\n\n'
                     'def f():\n    import importlib\n    from spmdc.runtime import launcher\n'
                     '    return importlib.import_module("spmdc.dialects.tensor")\n')
    (tmp_path / "spmdc" / "passes").mkdir()
    (tmp_path / "spmdc" / "passes" / "ok.py").write_text("from spmdc.sharding import mesh\n")
    found = violations(tmp_path / "spmdc")
    assert found == ["spmdc/ir/probe.py:5: ir -> runtime", "spmdc/ir/probe.py:6: ir -> dialects"]


MODULES = sorted(".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
                 for p in ROOT.rglob("*.py"))


def test_every_module_imports_on_its_own():
    code = ("import importlib, sys\nbad = []\nfor m in sys.argv[1:]:\n"
            "    for k in [k for k in sys.modules if k == 'spmdc' or k.startswith('spmdc.')]:\n"
            "        del sys.modules[k]\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception as e:\n        bad.append(f'{m}: {type(e).__name__}: {e}')\n"
            "print('\\n'.join(bad))\n")
    res = subprocess.run([sys.executable, "-c", code, *MODULES], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""


def test_the_runtime_never_compiles(tmp_path):
    """runtime -> compiler / frontend / passes is refused though those sit below it."""
    probe = tmp_path / "spmdc" / "runtime" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from spmdc.compiler import compile_rank\nfrom spmdc.sharding import mesh\n"
                     "def f():\n    from spmdc.passes import manager\n")
    assert violations(tmp_path / "spmdc") == ["spmdc/runtime/probe.py:1: runtime -> compiler",
                                              "spmdc/runtime/probe.py:4: runtime -> passes"]
