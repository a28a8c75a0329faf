"""spmdc.ir.serialize: a module's flat form loads back to a module that prints, verifies and
rewrites as the parsed one does; bytes it did not write, and modules it cannot write, are refused."""

import pickle
from pathlib import Path

import pytest

from spmdc.ir import parse_module, print_module, verify
from spmdc.ir.core import Block, Operation, Region
from spmdc.ir.serialize import checked_dump, dump_ir, load_ir

ALL_OPS = Path(__file__).with_name("all_ops.mlir")


@pytest.fixture(scope="module")
def module():
    return parse_module(ALL_OPS.read_text(), str(ALL_OPS))


def _uses(m: Operation) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """Every value's uses, as (defining op or block, index, [(user op name, operand index)])."""
    out = []
    for op in m.walk():
        for r in op.results:
            out.append((op.name, r.index, [(u.owner.name, u.index) for u in r.uses]))
        for region in op.regions:
            for b in region.blocks:
                for a in b.args:
                    out.append((f"^{op.name}", a.index, [(u.owner.name, u.index) for u in a.uses]))
    return out


def test_every_op_loads_back_printing_the_same_text_custom_generic_and_with_locations(module):
    again = load_ir(dump_ir(module))
    verify(again)
    for kw in ({}, {"generic": True}, {"debuginfo": True}):
        assert print_module(again, **kw) == print_module(module, **kw)
    assert [type(op) for op in again.walk()] == [type(op) for op in module.walk()]
    assert _uses(again) == _uses(module)   # use lists rebuilt, in the same order


def test_a_loaded_module_is_its_own_copy_and_can_be_rewritten(module):
    text = print_module(module)
    again = load_ir(dump_ir(module))
    assert not set(map(id, again.walk())) & set(map(id, module.walk()))
    first = next(op for op in again.walk() if op.parent is not None and op.results and op.results[0].uses)
    users = len(first.results[0].uses)
    clone = first.clone()
    first.parent.insert_before(first, clone)
    for r in first.results:   # the first used op's results replaced by a clone's: every user follows
        r.replace_all_uses_with(clone.results[r.index])
    assert all(not r.uses for r in first.results) and len(clone.results[0].uses) == users >= 1
    first.erase()
    verify(again)
    assert print_module(module) == text   # the original is untouched


def test_checked_dump_keeps_only_a_form_that_prints_as_the_text(module):
    text = print_module(module, debuginfo=True)
    blob = checked_dump(module, text)
    assert blob is not None and print_module(load_ir(blob), debuginfo=True) == text
    assert checked_dump(module, text + "// another text\n") is None


def test_a_value_from_outside_the_module_has_no_flat_form():
    outer = parse_module("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                         "  %0 = tensor.neg %a : tensor<4xf32>\n  func.return %0 : tensor<4xf32>\n}\n")
    neg = next(op for op in outer.walk() if op.name == "tensor.neg")
    inner = parse_module("func.func @g(%b: tensor<4xf32>) -> tensor<4xf32> {\n"
                         "  func.return %b : tensor<4xf32>\n}\n")
    ret = next(op for op in inner.walk() if op.name == "func.return")
    ret.set_operand(0, neg.result)   # a use of another module's value
    with pytest.raises(ValueError, match="operand #0 is used before its definition or defined outside"):
        dump_ir(inner)
    assert checked_dump(inner, print_module(inner)) is None


def test_bytes_it_did_not_write_are_refused(module):
    blob = dump_ir(module)
    with pytest.raises(ValueError, match="not a module written by spmdc.ir.serialize"):
        load_ir(pickle.dumps(("something", 1, ())))
    with pytest.raises(ValueError, match="flat form 99"):
        load_ir(pickle.dumps(("spmdc-ir", 99, ())))
    with pytest.raises(ValueError, match="not an operation class"):
        load_ir(pickle.dumps(("spmdc-ir", 1, (Region, None, (), (), (), {}, None, ()))))
    with pytest.raises(Exception):   # noqa: B017 - truncated: whatever pickle raises
        load_ir(blob[: len(blob) // 2])
    assert isinstance(load_ir(blob).body, Block)
