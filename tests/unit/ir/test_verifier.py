"""Verifier: each rule rejects bad IR with an MLIR-worded message at the op's line."""

import pytest

from spmdc.ir import DiagnosticError, parse_module, verify

MESH = 'shard.mesh @mesh = <["dp" = 2, "tp" = 4]>\n'


def func(body, args="%a: tensor<8x16xf32>", results=""):
    """A module with @mesh and one function; the body starts on line 3."""
    return MESH + f"func.func @f({args}){results} {{\n{body}\n}}\n"


def ok(text):
    m = parse_module(text, "v.mlir")
    verify(m)
    return m


def fails(text):
    """(line, message) of the verifier error; parsing must succeed."""
    m = parse_module(text, "v.mlir")
    with pytest.raises(DiagnosticError) as e:
        verify(m)
    pos = e.value.diagnostic.position()
    assert pos is not None and pos.file == "v.mlir"
    return pos.line, str(e.value)


# -- shardings -----------------------------------------------------------------------------

S5 = "#shard<@mesh, [S(5), R]>"
S5_MSG = "placement S(5) on mesh axis 'dp' is out of range for rank-2 tensor tensor<8x16xf32>"


def test_shard_out_of_range_on_annotate():
    line, msg = fails(func(f"  %0 = shard.annotate %a {{sharding = {S5}}} : tensor<8x16xf32>\n  func.return"))
    assert line == 3 and msg == "'shard.annotate' op sharding: " + S5_MSG


def test_shard_out_of_range_on_func_arg_and_result():
    line, msg = fails(func("  func.return", args=f"%a: tensor<8x16xf32> {{shard.sharding = {S5}}}"))
    assert line == 2 and msg == "'func.func' op 'shard.sharding' of argument #0: " + S5_MSG
    line, msg = fails(func("  func.return %a : tensor<8x16xf32>",
                           results=f" -> (tensor<8x16xf32> {{shard.sharding = {S5}}})"))
    assert line == 2 and msg == "'func.func' op 'shard.sharding' of result #0: " + S5_MSG


def test_shard_out_of_range_on_result_attribute():
    line, msg = fails(func(f"  %0 = tensor.neg %a {{shard.sharding = [{S5}]}} : tensor<8x16xf32>\n  func.return"))
    assert line == 3 and msg == "'tensor.neg' op 'shard.sharding' of result #0: " + S5_MSG


def test_result_sharding_shape_of_attribute():
    r = "#shard<@mesh, [R, R]>"
    line, msg = fails(func(f"  %0 = tensor.neg %a {{shard.sharding = [{r}, {r}]}} : tensor<8x16xf32>\n  func.return"))
    assert msg == "'tensor.neg' op 'shard.sharding' has 2 entries for 1 results"
    line, msg = fails(func(f"  %0 = tensor.neg %a {{shard.sharding = {r}}} : tensor<8x16xf32>\n  func.return"))
    assert msg == "'tensor.neg' op 'shard.sharding' must be an array of #shard<...> attributes"


def test_sharding_on_missing_mesh_and_wrong_axis_count():
    line, msg = fails(func("  %0 = shard.annotate %a {sharding = #shard<@nope, [R, R]>} : tensor<8x16xf32>\n"
                           "  func.return"))
    assert msg == "'shard.annotate' op sharding: sharding refers to unknown mesh '@nope'"
    line, msg = fails(func("  func.return", args="%a: tensor<8x16xf32> {shard.sharding = #shard<@gone, [R]>}"))
    assert msg.startswith("'func.func' op 'shard.sharding' of argument #0: sharding refers to unknown mesh")
    line, msg = fails(func("  %0 = shard.annotate %a {sharding = #shard<@mesh, [R]>} : tensor<8x16xf32>\n"
                           "  func.return"))
    assert "has 1 placements but mesh '@mesh' has 2 axes" in msg


def test_redistribute():
    ok(func("  %0 = shard.redistribute %a {from = #shard<@mesh, [S(0), S(1)]>, "
            "to = #shard<@mesh, [R, P(sum)]>} : tensor<8x16xf32>\n  func.return"))
    text = MESH + 'shard.mesh @m2 = <["x" = 2, "y" = 2]>\n' + \
        "func.func @f(%a: tensor<8x16xf32>) {\n  %0 = shard.redistribute %a {from = #shard<@mesh, [R, R]>, " \
        "to = #shard<@m2, [R, R]>} : tensor<8x16xf32>\n  func.return\n}\n"
    line, msg = fails(text)
    assert line == 4 and msg.startswith("'shard.redistribute' op 'from' is on mesh '@mesh' but 'to' is on '@m2'")
    line, msg = fails(func("  %0 = shard.redistribute %a {from = #shard<@mesh, [R, R]>, "
                           "to = #shard<@mesh, [R, S(2)]>} : tensor<8x16xf32>\n  func.return"))
    assert msg.startswith("'shard.redistribute' op 'to' sharding: placement S(2) on mesh axis 'tp'")


# -- meshes and symbols --------------------------------------------------------------------

def test_mesh_rules():
    assert fails('shard.mesh @m = <["x" = 0]>\n') == \
        (1, "'shard.mesh' op mesh axis 'x' has size 0; sizes must be positive")
    assert fails('shard.mesh @m = <["x" = 2, "y" = -1]>\n')[1].endswith("has size -1; sizes must be positive")
    assert fails('shard.mesh @m = <["x" = 2, "x" = 2]>\n') == \
        (1, "'shard.mesh' op duplicate mesh axis name 'x'")
    assert fails('shard.mesh @m = <["x" = 2]>\nshard.mesh @m = <["y" = 2]>\n') == \
        (2, "'shard.mesh' op redefinition of symbol '@m'")
    assert fails('"shard.mesh"() {axes = ["x"], shape = [2, 2], sym_name = "m"} : () -> ()\n')[1] == \
        "'shard.mesh' op has 1 axis names but 2 sizes"
    assert fails('"shard.mesh"() {axes = [1], shape = [2], sym_name = "m"} : () -> ()\n')[1] == \
        "'shard.mesh' op 'axes' must be an array of strings"
    assert fails('"shard.mesh"() {axes = ["x"], sym_name = "m"} : () -> ()\n')[1] == \
        "'shard.mesh' op requires attribute 'shape'"
    m = ok(MESH)
    mesh = m.body.ops[0]
    assert mesh.axis_names == ("dp", "tp") and mesh.shape == (2, 4) and mesh.num_devices == 8
    assert mesh.axis_size("tp") == 4


def test_func_call():
    base = "func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : tensor<4xf32>\n}\n"
    ok(base + "func.func @f(%a: tensor<4xf32>) {\n  %0 = func.call %a {callee = @g} : tensor<4xf32>\n"
       "  func.return\n}\n")
    line, msg = fails(base + "func.func @f(%a: tensor<8xf32>) {\n  %0 = func.call %a {callee = @g} : "
                      "tensor<8xf32>\n  func.return\n}\n")
    assert line == 5 and msg.startswith("'func.call' op types (tensor<8xf32>) -> tensor<8xf32> do not match")
    assert fails("func.func @f(%a: tensor<4xf32>) {\n  %0 = func.call %a {callee = @nope} : tensor<4xf32>\n"
                 "  func.return\n}\n") == (2, "'func.call' op '@nope' does not reference a valid function")


# -- comm ops ------------------------------------------------------------------------------

def comm(op_text, args="%a: tensor<8x16xf32>"):
    return func(f"  %0 = {op_text}\n  func.return", args=args)


def test_all_gather_result_must_be_gathered_shape():
    line, msg = fails(comm('comm.all_gather %a {axis = "tp", dim = 0, mesh = @mesh} : '
                           "(tensor<8x16xf32>) -> tensor<16x16xf32>"))
    assert line == 3 and msg == ("'comm.all_gather' op operand type tensor<8x16xf32> is not a chunk of "
                                 "tensor<16x16xf32> along dim 0 over 4 ranks (expected tensor<4x16xf32>)")
    ok(comm('comm.all_gather %a {axis = "tp", dim = 0, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<32x16xf32>'))
    ok(comm('comm.all_gather %a {axis = "dp", dim = 1, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<8x32xf32>'))
    msg = fails(comm('comm.all_gather %a {axis = "tp", dim = 0, mesh = @mesh} : '
                     "(tensor<8x16xf32>) -> tensor<32x8xf32>"))[1]
    assert "is not a chunk of tensor<32x8xf32>" in msg


@pytest.mark.parametrize("local,good", [(4, True), (1, True), (3, False), (13, False), (2, False)])
def test_all_gather_accepts_uneven_torch_chunk_pieces(local, good):
    text = comm('comm.all_gather %a {axis = "tp", dim = 0, mesh = @mesh} : '
                f"(tensor<{local}x2xf32>) -> tensor<13x2xf32>", args=f"%a: tensor<{local}x2xf32>")
    if good:
        ok(text)
    else:
        msg = fails(text)[1]
        assert "(expected tensor<1x2xf32> or tensor<4x2xf32>)" in msg


def test_slice_and_reduce_scatter_shapes():
    ok(comm('comm.all_slice %a {axis = "tp", dim = 1, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<8x4xf32>'))
    msg = fails(comm('comm.all_slice %a {axis = "tp", dim = 1, mesh = @mesh} : '
                     "(tensor<8x16xf32>) -> tensor<8x8xf32>"))[1]
    assert msg.startswith("'comm.all_slice' op result type tensor<8x8xf32> is not a chunk of tensor<8x16xf32>")
    ok(comm('comm.reduce_scatter %a {axis = "dp", dim = 0, mesh = @mesh, op = "sum"} : '
            "(tensor<8x16xf32>) -> tensor<4x16xf32>"))
    msg = fails(comm('comm.reduce_scatter %a {axis = "dp", dim = 0, mesh = @mesh, op = "sum"} : '
                     "(tensor<8x16xf32>) -> tensor<8x16xf32>"))[1]
    assert msg.startswith("'comm.reduce_scatter' op result type tensor<8x16xf32> is not a chunk")
    msg = fails(comm('comm.reduce_scatter %a {axis = "dp", dim = 2, mesh = @mesh, op = "sum"} : '
                     "(tensor<8x16xf32>) -> tensor<4x16xf32>"))[1]
    assert msg == "'comm.reduce_scatter' op dim 2 is out of range for rank-2 tensor"
    msg = fails(comm('comm.all_slice %a {axis = "tp", dim = 0, mesh = @mesh} : '
                     "(tensor<8x16xf32>) -> tensor<2x16xf16>"))[1]
    assert msg == "'comm.all_slice' op element types differ: f32 vs f16"


def test_all_reduce_and_all_to_all():
    ok(comm('comm.all_reduce %a {axes = ["dp", "tp"], mesh = @mesh, op = "max"} : tensor<8x16xf32>'))
    assert fails(comm('comm.all_reduce %a {axes = ["tp"], mesh = @mesh, op = "prod"} : tensor<8x16xf32>'))[1] \
        == "'comm.all_reduce' op 'op' must be one of sum, avg, max, min"
    assert fails(comm('comm.all_reduce %a {axes = ["tp", "tp"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>'))[1] \
        == "'comm.all_reduce' op 'axes' names an axis twice"
    assert fails(comm('comm.all_reduce %a {axes = [], mesh = @mesh, op = "sum"} : tensor<8x16xf32>'))[1] \
        == "'comm.all_reduce' op 'axes' must be a non-empty array of axis names"
    ok(comm('comm.all_to_all %a {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1} : '
            "(tensor<8x16xf32>) -> tensor<32x4xf32>"))
    msg = fails(comm('comm.all_to_all %a {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1} : '
                     "(tensor<8x16xf32>) -> tensor<32x16xf32>"))[1]
    assert msg.startswith("'comm.all_to_all' op result type tensor<32x16xf32> is not operand tensor<8x16xf32> "
                          "split along dim 1 and gathered along dim 0 over 4 ranks")


@pytest.mark.parametrize("op_text,name", [
    ('comm.all_gather %a {axis = "zz", dim = 0, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<32x16xf32>',
     "comm.all_gather"),
    ('comm.all_slice %a {axis = "zz", dim = 0, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<2x16xf32>',
     "comm.all_slice"),
    ('comm.all_reduce %a {axes = ["tp", "zz"], mesh = @mesh, op = "sum"} : tensor<8x16xf32>',
     "comm.all_reduce"),
    ('comm.reduce_scatter %a {axis = "zz", dim = 0, mesh = @mesh, op = "sum"} : '
     "(tensor<8x16xf32>) -> tensor<2x16xf32>", "comm.reduce_scatter"),
    ('comm.all_to_all %a {axis = "zz", concat_dim = 0, mesh = @mesh, split_dim = 1} : '
     "(tensor<8x16xf32>) -> tensor<32x4xf32>", "comm.all_to_all"),
])
def test_comm_ops_naming_a_missing_mesh_axis(op_text, name):
    line, msg = fails(comm(op_text))
    assert line == 3 and msg == f"'{name}' op mesh '@mesh' has no axis 'zz' (axes: dp, tp)"


def test_comm_op_naming_a_missing_mesh():
    msg = fails(comm('comm.all_reduce %a {axes = ["tp"], mesh = @zz, op = "sum"} : tensor<8x16xf32>'))[1]
    assert msg == "'comm.all_reduce' op refers to unknown mesh '@zz'"
    msg = fails(comm('comm.all_gather %a {axis = 3, dim = 0, mesh = @mesh} : '
                     "(tensor<8x16xf32>) -> tensor<32x16xf32>"))[1]
    assert msg == "'comm.all_gather' op attribute 'axis' must be a string, got 3"


# -- types, structure, dominance -------------------------------------------------------------

def test_result_type_disagrees_with_inferred_type():
    text = ("func.func @f(%a: tensor<4xf32>) {\n"
            "  %0 = tensor.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>\n  func.return\n}\n")
    assert fails(text) == (2, "'tensor.add' op result type tensor<8xf32> does not match the inferred type "
                              "tensor<4xf32>")
    text = ("func.func @f() {\n  %0 = tensor.constant {value = dense<1.0> : tensor<4xf32>} : tensor<5xf32>\n"
            "  func.return\n}\n")
    assert "'tensor.constant' op result type tensor<5xf32> does not match the inferred type" in fails(text)[1]


def test_generic_form_structure_counts():
    text = ('func.func @f(%a: tensor<4xf32>) {\n  %0 = "tensor.neg"(%a, %a) : (tensor<4xf32>, tensor<4xf32>)'
            " -> tensor<4xf32>\n  func.return\n}\n")
    assert fails(text) == (2, "'tensor.neg' op expected 1 operands, but found 2")
    text = ('func.func @f(%a: tensor<4xf32>) {\n  %0:2 = "tensor.neg"(%a) : (tensor<4xf32>)'
            " -> (tensor<4xf32>, tensor<4xf32>)\n  func.return\n}\n")
    assert fails(text) == (2, "'tensor.neg' op expected 1 results, but found 2")
    text = 'func.func @f() {\n  "func.return"() ({\n  }) : () -> ()\n}\n'
    assert fails(text) == (2, "'func.return' op expected 0 regions, but found 1")


def test_dominance_use_before_def():
    # the parser resolves names eagerly, so build the violation by moving an op
    m = parse_module("func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %a : tensor<4xf32>\n"
                     "  %1 = tensor.exp %0 : tensor<4xf32>\n  func.return\n}\n", "v.mlir")
    body = m.body.ops[0].body
    exp = body.ops[1]
    body.remove(exp)
    body.insert(0, exp)
    with pytest.raises(DiagnosticError) as e:
        verify(m)
    assert str(e.value) == ("'tensor.exp' op operand #0 does not dominate this use "
                            "(it is defined later by 'tensor.neg')")
    assert e.value.diagnostic.position().line == 3
    # a value whose defining op left the block is not visible at all
    neg = body.ops[1]
    body.remove(neg)
    with pytest.raises(DiagnosticError, match=r"'tensor.exp' op operand #0 is not visible here"):
        verify(m)


def test_func_return_type_mismatch():
    assert fails("func.func @f(%a: tensor<4xf32>) -> tensor<8xf32> {\n  func.return %a : tensor<4xf32>\n}\n") \
        == (2, "'func.return' op has 1 operands of types (tensor<4xf32>) but the enclosing function returns "
               "(tensor<8xf32>)")
    assert fails("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  func.return\n}\n")[1].startswith(
        "'func.return' op has 0 operands")
    assert fails("func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %a : tensor<4xf32>\n}\n") == \
        (1, "'func.func' op body must end with 'func.return'")
    assert fails("func.return\n") == (1, "'func.return' op expects parent op 'func.func'")
    text = ('"func.func"() ({\n^bb0(%a: tensor<8xf32>):\n  "func.return"() : () -> ()\n})'
            ' {function_type = (tensor<4xf32>) -> (), sym_name = "f"} : () -> ()\n')
    assert fails(text)[1].startswith("'func.func' op entry block argument types (tensor<8xf32>) do not match")


def test_terminator_must_be_last():
    text = ("func.func @f(%a: tensor<4xf32>) {\n"
            '  "func.return"() : () -> ()\n  %0 = tensor.neg %a : tensor<4xf32>\n  func.return\n}\n')
    assert fails(text) == (2, "'func.return' op must be the last operation in the parent block")


# -- kernel.fused ---------------------------------------------------------------------------

def fused(region_body, operands="%a", types="tensor<4xf32>", block_args="%x: tensor<4xf32>", args=None):
    args = args or "%a: tensor<4xf32>"
    return (MESH + f"func.func @f({args}) {{\n  %0 = kernel.fused {operands} : {types} {{\n"
            f"  ^bb0({block_args}):\n{region_body}\n  }}\n  func.return\n}}\n")


def test_kernel_fused_valid():
    ok(fused("    %y = tensor.exp %x : tensor<4xf32>\n    kernel.yield %y : tensor<4xf32>"))


def test_kernel_fused_yield_mismatch():
    line, msg = fails(fused("    kernel.yield %x : tensor<4xf32>", types="(tensor<4xf32>) -> tensor<8xf32>"))
    assert line == 5 and msg == ("'kernel.yield' op yields (tensor<4xf32>) but the enclosing 'kernel.fused' "
                                 "returns (tensor<8xf32>)")


def test_kernel_fused_region_argument_mismatch():
    line, msg = fails(fused("    kernel.yield %x : tensor<8xf32>", types="(tensor<4xf32>) -> tensor<8xf32>",
                            block_args="%x: tensor<8xf32>"))
    assert line == 3 and msg == ("'kernel.fused' op region arguments (tensor<8xf32>) must match the operand "
                                 "types (tensor<4xf32>)")


def test_kernel_fused_needs_a_yield():
    line, msg = fails(fused("    %y = tensor.exp %x : tensor<4xf32>"))
    assert line == 3 and msg == "'kernel.fused' op region must end with 'kernel.yield'"
    assert fails("kernel.yield\n") == (1, "'kernel.yield' op expects parent op 'kernel.fused'")


def test_non_tensor_op_inside_kernel_fused():
    line, msg = fails(fused('    %y = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : '
                            "tensor<4xf32>\n    kernel.yield %y : tensor<4xf32>"))
    assert line == 5 and msg == "'comm.all_reduce' op is not allowed inside 'kernel.fused' (only 'tensor' ops)"


# -- tensor op rules -------------------------------------------------------------------------

def one(op_line, args="%a: tensor<8x16xf32>"):
    return f"func.func @f({args}) {{\n  {op_line}\n  func.return\n}}\n"


@pytest.mark.parametrize("op_line,args,message", [
    ("%0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>",
     "%a: tensor<8x16xf32>, %b: tensor<8x4xf32>",
     "'tensor.matmul' op contracting dims differ: 16 (lhs dim 1) vs 8 (rhs dim 0)"),
    ("%0 = tensor.matmul %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8xf32>",
     "%a: tensor<8x16xf32>, %b: tensor<16xf32>",
     "'tensor.matmul' op operands must have rank >= 2, got tensor<8x16xf32> and tensor<16xf32>"),
    ("%0 = tensor.matmul %a, %b : (tensor<2x8x16xf32>, tensor<3x16x4xf32>) -> tensor<2x8x4xf32>",
     "%a: tensor<2x8x16xf32>, %b: tensor<3x16x4xf32>",
     "'tensor.matmul' op shapes [2] and [3] are not broadcast-compatible"),
    ("%0 = tensor.reshape %a : (tensor<8x16xf32>) -> tensor<8x15xf32>", None,
     "'tensor.reshape' op cannot reshape tensor<8x16xf32> (128 elements) to tensor<8x15xf32> (120 elements)"),
    ("%0 = tensor.reshape %a : (tensor<8x16xf32>) -> tensor<128xf16>", None,
     "'tensor.reshape' op element types differ: f32 vs f16"),
    ("%0 = tensor.permute %a {perm = [0, 0]} : (tensor<8x16xf32>) -> tensor<8x8xf32>", None,
     "'tensor.permute' op perm entry [0, 0] repeats a dim"),
    ("%0 = tensor.permute %a {perm = [1]} : (tensor<8x16xf32>) -> tensor<16xf32>", None,
     "'tensor.permute' op perm [1] has 1 entries for a rank-2 tensor"),
    ("%0 = tensor.permute %a {perm = [2, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>", None,
     "'tensor.permute' op perm entry 2 is out of range for a rank-2 tensor"),
    ("%0 = tensor.sum %a {dims = [2]} : (tensor<8x16xf32>) -> tensor<8x16xf32>", None,
     "'tensor.sum' op reduction dim 2 is out of range for a rank-2 tensor"),
    ("%0 = tensor.sum %a {dims = [-1]} : (tensor<8x16xf32>) -> tensor<8xf32>", None,
     "'tensor.sum' op reduction dim -1 is out of range for a rank-2 tensor"),
    ("%0 = tensor.sum %a {dims = [1, 1]} : (tensor<8x16xf32>) -> tensor<8xf32>", None,
     "'tensor.sum' op reduction dim [1, 1] repeats a dim"),
    ("%0 = tensor.sum %a {dims = 1} : (tensor<8x16xf32>) -> tensor<8xf32>", None,
     "'tensor.sum' op attribute 'dims' must be an array, got 1"),
    ("%0 = tensor.sum %a {dims = [true]} : (tensor<8x16xf32>) -> tensor<8xf32>", None,
     "'tensor.sum' op attribute 'dims' must be an array of integers"),
    ("%0 = tensor.sum %a : (tensor<8x16xf32>) -> tensor<8xf32>", None,
     "'tensor.sum' op requires attribute 'dims'"),
    ("%0 = tensor.sum %a {dims = [1], keepdim = 1} : (tensor<8x16xf32>) -> tensor<8xf32>", None,
     "'tensor.sum' op attribute 'keepdim' must be a boolean, got 1"),
    ("%0 = tensor.mean %a {dims = [0]} : (tensor<8x16xi32>) -> tensor<16xi32>", "%a: tensor<8x16xi32>",
     "'tensor.mean' op expects a floating-point tensor, got tensor<8x16xi32>"),
    ("%0 = tensor.exp %a : tensor<8x16xi32>", "%a: tensor<8x16xi32>",
     "'tensor.exp' op expects a floating-point tensor, got tensor<8x16xi32>"),
    ("%0 = tensor.add %a, %b : (tensor<8x16xf32>, tensor<8x16xi32>) -> tensor<8x16xf32>",
     "%a: tensor<8x16xf32>, %b: tensor<8x16xi32>",
     "'tensor.add' op operands have different element types: f32, i32"),
    ("%0 = tensor.mul %a, %b : (tensor<8x16xf32>, tensor<8xf32>) -> tensor<8x16xf32>",
     "%a: tensor<8x16xf32>, %b: tensor<8xf32>",
     "'tensor.mul' op shapes [8, 16] and [8] are not broadcast-compatible"),
    ("%0 = tensor.cast %a : (tensor<8x16xf32>) -> tensor<8xi32>", None,
     "'tensor.cast' op result tensor<8xi32> must have the shape of operand tensor<8x16xf32>"),
    ("%0 = tensor.broadcast %a : (tensor<8x16xf32>) -> tensor<8x3xf32>", None,
     "'tensor.broadcast' op cannot broadcast tensor<8x16xf32> to tensor<8x3xf32>"),
    ('%0 = "tensor.constant"() {value = 1} : () -> tensor<f32>', None,
     "'tensor.constant' op attribute 'value' must be a dense<...> attribute, got 1"),
])
def test_tensor_op_rules(op_line, args, message):
    line, msg = fails(one(op_line, args or "%a: tensor<8x16xf32>"))
    assert (line, msg) == (2, message)


def test_valid_tensor_ops_pass():
    ok(one("%0 = tensor.matmul %a, %b : (tensor<3x8x16xf32>, tensor<16x4xf32>) -> tensor<3x8x4xf32>",
           "%a: tensor<3x8x16xf32>, %b: tensor<16x4xf32>"))
    ok(one("%0 = tensor.sum %a {dims = [0, 1], keepdim = true} : (tensor<8x16xf32>) -> tensor<1x1xf32>"))
    ok(one("%0 = tensor.sum %a {dims = []} : tensor<8x16xf32>"))
    ok(one("%0 = tensor.broadcast %a : (tensor<8x16xf32>) -> tensor<2x8x16xf32>"))
    ok(one("%0 = tensor.add %a, %b : (tensor<8x1xf32>, tensor<16xf32>) -> tensor<8x16xf32>",
           "%a: tensor<8x1xf32>, %b: tensor<16xf32>"))
