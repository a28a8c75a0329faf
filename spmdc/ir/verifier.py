"""IR verifier: structure, SSA dominance, types, attributes, then each op's ``verify_``.

Discardable attributes named ``<dialect>.<x>`` (``shard.sharding``) are checked by their
dialect's ``verify_op_attribute`` hook (:mod:`spmdc.ir.registry`).

Errors are :class:`DiagnosticError` naming the op in MLIR's wording::

    t.mlir:4:10: error: 'tensor.add' op result type tensor<4xf32> does not match the
    inferred type tensor<8xf32>
"""

from __future__ import annotations

from spmdc.ir.core import Block, InferError, Operation, UnregisteredOp, Value
from spmdc.ir.registry import dialect_of_attribute


def verify(root: Operation) -> None:
    """Verify ``root`` and everything nested in it; raise on the first error."""
    _verify_op(root, visible=set())


def _verify_op(op: Operation, visible: set[int]) -> None:
    _verify_structure(op)
    if not isinstance(op, UnregisteredOp):
        _verify_attrs(op)
        _verify_inferred_types(op)
        _verify_dialect_attrs(op)
        op.verify_()
    for region in op.regions:
        inner = set() if op.has_trait("IsolatedFromAbove") else set(visible)
        for block in region.blocks:
            _verify_block(block, op, inner)


def _verify_block(block: Block, owner: Operation, visible: set[int]) -> None:
    scope = set(visible)
    scope.update(id(a) for a in block.args)
    for i, op in enumerate(block.ops):
        if op.parent is not block:
            raise op.emit_error("has a stale parent link (IR was edited behind the rewriter)")
        for idx, v in enumerate(op.operands):
            if id(v) not in scope:
                raise op.emit_error(_dominance_message(op, idx, v))
        if op.has_trait("Terminator") and i != len(block.ops) - 1:
            raise op.emit_error("must be the last operation in the parent block")
        _verify_op(op, scope)
        scope.update(id(r) for r in op.results)
    if (owner.num_regions and not owner.has_trait("NoTerminator") and block.ops
            and not block.ops[-1].has_trait("Terminator") and not isinstance(owner, UnregisteredOp)):
        raise block.ops[-1].emit_error(f"is not a terminator; the region of '{owner.name}' must end with one")


def _dominance_message(op: Operation, idx: int, v: Value) -> str:
    d = v.defining_op()
    if d is not None and d.parent is op.parent:
        return f"operand #{idx} does not dominate this use (it is defined later by '{d.name}')"
    return f"operand #{idx} is not visible here (defined in another scope)"


def _verify_structure(op: Operation) -> None:
    cls = type(op)
    if isinstance(op, UnregisteredOp):
        return
    if cls.num_operands is not None and len(op.operands) != cls.num_operands:
        raise op.emit_error(f"expected {cls.num_operands} operands, but found {len(op.operands)}")
    if cls.num_results is not None and len(op.results) != cls.num_results:
        raise op.emit_error(f"expected {cls.num_results} results, but found {len(op.results)}")
    if len(op.regions) != cls.num_regions:
        raise op.emit_error(f"expected {cls.num_regions} regions, but found {len(op.regions)}")
    for i, r in enumerate(op.results):
        if r.op is not op or r.index != i:
            raise op.emit_error(f"result #{i} has a stale owner link")


def _verify_attrs(op: Operation) -> None:
    cls = type(op)
    for key, kind in cls.required_attrs.items():
        if key not in op.attributes:
            raise op.emit_error(f"requires attribute '{key}'")
        if not isinstance(op.attributes[key], kind):
            raise op.emit_error(f"attribute '{key}' must be {_kind_name(kind)}, got {op.attributes[key]}")
    for key, kind in cls.optional_attrs.items():
        if key in op.attributes and not isinstance(op.attributes[key], kind):
            raise op.emit_error(f"attribute '{key}' must be {_kind_name(kind)}, got {op.attributes[key]}")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        "IntegerAttr": "an integer", "FloatAttr": "a float", "BoolAttr": "a boolean",
        "StringAttr": "a string", "ArrayAttr": "an array", "DictAttr": "a dictionary",
        "SymbolRefAttr": "a symbol reference (@name)", "TypeAttr": "a type",
        "DenseAttr": "a dense<...> attribute", "UnitAttr": "a unit attribute",
    }
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k.__name__) or getattr(k, "description", k.__name__) for k in kinds)


def _verify_inferred_types(op: Operation) -> None:
    try:
        inferred = type(op).infer_result_types([v.type for v in op.operands], op.attributes)
    except InferError as e:
        raise op.emit_error(str(e)) from None
    if inferred is None:
        return
    actual = [r.type for r in op.results]
    if list(inferred) != actual:
        a = ", ".join(map(str, actual))
        b = ", ".join(map(str, inferred))
        raise op.emit_error(f"result type {a} does not match the inferred type {b}")


def _verify_dialect_attrs(op: Operation) -> None:
    """Attributes named ``<dialect>.<x>``: the owning dialect's hook checks them."""
    for name, attr in op.attributes.items():
        d = dialect_of_attribute(name)
        if d is not None and d.verify_op_attribute is not None:
            d.verify_op_attribute(op, name, attr)
