"""The generic form is MLIR: upstream's parser (torch-mlir's bindings) reads every lit output.

For every lit test under ``tests/lit`` (and ``all_ops.mlir``) each RUN line's ``spmdc-opt``
invocation is replayed in-process: every chunk of ``--split-input-file`` that parses is printed
generically (with and without ``--mlir-print-debuginfo``) before and, when it verifies and its
pipeline succeeds, after the RUN line's passes. Each text must be accepted by upstream MLIR's
``Module.parse`` (which also verifies) in a context with unregistered dialects allowed and no
dialect registered but ``builtin`` (docs/ir.md, "Generic form and upstream MLIR"), and read
back by spmdc's parser to the same generic text.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from torch_mlir._mlir_libs._mlir import ir as upstream

from spmdc.compiler.pass_pipeline import named_pipelines
from spmdc.ir import parse_module, print_module, verify
from spmdc.ir.attributes import (
    ArrayAttr,
    Attribute,
    BoolAttr,
    DenseAttr,
    DictAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    UnitAttr,
)
from spmdc.ir.core import Operation, UnregisteredOp
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.location import UNKNOWN
from spmdc.ir.module import ModuleOp
from spmdc.ir.types import TensorType
from spmdc.passes.manager import PassManager
from spmdc.passes.registry import PipelineError, parse_pipeline
from spmdc.tools.opt import roundtrip_problem, split_input

ROOT = Path(__file__).resolve().parents[3]
LIT = ROOT / "tests" / "lit"
ALL_OPS = Path(__file__).with_name("all_ops.mlir")
_TOOLS = ("%spmdc-opt", "%roundtrip")


@dataclass(frozen=True)
class RunConfig:
    """What one RUN line asks of ``spmdc-opt`` about its input ``%s``."""

    pipeline: str = ""
    split: bool = False
    allow_unregistered: bool = False


@dataclass(frozen=True)
class Sample:
    """One generic print to check: where it came from, its text, whether it has locations."""

    origin: str
    text: str
    debuginfo: bool = False
    allow_unregistered: bool = False


def upstream_error(text: str) -> str | None:
    """None when upstream MLIR parses (and verifies) ``text``, else its first diagnostic line."""
    ctx = upstream._Context()  # the bindings' bare context: only 'builtin' is registered
    ctx.allow_unregistered_dialects = True
    with ctx:
        try:
            upstream.Module.parse(text)
        except upstream.MLIRError as e:
            lines = [ln for ln in str(e).splitlines() if "error:" in ln]
            return lines[0].strip() if lines else str(e)
    return None


def run_configs(path: Path) -> list[RunConfig]:
    """The ``spmdc-opt`` invocations of ``path``'s RUN lines that read ``%s`` (one plain parse if none)."""
    configs: list[RunConfig] = []
    for line in path.read_text().splitlines():
        m = re.match(r"\s*//\s*RUN:\s*(.*)", line)
        if not m:
            continue
        for segment in m.group(1).split("|"):
            words = shlex.split(segment.replace("2>&1", "").replace("2>/dev/null", ""))
            if not words or "%s" not in words or not any(w in _TOOLS for w in words):
                continue
            pipeline = ""
            for flag in ("-p", "--pass-pipeline"):
                if flag in words:
                    pipeline = words[words.index(flag) + 1]
            configs.append(RunConfig(pipeline, "--split-input-file" in words,
                                     "--allow-unregistered-dialect" in words))
    return list(dict.fromkeys(configs)) or [RunConfig()]


def samples_of(path: Path) -> list[Sample]:
    """The generic prints of every chunk of ``path`` that spmdc parses, as the RUN lines process it."""
    out: list[Sample] = []
    rel = path.relative_to(ROOT)
    for cfg in run_configs(path):
        for chunk in split_input(path.read_text(), cfg.split):
            where = f"{rel}:{chunk.first_line} [{cfg.pipeline or 'parse'}]"
            try:
                module = parse_module(chunk.text, str(path), chunk.first_line, cfg.allow_unregistered)
            except DiagnosticError:
                continue  # an invalid case: nothing is printed
            try:
                verify(module)
            except DiagnosticError:
                continue  # invalid IR: spmdc refuses it, so may upstream
            out += _prints(f"{where} input", module, cfg)
            if not cfg.pipeline:
                continue
            try:
                PassManager(parse_pipeline(cfg.pipeline, named_pipelines())).run(module)
            except (DiagnosticError, PipelineError):
                continue  # the RUN line expects this chunk to fail
            out += _prints(f"{where} output", module, cfg)
    return out


def _prints(origin: str, module: Operation, cfg: RunConfig) -> list[Sample]:
    return [Sample(origin + (" debuginfo" if loc else ""), print_module(module, generic=True, debuginfo=loc), loc,
                   cfg.allow_unregistered) for loc in (False, True)]


def lit_inputs() -> list[Path]:
    return sorted(LIT.rglob("*.mlir")) + [ALL_OPS]


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    out = [s for p in lit_inputs() for s in samples_of(p)]
    unique = list({s.text: s for s in out}.values())
    return unique


def test_every_lit_output_parses_in_upstream_mlir(samples):
    failures = [f"{s.origin}: {err}" for s in samples if (err := upstream_error(s.text))]
    ok = len(samples) - len(failures)
    print(f"\n{ok}/{len(samples)} generic prints of {len(lit_inputs())} lit inputs parse in upstream MLIR")
    assert len(samples) >= 200, "the lit tests should give hundreds of prints"
    assert not failures, f"{len(failures)} of {len(samples)} do not parse:\n" + "\n".join(failures[:40])


def test_generic_form_reads_back_to_itself(samples):
    bad = []
    for s in samples:
        again = parse_module(s.text, s.origin, 1, allow_unregistered=s.allow_unregistered)
        if print_module(again, generic=True, debuginfo=s.debuginfo) != s.text:
            bad.append(s.origin)
    assert not bad, f"{len(bad)} generic prints do not read back to themselves: {bad[:10]}"


def test_upstream_check_can_fail():
    assert upstream_error('"a.b"() : () -> ()') is None
    assert "redefinition" in upstream_error('"a.b"() ({\n^bb0(%x: i32):\n  "a.c"() ({\n'
                                            '  ^bb0(%x: i32):\n  }) : () -> ()\n}) : () -> ()')



# -- the generic forms that need care, one by one -------------------------------------------------

def _module_with(attrs: dict[str, Attribute], name: str = "t.op") -> Operation:
    module = ModuleOp.build_empty()
    module.body.append(UnregisteredOp([], [], attrs, [], UNKNOWN, name=name))
    return module


def _upstream_op(text: str):
    """The first op of the module upstream MLIR reads from ``text`` (kept alive with its context)."""
    ctx = upstream._Context()
    ctx.allow_unregistered_dialects = True
    with ctx:
        module = upstream.Module.parse(text)
        return ctx, module, module.body.operations[0]


def _reread(text: str) -> Operation:
    return parse_module(text, "generic.mlir", 1, allow_unregistered=True)


@pytest.mark.parametrize("name", ['a.b"c', "a.b\\c", 'a.b\\"c\\\\', "a.b\nc\t\x01", "a.bé✓"])
def test_quoted_op_names_round_trip(name):
    text = print_module(_module_with({}, name=name), generic=True)
    assert upstream_error(text) is None, text
    _, _, op = _upstream_op(text)
    assert op.name == name  # upstream reads the same name
    again = _reread(text)
    assert again.body.ops[0].name == name
    assert print_module(again, generic=True) == text
    assert print_module(again) == print_module(_module_with({}, name=name))  # custom form: the same op


INF, NAN = float("inf"), float("nan")
_F32 = TensorType((4,), "f32")


@pytest.mark.parametrize("attr,generic,upstream_value", [
    (FloatAttr(1e-05), "1.0e-05", 1e-05),
    (FloatAttr(-0.0), "-0.0", -0.0),
    (FloatAttr(INF), "0x7FF0000000000000 : f64", INF),
    (FloatAttr(-INF), "0xFFF0000000000000 : f64", -INF),
    (FloatAttr(NAN), "0x7FF8000000000000 : f64", NAN),
    (IntegerAttr(2**64 - 1), "18446744073709551615", None),
    (IntegerAttr(-(2**63)), "-9223372036854775808", -(2**63)),
    (IntegerAttr(2**64), "18446744073709551616 : i66", None),
    (IntegerAttr(-(2**63) - 1), "-9223372036854775809 : i65", None),
    (BoolAttr(True), "true", True),
    (StringAttr('é✓ "q" \\ \n\t\x01\x7f\u2028'), '"é✓ \\"q\\" \\\\ \\n\\t\\01\\7F\\E2\\80\\A8"',
     'é✓ "q" \\ \n\t\x01\x7f\u2028'),
    (StringAttr(""), '""', ""),
    (SymbolRefAttr("a-b"), '@"a-b"', "a-b"),
    (SymbolRefAttr("a.b$c"), "@a.b$c", "a.b$c"),
    (UnitAttr(), None, None),
    (ArrayAttr((FloatAttr(INF), IntegerAttr(2**70))), "[0x7FF0000000000000 : f64, 1180591620717411303424 : i72]",
     None),
    (DictAttr.of({"x": FloatAttr(1e20), "y": UnitAttr()}), "{x = 1.0e+20, y}", None),
    (DenseAttr(_F32, (INF, -INF, NAN, 1.5e-10)),
     "dense<[0x7F800000, 0xFF800000, 0x7FC00000, 1.5e-10]> : tensor<4xf32>", None),
    (DenseAttr(TensorType((2,), "bf16"), (-INF,)), "dense<0xFF80> : tensor<2xbf16>", None),
    (DenseAttr(TensorType((2,), "f16"), (INF, 1e-05)), "dense<[0x7C00, 1.0e-05]> : tensor<2xf16>", None),
    (DenseAttr(TensorType((), "f64"), (NAN,)), "dense<0x7FF8000000000000> : tensor<f64>", None),
    (DenseAttr(TensorType((2,), "f32"), (0.0, -0.0)), "dense<[0.0, -0.0]> : tensor<2xf32>", None),
    (DenseAttr(TensorType((3,), "i1"), (True, False, True)), "dense<[true, false, true]> : tensor<3xi1>", None),
    (DenseAttr(TensorType((2,), "i64"), (2**63, -(2**63))),
     "dense<[9223372036854775808, -9223372036854775808]> : tensor<2xi64>", None),
    (DenseAttr(TensorType((0, 2), "f32"), ()), "dense<> : tensor<0x2xf32>", None),
    (DenseAttr(TensorType((2, 0), "i32"), ()), "dense<> : tensor<2x0xi32>", None),
])
def test_attribute_generic_forms(attr, generic, upstream_value):
    """Each form: its text, upstream MLIR reads it (to the same value where the bindings tell),
    and spmdc reads it back to the same attribute and text."""
    if generic is not None:
        assert attr.generic() == generic
    text = print_module(_module_with({"a": attr}), generic=True)
    assert upstream_error(text) is None, text
    _, _, op = _upstream_op(text)
    if upstream_value is not None:
        value = op.attributes["a"].value  # the bindings give the concrete attribute class
        if isinstance(upstream_value, float):
            assert math.isnan(value) if math.isnan(upstream_value) else \
                (value, math.copysign(1, value)) == (upstream_value, math.copysign(1, upstream_value))
        else:
            assert value == upstream_value
    again = _reread(text)
    back = again.body.ops[0].attributes["a"]
    assert str(back) == str(attr) and back.generic() == attr.generic()
    assert print_module(again, generic=True) == text


def test_custom_form_keeps_its_spelling():
    """The custom form still spells inf/nan, symbols with '-' and wide integers as before."""
    assert str(FloatAttr(-INF)) == "-inf" and str(DenseAttr(_F32, (NAN,))) == "dense<nan> : tensor<4xf32>"
    assert str(SymbolRefAttr("a-b")) == "@a-b" and str(IntegerAttr(2**70)) == str(2**70)
    module = _reread('"t.op"() {a = @a-b, b = inf, c = 1180591620717411303424} : () -> ()')
    assert [str(a) for a in module.body.ops[0].attributes.values()] == ["@a-b", "inf", str(2**70)]


@pytest.mark.parametrize("text,message", [
    ('{a = "\\u00e9"}', "unknown escape '\\u'"),
    ('{a = "\\FF"}', "bytes are not UTF-8"),
    ("{a = 9 : i3}", "integer 9 does not fit i3"),
    ("{a = 1 : f32}", "integer literal 1 for float type f32 (write 1.0)"),
    ("{a = 1.5 : i32}", "float literal 1.5 for integer type i32"),
    ("{a = 1 : f8}", "unknown scalar type 'f8'"),
    ("{a = 0x1FFFFFFFFFFFFFFFF : f64}", "does not fit f64 (64 bits)"),
    ("{a = dense<0x7F8000000> : tensor<2xf32>}", "does not fit f32 (32 bits) in a dense attribute"),
    ("{a = dense<[300]> : tensor<1xi8>}", "dense attribute value 300 is out of range for i8"),
])
def test_generic_literals_refused_with_the_reason(text, message):
    with pytest.raises(DiagnosticError, match=re.escape(message)) as e:
        _reread(f'"t.op"() {text} : () -> ()')
    assert e.value.diagnostic.location.file == "generic.mlir"


def test_typed_and_hexadecimal_literals_read():
    module = _reread('"t.op"() {a = 5 : i3, b = 0x7FF0000000000000 : f64, c = 1.5 : f32, d = 0xFF : i8, '
                     'e = dense<[0x7FC00000, 2.0]> : tensor<2xf32>, f = dense<0x10> : tensor<2xi32>, '
                     'i1 = 1, f32} : () -> ()')  # keys spelled like types stay keys
    a = module.body.ops[0].attributes
    assert a["i1"] == IntegerAttr(1) and a["f32"] == UnitAttr()
    assert a["a"] == IntegerAttr(5) and a["b"] == FloatAttr(INF) and a["c"] == FloatAttr(1.5)
    assert a["d"] == IntegerAttr(255) and a["f"] == DenseAttr(TensorType((2,), "i32"), (16,))
    assert math.isnan(a["e"].values[0]) and a["e"].values[1] == 2.0


def test_empty_module_prints_its_block():
    module = parse_module("module {\n}\n")
    generic = print_module(module, generic=True)
    assert generic == '"builtin.module"() ({\n^bb0:\n}) : () -> ()\n'
    assert upstream_error(generic) is None
    assert upstream_error(generic.replace("^bb0:\n", "")) is not None  # the label is what makes it valid
    assert print_module(parse_module(generic)) == "module {\n}\n" == print_module(module)


SHADOWING = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %x : tensor<4xf32>
  %r = kernel.fused %0 : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %0 = tensor.exp %x : tensor<4xf32>
    kernel.yield %0 : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
"""


def test_isolated_region_names_do_not_shadow_in_generic_form():
    module = parse_module(SHADOWING)
    verify(module)
    custom = print_module(module)
    assert "    ^bb0(%x: tensor<4xf32>):\n      %0 = tensor.exp %x" in custom  # custom form: as written
    generic = print_module(module, generic=True)
    assert '^bb0(%x_1: tensor<4xf32>):\n      %1 = "tensor.exp"(%x_1)' in generic
    assert upstream_error(generic) is None
    shadowed = generic.replace("%x_1", "%x").replace("%1", "%0")
    assert "redefinition of SSA value" in upstream_error(shadowed)
    again = parse_module(generic)
    assert print_module(again, generic=True) == generic
    assert roundtrip_problem(module, "shadow.mlir") is None  # what spmdc-opt --verify-roundtrip checks


def test_value_names_print_as_ascii_identifiers():
    module = parse_module(SHADOWING)
    func = module.body.ops[0]
    func.body.args[0].name_hint = "é"  # a Python identifier, not an MLIR one
    generic = print_module(module, generic=True)
    assert "%é" not in generic and "^bb0(%arg0: tensor<4xf32>)" in generic
    assert upstream_error(generic) is None


def test_compiled_program_dumps_parse_in_upstream_mlir(tmp_path):
    """A real training step (gpt2-tiny: LayerNorm eps, -inf masks, philox seeds), every IR dump of its
    global stages and of rank 0's (async collectives, Triton-fused regions), in generic form."""
    from spmdc.compiler.driver import compile_global, rank_module
    from spmdc.compiler.dump import Dump
    from spmdc.examples import gpt2_tiny
    from spmdc.sharding.mesh import Mesh

    model, ((tokens,), (targets,)), loss = gpt2_tiny.factory(n_layer=1)
    dump = Dump(ir_dir=str(tmp_path))
    step = compile_global(model, (tokens,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", train=True,
                          loss_fn=loss, loss_inputs=(targets,), rng="philox", dump=dump)
    rank_module(step, 0, target="triton", dump=dump)
    files = sorted(tmp_path.rglob("*.mlir"))
    texts = {f.name: f.read_text() for f in files}
    assert any("kernel.fused" in t for t in texts.values()) and any("!comm.handle" in t for t in texts.values())
    failures = []
    for name, text in texts.items():
        generic = print_module(parse_module(text, name), generic=True, debuginfo=True)
        if err := upstream_error(generic):
            failures.append(f"{name}: {err}")
    print(f"\n{len(files) - len(failures)}/{len(files)} IR dumps parse in upstream MLIR (generic form)")
    assert len(files) >= 10 and not failures, failures


def test_roundtrip_check_still_catches_a_generic_form_that_changes_the_ir(monkeypatch):
    module = _reread('"t.op"() {a = 1.5} : () -> ()')
    assert roundtrip_problem(module, "t.mlir", allow_unregistered=True) is None
    monkeypatch.setattr(FloatAttr, "generic", lambda self: "2.5")  # a generic form that reads back as another IR
    problem = roundtrip_problem(module, "t.mlir", allow_unregistered=True)
    assert problem is not None and problem.startswith("generic form does not read back to the custom form's IR")
    assert "a = 1.5" in problem and "a = 2.5" in problem
