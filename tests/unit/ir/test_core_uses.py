"""Use lists, mutation and structure of the SSA core (spmdc/ir/core.py)."""

import pytest

from spmdc.dialects.func import FuncOp, ReturnOp
from spmdc.dialects.kernel import FusedOp, YieldOp
from spmdc.dialects.tensor import AddOp, ExpOp, NegOp
from spmdc.ir import Block, DiagnosticError, Region, TensorType, parse_module, print_module, verify

T = TensorType((4,), "f32")


def uses(v):
    return sorted((u.owner.name, id(u.owner), u.index) for u in v.uses)


def make_func(n_args=2):
    f = FuncOp.build("f", [T] * n_args, [T])
    return f, f.body


def test_creating_ops_registers_uses():
    f, body = make_func()
    a, b = body.args
    add = body.append(AddOp.create([a, b]))
    add2 = body.append(AddOp.create([a, a]))
    assert [(u.owner, u.index) for u in a.uses] == [(add, 0), (add2, 0), (add2, 1)]
    assert [(u.owner, u.index) for u in b.uses] == [(add, 1)]
    assert a.users == [add, add2]  # each user once
    assert add.result.type == T and not add.result.has_uses()


def test_set_operand_moves_the_use():
    f, body = make_func()
    a, b = body.args
    add = body.append(AddOp.create([a, a]))
    add.set_operand(1, b)
    assert add.operands == (a, b)
    assert [(u.owner, u.index) for u in a.uses] == [(add, 0)]
    assert [(u.owner, u.index) for u in b.uses] == [(add, 1)]


def test_replace_all_uses_with():
    f, body = make_func()
    a, b = body.args
    n1 = body.append(NegOp.create([a]))
    n2 = body.append(AddOp.create([a, n1.result]))
    n3 = body.append(AddOp.create([a, a]))
    a.replace_all_uses_with(b)
    assert not a.uses
    assert n1.operands == (b,) and n2.operands == (b, n1.result) and n3.operands == (b, b)
    assert len(b.uses) == 4
    assert sorted((id(u.owner), u.index) for u in b.uses) == sorted(
        [(id(n1), 0), (id(n2), 0), (id(n3), 0), (id(n3), 1)])
    b.replace_all_uses_with(b)  # no-op
    assert len(b.uses) == 4


def test_drop_operands_and_set_operands():
    f, body = make_func()
    a, b = body.args
    add = body.append(AddOp.create([a, b]))
    add.drop_operands()
    assert add.operands == () and not a.uses and not b.uses
    add.set_operands([b, a])
    assert add.operands == (b, a)
    assert [(u.owner, u.index) for u in b.uses] == [(add, 0)]
    assert [(u.owner, u.index) for u in a.uses] == [(add, 1)]


def test_erase_refuses_while_results_are_used():
    f, body = make_func()
    a, _ = body.args
    n1 = body.append(NegOp.create([a]))
    n2 = body.append(NegOp.create([n1.result]))
    with pytest.raises(ValueError, match="still has uses"):
        n1.erase()
    assert n1.parent is body and len(a.uses) == 1  # nothing changed
    n2.erase()
    assert n2.parent is None and not n1.result.uses and body.ops == [n1]
    n1.erase()
    assert body.ops == [] and not a.uses


def test_erase_drops_uses_of_nested_ops():
    f, body = make_func()
    a, _ = body.args
    fused = FusedOp.create([a], result_types=[T], regions=[Region([Block([T])])])
    inner = fused.body
    neg = inner.append(NegOp.create([inner.args[0]]))
    inner.append(YieldOp.create([neg.result], result_types=[]))
    body.append(fused)
    assert len(a.uses) == 1 and len(inner.args[0].uses) == 1
    fused.erase()
    assert not a.uses and not inner.args[0].uses and not neg.result.uses


def test_clone_remaps_operands_and_keeps_original():
    f, body = make_func()
    a, b = body.args
    n1 = body.append(NegOp.create([a]))
    n1.result.name_hint = "x"
    add = body.append(AddOp.create([n1.result, b], attributes={"tag": 1}))
    mapping = {}
    c1 = n1.clone(mapping)
    c2 = add.clone(mapping)
    assert mapping[n1.result] is c1.result
    assert c2.operands == (c1.result, b)  # remapped through the mapping; b unmapped
    assert c1.result.name_hint == "x" and c2.attributes == {"tag": add.attributes["tag"]}
    assert c2.attributes is not add.attributes
    assert add.operands == (n1.result, b)  # original untouched
    assert [u.owner for u in c1.result.uses] == [c2]
    assert len(b.uses) == 2 and c1.parent is None


def test_clone_deep_copies_regions():
    m = parse_module("""
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %y = tensor.exp %x : tensor<4xf32>
    kernel.yield %y : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}""")
    f = m.body.ops[0]
    g = f.clone()
    assert print_module(g) == print_module(f)
    old_inner = list(f.walk())
    new_inner = list(g.walk())
    assert len(old_inner) == len(new_inner)
    assert not {id(o) for o in old_inner} & {id(o) for o in new_inner}
    # uses inside the clone refer to cloned values only
    new_fused = g.body.ops[0]
    assert new_fused.operands[0] is g.body.args[0]
    assert new_fused.body.ops[0].operands[0] is new_fused.body.args[0]
    assert len(f.body.args[0].uses) == 1


def test_block_insert_remove_index_of():
    f, body = make_func()
    a, _ = body.args
    n1 = NegOp.create([a])
    n2 = NegOp.create([a])
    n3 = NegOp.create([a])
    body.append(n1)
    body.append(n3)
    body.insert_before(n3, n2)
    assert body.ops == [n1, n2, n3]
    assert [body.index_of(o) for o in (n1, n2, n3)] == [0, 1, 2]
    n4 = body.insert_after(n1, ExpOp.create([a]))
    assert body.ops == [n1, n4, n2, n3] and n4.parent is body
    body.remove(n2)
    assert body.ops == [n1, n4, n3] and n2.parent is None
    with pytest.raises(ValueError, match="not in this block"):
        body.index_of(n2)
    n3.detach()
    assert body.ops == [n1, n4]
    body.insert(0, n3)
    assert body.ops[0] is n3


def test_block_arguments():
    b = Block([T, T])
    assert [a.index for a in b.args] == [0, 1]
    NegOp.create([b.args[1]])
    with pytest.raises(ValueError, match="still has uses"):
        b.erase_argument(1)
    b.erase_argument(0)
    assert len(b.args) == 1 and b.args[0].index == 0


def test_structure_links():
    m = parse_module("""
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kernel.fused %a : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %y = tensor.exp %x : tensor<4xf32>
    kernel.yield %y : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}""")
    f = m.body.ops[0]
    fused = f.body.ops[0]
    exp = fused.body.ops[0]
    assert exp.parent_op() is fused and fused.parent_op() is f and f.parent_op() is m
    assert list(exp.ancestors()) == [fused, f, m]
    assert exp.parent_of_type(FuncOp) is f
    assert f.is_ancestor_of(exp) and not exp.is_ancestor_of(f)
    assert isinstance(f.body.terminator, ReturnOp) and fused.body.terminator.name == "kernel.yield"
    assert exp.result.defining_op() is exp and exp.result.parent_block() is fused.body
    assert f.body.args[0].defining_op() is None


def test_walk_is_preorder_in_program_order():
    m = parse_module("""
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %a : tensor<4xf32>
  %1 = kernel.fused %0 : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %y = tensor.exp %x : tensor<4xf32>
    %z = tensor.relu %y : tensor<4xf32>
    kernel.yield %z : tensor<4xf32>
  }
  %2 = tensor.tanh %1 : tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
func.func @g() {
  func.return
}""")
    names = [o.name for o in m.walk()]
    assert names == ["builtin.module", "func.func", "tensor.neg", "kernel.fused", "tensor.exp",
                     "tensor.relu", "kernel.yield", "tensor.tanh", "func.return", "func.func",
                     "func.return"]
    seen = []
    m.walk(lambda op: seen.append(op.name))  # with a callback the walk runs eagerly
    assert seen == names


def test_verify_rejects_use_before_def_after_a_bad_move():
    m = parse_module("""
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %a : tensor<4xf32>
  %1 = tensor.exp %0 : tensor<4xf32>
  func.return %1 : tensor<4xf32>
}""", "d.mlir")
    verify(m)
    body = m.body.ops[0].body
    exp = body.ops[1]
    body.remove(exp)
    body.insert(0, exp)  # now uses %0 before it is defined
    with pytest.raises(DiagnosticError) as e:
        verify(m)
    msg = str(e.value)
    assert msg.startswith("'tensor.exp' op operand #0 does not dominate this use")
    assert "tensor.neg" in msg
    assert e.value.diagnostic.position().line == 4  # where exp was parsed


def test_verify_rejects_use_from_another_scope():
    m = parse_module("""
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  func.return %a : tensor<4xf32>
}
func.func @g(%b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %b : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}""")
    f, g = m.body.ops
    g.body.ops[0].set_operand(0, f.body.args[0])
    with pytest.raises(DiagnosticError, match=r"'tensor.neg' op operand #0 is not visible here"):
        verify(m)


def test_verify_rejects_stale_parent_link():
    m = parse_module("""
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %a : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}""")
    m.body.ops[0].body.ops[0].parent = None
    with pytest.raises(DiagnosticError, match="stale parent link"):
        verify(m)
