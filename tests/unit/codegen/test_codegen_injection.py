"""Nothing in an IR file (value names, symbols, mesh axes, strings) can inject code.

The hostile program (hostile.mlir beside this file) uses Python keywords, builtins,
dunders and the emitter's own names as value names, and quotes/newlines/``__import__``
in function names, mesh axis names and string attributes; name hints set through the
API (as the frontend does) carry arbitrary text. The generated module must only hold
safe identifiers, run without side effects, and pass strings through unchanged.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from codegen_helpers import FakeCollectives  # noqa: E402

from spmdc.codegen import dump_codegen, emit_python, load_program  # noqa: E402
from spmdc.codegen.names import Namer, literal, py_name  # noqa: E402
from spmdc.ir import DiagnosticError, StringAttr, parse_module  # noqa: E402
from spmdc.runtime.collectives import CountingComm  # noqa: E402

HOSTILE = Path(__file__).with_name("hostile.mlir")
PAYLOAD = "__import__('builtins').PWNED = 1"
SAFE_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*|_REF|_CONST|_REF_IDS|_CONST_IDS|_fused_\d+")
AXIS = "tp\"'); " + PAYLOAD + " #\n"


def hostile_module():
    module = parse_module(HOSTILE.read_text(), str(HOSTILE))
    main = module.body.ops[-1]
    # hints as the frontend may set them, bypassing the parser's value-name syntax
    for v, hint in zip(main.body.args, ["a'b\"c\n" + PAYLOAD, "x = 1; " + PAYLOAD, "__class__", "0", "", "é"]):
        v.name_hint = hint
    return module


def check_source(src: str) -> None:
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            assert SAFE_IDENT.fullmatch(node.id) and not node.id.startswith("__"), node.id
        elif isinstance(node, (ast.FunctionDef, ast.arg)):
            name = node.name if isinstance(node, ast.FunctionDef) else node.arg
            assert SAFE_IDENT.fullmatch(name), name
        elif isinstance(node, ast.Attribute):
            assert not node.attr.startswith("_"), node.attr
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            assert [a.name for a in node.names] == ["torch"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert node.value in (AXIS, "sum", "tanh")
    assert "__import__(" not in src.replace(repr(AXIS), "")


def test_hostile_names_become_safe_identifiers_and_literals():
    src = emit_python(hostile_module())
    check_source(src)
    assert f"ar = comm.all_reduce(v8, {[AXIS]!r}, 'sum')" in src


def test_hostile_program_runs_without_side_effects(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    module = hostile_module()
    fn, path = load_program(module)
    check_source(path.read_text().split("\n", 1)[1])
    comm = FakeCollectives({AXIS: 2, "class": 1})
    args = [torch.randn(4) for _ in range(12)]
    out = fn(args, CountingComm(comm))
    assert not hasattr(builtins, "PWNED")
    assert comm.calls[0][2] == [AXIS]             # the axis name arrives unchanged
    want = torch.nn.functional.gelu(sum(args[1:], args[0]) * 2, approximate="tanh")
    torch.testing.assert_close(out[0], want)
    assert list(cwd.iterdir()) == []
    files = dump_codegen(module, tmp_path / "dump")
    assert all(p.parent == tmp_path / "dump" and re.fullmatch(r"[A-Za-z0-9_]+\.py", p.name) for p in files)


def test_hostile_string_attributes_are_literals_or_refused():
    module = hostile_module()
    gelu = next(op for op in module.walk() if op.name == "tensor.gelu")
    gelu.attributes["approximate"] = StringAttr("none'); " + PAYLOAD + "; ('")
    src = emit_python(module)
    assert repr("none'); " + PAYLOAD + "; ('") in src
    module = parse_module("""
      func.func @main(%a: tensor<4xf32>) -> tensor<4xi1> {
        %0 = tensor.compare %a, %a {predicate = "eq"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
        func.return %0 : tensor<4xi1>
      }""")
    cmp = next(op for op in module.walk() if op.name == "tensor.compare")
    cmp.attributes["predicate"] = StringAttr("eq(a, a) or __import__('os').system('true') or torch.eq")
    with pytest.raises(DiagnosticError, match="'tensor.compare' op attribute 'predicate' must be one of"):
        emit_python(module)


def test_names_and_literals():
    n = Namer({"torch", "args", "comm"})
    got = [n.fresh(h) for h in ["fc1.weight", "class", "torch", "__init__", "0", None, "fc1.weight", "print",
                                "match", "a\nb", "x" * 100]]
    assert got[:10] == ["fc1_weight", "v_class", "torch_1", "v___init__", "v0", "v1", "fc1_weight_1",
                        "v_print", "v_match", "a_b"]
    assert all(SAFE_IDENT.fullmatch(g) for g in got) and len(got[10]) <= 64
    assert py_name("@\"x\"", "f") == "f___x_"
    lit = literal(["a'\n", 1, 2.5, float("inf"), float("nan"), True, None, (3,)])
    assert lit == repr("a'\n").join(["[", ", 1, 2.5, float('inf'), float('nan'), True, None, (3,)]"])
