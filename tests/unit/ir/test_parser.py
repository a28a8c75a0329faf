"""Parser: accepted syntax, and a precise file:line:col diagnostic for every error."""

import pytest

from spmdc.ir import (
    DiagnosticError,
    FileLineColLoc,
    NameLoc,
    SourceManager,
    StringAttr,
    TensorType,
    UnknownLoc,
    parse_module,
    print_module,
    verify,
)
from spmdc.ir.core import UnregisteredOp
from spmdc.ir.diagnostics import Diagnostic
from spmdc.ir.module import ModuleOp


def parse_error(text, **kw):
    """The DiagnosticError of parsing ``text`` as e.mlir: (line, col, message)."""
    with pytest.raises(DiagnosticError) as e:
        parse_module(text, "e.mlir", **kw)
    pos = e.value.diagnostic.position()
    assert pos is not None and pos.file == "e.mlir"
    return pos.line, pos.col, str(e.value)


FN = "func.func @f(%a: tensor<4xf32>) {{\n{}\n  func.return\n}}\n"


# -- semantic errors ----------------------------------------------------------------------

def test_unknown_element_type_points_at_element_type():
    line, col, msg = parse_error("func.func @f(%a: tensor<8x16xf3>) {\n  func.return\n}\n")
    assert (line, col) == (1, 30)  # the 'f3'
    assert msg.startswith("unknown element type 'f3' in 'tensor<8x16xf3>'")
    line, col, msg = parse_error(FN.format("  %0 = tensor.neg %a : tensor<q8>"))
    assert (line, col) == (2, 31) and "unknown element type 'q8'" in msg


@pytest.mark.parametrize("dim", ["?", "-1", "²", "", "8.0"])
def test_invalid_dimension(dim):
    line, col, msg = parse_error(f"func.func @f(%a: tensor<4x{dim}xf32>) {{\n  func.return\n}}\n")
    assert (line, col) == (1, 27) and f"invalid dimension '{dim}'" in msg


def test_undefined_value():
    line, col, msg = parse_error(FN.format("  %0 = tensor.neg %v : tensor<4xf32>"))
    assert (line, col, msg) == (2, 19, "use of undeclared SSA value '%v'")


def test_values_do_not_leak_between_isolated_functions():
    text = ("func.func @f(%a: tensor<4xf32>) {\n  func.return\n}\n"
            "func.func @g() {\n  %0 = tensor.neg %a : tensor<4xf32>\n  func.return\n}\n")
    assert parse_error(text) == (5, 19, "use of undeclared SSA value '%a'")


def test_kernel_fused_region_is_isolated():
    text = ("func.func @f(%a: tensor<4xf32>) {\n  %0 = kernel.fused %a : tensor<4xf32> {\n"
            "  ^bb0(%x: tensor<4xf32>):\n    kernel.yield %a : tensor<4xf32>\n  }\n  func.return\n}\n")
    assert parse_error(text) == (4, 18, "use of undeclared SSA value '%a'")


def test_redefinition():
    line, col, msg = parse_error(FN.format("  %a = tensor.neg %a : tensor<4xf32>"))
    assert (line, col, msg) == (2, 3, "redefinition of SSA value '%a'")
    text = ('%0:2 = "x.y"() : () -> (tensor<f32>, tensor<f32>)\n'
            '%0 = tensor.neg %0#1 : tensor<f32>\n')
    assert parse_error(text, allow_unregistered=True) == (2, 1, "redefinition of SSA value '%0'")
    text = ('%0 = "x.y"() : () -> tensor<f32>\n%0:2 = "x.y"() : () -> (tensor<f32>, tensor<f32>)\n')
    assert parse_error(text, allow_unregistered=True) == (2, 1, "redefinition of SSA value '%0'")


def test_unknown_op():
    assert parse_error(FN.format("  %0 = tensor.frob %a : tensor<4xf32>")) == \
        (2, 8, "unregistered operation 'tensor.frob'")
    assert parse_error('%0 = "foo.bar"() : () -> tensor<4xf32>\n') == \
        (1, 6, "unregistered operation 'foo.bar'")
    assert parse_error("frob\n") == (1, 1, "unregistered operation 'frob' (expected 'dialect.op')")


def test_unregistered_ops_allowed_on_request():
    text = '%0 = "foo.bar"(%0) : (tensor<4xf32>) -> tensor<4xf32>\n'
    assert parse_error(text, allow_unregistered=True)[2] == "use of undeclared SSA value '%0'"
    m = parse_module('%0 = "foo.bar"() {k = 1} : () -> tensor<4xf32>\n%1 = foo.baz %0 : tensor<4xf32>\n',
                     allow_unregistered=True)
    a, b = m.body.ops
    assert isinstance(a, UnregisteredOp) and a.name == "foo.bar" and b.name == "foo.baz"
    assert b.operands == (a.result,)
    text = print_module(m)
    assert '"foo.baz"(%0) : (tensor<4xf32>) -> tensor<4xf32>' in text
    assert print_module(parse_module(text, allow_unregistered=True)) == text


def test_type_mismatch_between_use_and_definition():
    line, col, msg = parse_error(FN.format("  %0 = tensor.neg %a : tensor<8xf32>"))
    assert (line, col) == (2, 19)
    assert msg == ("use of value '%a' expects different type than prior uses: "
                   "'tensor<8xf32>' vs 'tensor<4xf32>'")
    line, col, msg = parse_error(FN.format('  %0 = "tensor.neg"(%a) : (tensor<2xf32>) -> tensor<2xf32>'))
    assert (line, col) == (2, 21) and "'tensor<2xf32>' vs 'tensor<4xf32>'" in msg


def test_missing_types_in_custom_form():
    assert parse_error(FN.format("  %0 = tensor.neg %a")) == \
        (2, 8, "custom form of 'tensor.neg' needs ': type' after its operands")
    text = "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %a\n}\n"
    assert parse_error(text) == (2, 3, "custom form of 'func.return' needs ': type' after its operands")


def test_operand_and_type_counts_in_custom_form():
    line, col, msg = parse_error(FN.format("  func.return %a, %a : tensor<4xf32>"))
    assert (line, col) == (2, 3) and msg == "'func.return' has 2 operands but 1 types"
    line, col, msg = parse_error(FN.format(
        "  %0 = tensor.add %a, %a : (tensor<4xf32>) -> tensor<4xf32>"))
    assert (line, col) == (2, 8) and msg == "'tensor.add' has 2 operands but its type lists 1"
    line, col, msg = parse_error(FN.format(
        "  %0 = tensor.add %a, %a : tensor<4xf32>, tensor<4xf32>"))
    assert (line, col) == (2, 8) and "needs one type or a function type" in msg


def test_wrong_result_count():
    line, col, msg = parse_error(FN.format("  %0, %1 = tensor.neg %a : tensor<4xf32>"))
    assert (line, col, msg) == (2, 12, "'tensor.neg' defines 1 result(s) but 2 names were given")
    line, col, msg = parse_error(FN.format("  %0:2 = tensor.neg %a : tensor<4xf32>"))
    assert (line, col) == (2, 10) and "2 names were given" in msg
    line, col, msg = parse_error(FN.format('  %0, %1 = "tensor.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>'))
    assert (line, col, msg) == (2, 12, "'tensor.neg' type has 1 results but 2 names were given")
    line, col, msg = parse_error(FN.format('  "tensor.neg"(%a, %a) : (tensor<4xf32>) -> tensor<4xf32>'))
    assert (line, col, msg) == (2, 3, "'tensor.neg' has 2 operands but its type lists 1")
    line, col, msg = parse_error('%r:0 = "x.y"() : () -> ()\n', allow_unregistered=True)
    assert (line, col, msg) == (1, 4, "expected a positive result count, got 0")


def test_result_number_out_of_range():
    text = ('%r:2 = "x.y"() : () -> (tensor<f32>, tensor<f32>)\n'
            '%1 = tensor.neg %r#2 : tensor<f32>\n')
    assert parse_error(text, allow_unregistered=True) == \
        (2, 17, "result number 2 out of range for '%r' (2 results)")
    text = ("%c = tensor.constant {value = dense<1.0> : tensor<f32>} : tensor<f32>\n"
            "%1 = tensor.neg %c#1 : tensor<f32>\n")
    assert parse_error(text)[:2] == (2, 17)
    assert parse_error("%x#1 = tensor.neg %y : tensor<f32>\n")[2] == "expected a result name without '#'"


@pytest.mark.parametrize("literal,ty,col,fragment", [
    ("[1.0, 2.0]", "tensor<3xf32>", 31, "dense literal of shape (2,) does not match tensor<3xf32>"),
    ("[[1.0, 2.0], [3.0]]", "tensor<2x2xf32>", 31, "dense literal is not rectangular"),
    ("[1.0, [2.0]]", "tensor<2x1xf32>", 31, "dense literal is not rectangular"),
    ("[[1.0], 2.0]", "tensor<2x1xf32>", 31, "dense literal is not rectangular"),
    ("[1.0, []]", "tensor<2x0xf32>", 31, "dense literal is not rectangular"),
    ("1.5", "tensor<2xi32>", 37, "float literal 1.5 in a dense attribute of integer type tensor<2xi32>"),
    ("[1, 2.5]", "tensor<2xi8>", 41, "float literal 2.5"),
    ("[1.0]", "tensor<f32>", 31, "dense literal of shape (1,) does not match tensor<f32>"),
    ("[]", "tensor<2xf32>", 31, "does not match"),
])
def test_bad_dense_literal(literal, ty, col, fragment):
    text = f"%0 = tensor.constant {{value = dense<{literal}> : {ty}}} : {ty}\n"
    line, c, msg = parse_error(text)
    assert (line, c) == (1, col) and fragment in msg


def test_dense_element_type_error_points_into_the_type():
    line, col, msg = parse_error("%0 = tensor.constant {value = dense<1.0> : tensor<2xg7>} : tensor<2xf32>\n")
    assert (line, col) == (1, 53) and "unknown element type 'g7'" in msg


def test_unterminated_string():
    line, col, msg = parse_error('module attributes {a = "abc} {\n}\n')
    assert (line, col, msg) == (1, 24, "unterminated string")


def test_invalid_string_escape():
    line, col, msg = parse_error('module attributes {a = "x\\qy"} {\n}\n')
    assert (line, col) == (1, 24) and msg.startswith('invalid string literal "x\\qy"')
    line, col, msg = parse_error('module attributes {a = @"x\\q"} {\n}\n')
    assert (line, col) == (1, 24) and msg.startswith("invalid string literal")


def test_unexpected_end_of_input():
    line, col, msg = parse_error("func.func @f(%a: tensor<4xf32>) {\n  func.return\n")
    assert (line, col) == (2, 14) and msg.startswith("unexpected end of input")
    line, col, msg = parse_error("func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg")
    assert (line, col) == (2, 18) and msg.startswith("unexpected end of input")


@pytest.mark.parametrize("text,line,col,fragment", [
    ("func.func @f( {\n}", 1, 15, "unexpected '{', expected ')' or SSA value"),
    ("%0 = tensor.neg %a : tensor<4xf32> }", 1, 36, "unexpected '}'"),
    ("%x = tensor.neg ^ : tensor<f32>", 1, 17, "unexpected character '^'"),
    ("%0 = tensor.constant {value = dense<[1.0, 2.0> : tensor<2xf32>} : tensor<2xf32>", 1, 46,
     "unexpected '>', expected ',' or ']'"),
    ("module {\n  module {\n    %0 = \n  }\n}\n", 4, 3, "unexpected '}'"),
])
def test_syntax_errors(text, line, col, fragment):
    got = parse_error(text)
    assert got[:2] == (line, col) and fragment in got[2]


def test_duplicate_attribute_key():
    assert parse_error("module attributes {a = 1, a = 2} {\n}\n") == \
        (1, 27, "duplicate key 'a' in dictionary attribute")


def test_first_line_offset_for_split_input():
    with pytest.raises(DiagnosticError) as e:
        parse_module("%0 = tensor.neg %v : tensor<f32>\n", "s.mlir", first_line=10)
    pos = e.value.diagnostic.position()
    assert (pos.line, pos.col) == (10, 17)


def test_source_manager_render():
    text = FN.format("  %0 = tensor.neg %v : tensor<4xf32>")
    with pytest.raises(DiagnosticError) as e:
        parse_module(text, "r.mlir")
    sm = SourceManager()
    sm.add("r.mlir", text)
    assert sm.render(e.value.diagnostic) == (
        "r.mlir:2:19: error: use of undeclared SSA value '%v'\n"
        "  %0 = tensor.neg %v : tensor<4xf32>\n"
        "                  ^")
    # buffers added at an offset (split input) and notes
    sm.add("r.mlir", "second\nchunk", first_line=7)
    note = Diagnostic("note", "see here", FileLineColLoc("r.mlir", 8, 3))
    d = Diagnostic("error", "boom", FileLineColLoc("r.mlir", 7, 1), [note])
    assert sm.render(d) == "r.mlir:7:1: error: boom\nsecond\n^\nr.mlir:8:3: note: see here\nchunk\n  ^"
    assert sm.render(Diagnostic("error", "x", NameLoc("fc1"))) == 'loc("fc1"): error: x'
    assert sm.render(Diagnostic("error", "x")) == "error: x"


# -- accepted syntax ---------------------------------------------------------------------

def test_name_hints_preserved_and_numbers_renumbered():
    text = ("func.func @f(%in: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %foo = tensor.neg %in : tensor<4xf32>\n"
            "  %7 = tensor.exp %foo : tensor<4xf32>\n"
            "  %42 = tensor.relu %7 : tensor<4xf32>\n"
            "  %bar.baz-1 = tensor.tanh %42 : tensor<4xf32>\n"
            "  func.return %bar.baz-1 : tensor<4xf32>\n}\n")
    out = print_module(parse_module(text))
    assert "%foo = tensor.neg %in" in out
    assert "%0 = tensor.exp %foo" in out and "%1 = tensor.relu %0" in out
    assert "%bar.baz-1 = tensor.tanh %1" in out


def test_unnamed_values_print_as_args_and_numbers():
    from spmdc.dialects.func import FuncOp
    from spmdc.dialects.tensor import NegOp

    t = TensorType((4,), "f32")
    f = FuncOp.build("f", [t, t], [t])
    n = f.body.append(NegOp.create([f.body.args[1]]))
    from spmdc.dialects.func import ReturnOp
    f.body.append(ReturnOp.create([n.result], result_types=[]))
    out = print_module(f)
    assert "func.func @f(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>)" in out
    assert "%0 = tensor.neg %arg1" in out


def test_multi_result_groups_and_hash_uses():
    text = ('%r:2 = "x.pair"() : () -> (tensor<f32>, tensor<2xf32>)\n'
            "%a = tensor.neg %r#0 : tensor<f32>\n"
            "%b = tensor.neg %r#1 : tensor<2xf32>\n"
            "%c = tensor.neg %r : tensor<f32>\n"  # '%r' is '%r#0', as in MLIR
            "%s, %t:2 = \"x.three\"() : () -> (tensor<f32>, tensor<f32>, tensor<f32>)\n"
            "%d = tensor.add %s, %t#1 : tensor<f32>\n")
    m = parse_module(text, allow_unregistered=True)
    pair, a, b, c, three, d = m.body.ops
    assert a.operands == (pair.results[0],) and b.operands == (pair.results[1],)
    assert c.operands == (pair.results[0],)
    assert d.operands == (three.results[0], three.results[2])
    out = print_module(m)
    assert '%r:2 = "x.pair"()' in out
    assert "%a = tensor.neg %r#0" in out and "%b = tensor.neg %r#1" in out
    assert "%c = tensor.neg %r#0" in out
    assert '%s:3 = "x.three"()' in out and "%d = tensor.add %s#0, %s#2" in out
    assert print_module(parse_module(out, allow_unregistered=True)) == out


def test_single_result_hash_zero():
    m = parse_module("%c = tensor.constant {value = dense<1.0> : tensor<f32>} : tensor<f32>\n"
                     "%1 = tensor.neg %c#0 : tensor<f32>\n")
    c, n = m.body.ops
    assert n.operands == (c.result,)


def test_locations():
    text = ('%0 = tensor.constant {value = dense<1.0> : tensor<f32>} : tensor<f32> loc("fc1/aten.mm")\n'
            '%1 = tensor.neg %0 : tensor<f32> loc("f.py":10:2)\n'
            "%2 = tensor.neg %1 : tensor<f32> loc(unknown)\n"
            "%3 = tensor.neg %2 : tensor<f32>\n")
    m = parse_module(text, "l.mlir")
    a, b, c, d = m.body.ops
    assert a.location == NameLoc("fc1/aten.mm")
    assert a.location.file_line_col() == FileLineColLoc("l.mlir", 1, 1)  # where it was parsed
    assert b.location == FileLineColLoc("f.py", 10, 2)
    assert c.location == UnknownLoc()
    assert d.location == FileLineColLoc("l.mlir", 4, 1)
    out = print_module(m, debuginfo=True)
    assert 'tensor.constant {value = dense<1.0> : tensor<f32>} : tensor<f32> loc("fc1/aten.mm")' in out
    assert 'loc("f.py":10:2)' in out and "loc(unknown)" in out and 'loc("l.mlir":4:1)' in out
    assert out.rstrip().endswith('} loc("l.mlir":1:1)')
    assert print_module(parse_module(out, "other.mlir"), debuginfo=True) == out
    assert "loc(" not in print_module(m)


def test_location_of_verifier_error_in_a_name_loc():
    text = ("func.func @f(%a: tensor<4xf32>) {\n"
            '  %0 = tensor.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32> loc("blk/add")\n'
            "  func.return\n}\n")
    m = parse_module(text, "n.mlir")
    with pytest.raises(DiagnosticError) as e:
        verify(m)
    assert e.value.diagnostic.location == NameLoc("blk/add")
    pos = e.value.diagnostic.position()
    assert (pos.file, pos.line, pos.col) == ("n.mlir", 2, 3)


def test_implicit_module_wrapping():
    m = parse_module('shard.mesh @m = <["x" = 2]>\nfunc.func @f() {\n  func.return\n}\n', "w.mlir")
    assert isinstance(m, ModuleOp) and [o.name for o in m.body.ops] == ["shard.mesh", "func.func"]
    assert m.location == FileLineColLoc("w.mlir", 1, 1)
    assert print_module(m).startswith("module {\n  shard.mesh @m")
    empty = parse_module("// just a comment\n")
    assert isinstance(empty, ModuleOp) and empty.body.ops == []
    two = parse_module("module {}\nmodule {}\n")
    assert [o.name for o in two.body.ops] == ["builtin.module", "builtin.module"]


def test_explicit_module_with_name_and_attributes():
    m = parse_module('module @top attributes {spmdc.world = 8, tag = "x", flag} {\n'
                     '  shard.mesh @mesh = <["dp" = 2, "tp" = 4]>\n}\n')
    assert m.attributes["sym_name"] == StringAttr("top")
    assert m.attributes["tag"] == StringAttr("x") and "flag" in m.attributes
    assert m.body.ops[0].name == "shard.mesh"
    out = print_module(m)
    assert out.startswith('module @top attributes {flag, spmdc.world = 8, tag = "x"} {\n')
    verify(m)


def test_func_signature_parts():
    text = ("shard.mesh @mesh = <[\"tp\" = 2]>\n"
            "func.func @main(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0)]>},\n"
            "                %w: tensor<16xf32> {spmdc.param = \"fc.weight\"})\n"
            "    -> (tensor<8x16xf32> {spmdc.loss}, tensor<16xf32>) attributes {spmdc.entry} {\n"
            "  func.return %x, %w : tensor<8x16xf32>, tensor<16xf32>\n}\n")
    m = parse_module(text)
    verify(m)
    f = m.body.ops[1]
    assert f.sym_name == "main" and str(f.function_type) == \
        "(tensor<8x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<16xf32>)"
    assert str(f.arg_attrs(0)["shard.sharding"]) == "#shard<@mesh, [S(0)]>"
    assert f.arg_attrs(1)["spmdc.param"] == StringAttr("fc.weight")
    assert "spmdc.loss" in f.res_attrs(0) and f.res_attrs(1) == {}
    assert "spmdc.entry" in f.attributes
    assert [a.name_hint for a in f.args] == ["x", "w"]


def test_generic_form_with_regions_and_blocks():
    text = ('"builtin.module"() ({\n'
            '  "func.func"() ({\n'
            "  ^bb0(%a: tensor<4xf32>):\n"
            '    "func.return"(%a) : (tensor<4xf32>) -> ()\n'
            '  }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "id"} : () -> ()\n'
            "}) : () -> ()\n")
    m = parse_module(text)
    verify(m)
    assert print_module(m) == ("module {\n  func.func @id(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                               "    func.return %a : tensor<4xf32>\n  }\n}\n")


def test_comments_and_whitespace_are_ignored():
    m = parse_module("// header\nfunc.func @f() { // trailing\n\n   func.return   // end\n}\n")
    assert [o.name for o in m.walk()] == ["builtin.module", "func.func", "func.return"]


def test_any_value_name_is_usable():
    # names that look like parser internals must not confuse scoping
    text = ("func.func @f(%__isolated__: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %isolated = tensor.neg %__isolated__ : tensor<4xf32>\n"
            "  func.return %isolated : tensor<4xf32>\n}\n")
    m = parse_module(text)
    verify(m)
    assert print_module(m) == "module {\n" + "".join("  " + line + "\n" for line in text.splitlines()) + "}\n"
