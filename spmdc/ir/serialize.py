"""A module as bytes that load back in milliseconds (for caches); the text form stays the reference.

    blob = dump_ir(module)            # bytes: a pickle of a flat form of the module
    same = load_ir(blob)              # an equal module: print_module(same) == print_module(module)
    blob = checked_dump(module, text) # the blob, or None unless it loads back printing exactly ``text``

Parsing a rank's program (74 kB of text for gpt2-tiny's training step) takes 0.12 s with lark, plus
0.1 s to build the grammar once per process; :func:`load_ir` of the same module takes about 5 ms.
The flat form lists each operation as its class, operand numbers (values are numbered in the order
they are defined: block arguments, then each op's results), result types and name hints,
attributes, location and nested regions, so pickling never recurses along use lists. Operations
are rebuilt as :meth:`~spmdc.ir.core.Operation.clone` rebuilds them (a class's ``__init__`` is
not called). The form depends on spmdc's IR classes: whoever stores it must key it by spmdc's
sources (the compile cache does) and keep the text to fall back on.
A module that uses a value before its definition (or one defined outside it) has no flat form
(:func:`dump_ir` raises ``ValueError``).
"""

from __future__ import annotations

import gc
import pickle
from typing import Any

from spmdc.ir.core import Block, Operation, Region, UnregisteredOp, Value

FORMAT = 1
_MAGIC = "spmdc-ir"


def dump_ir(module: Operation) -> bytes:
    """``module`` (with everything nested in it) as bytes for :func:`load_ir`."""
    ids: dict[int, int] = {}

    def define(v: Value) -> None:
        ids[id(v)] = len(ids)

    def operand(op: Operation, i: int, v: Value) -> int:
        n = ids.get(id(v))
        if n is None:
            raise ValueError(f"'{op.name}' operand #{i} is used before its definition or defined outside the "
                             "module: no flat form")
        return n

    def block(b: Block) -> tuple[Any, ...]:
        for a in b.args:
            define(a)
        return (tuple(a.type for a in b.args), tuple(a.name_hint for a in b.args), [one(op) for op in b.ops])

    def one(op: Operation) -> tuple[Any, ...]:
        operands = tuple(operand(op, i, v) for i, v in enumerate(op.operands))
        for r in op.results:
            define(r)
        return (type(op), op.name if type(op) is UnregisteredOp else None, operands,
                tuple(r.type for r in op.results), tuple(r.name_hint for r in op.results), op.attributes,
                op.location, tuple(tuple(block(b) for b in r.blocks) for r in op.regions))

    return pickle.dumps((_MAGIC, FORMAT, one(module)), protocol=pickle.HIGHEST_PROTOCOL)


def load_ir(blob: bytes) -> Operation:
    """The module :func:`dump_ir` wrote. Raises ``ValueError`` (or pickle's errors) for bytes it did not write."""
    was_enabled = gc.isenabled()
    gc.disable()   # many small objects, no cycles worth collecting (as parse_module)
    try:
        data = pickle.loads(blob)
        if not (isinstance(data, tuple) and len(data) == 3 and data[0] == _MAGIC):
            raise ValueError("not a module written by spmdc.ir.serialize.dump_ir")
        if data[1] != FORMAT:
            raise ValueError(f"a module in flat form {data[1]}, not {FORMAT}")
        values: list[Value] = []
        return _op(data[2], values)
    finally:
        if was_enabled:
            gc.enable()


def _op(form: tuple[Any, ...], values: list[Value]) -> Operation:
    cls, name, operands, types, hints, attributes, location, regions = form
    if not (isinstance(cls, type) and issubclass(cls, Operation)):
        raise ValueError(f"not an operation class: {cls!r}")
    op = cls.__new__(cls)
    Operation.__init__(op, [values[i] for i in operands], types, attributes, (), location, name=name)
    for r, hint in zip(op.results, hints):
        r.name_hint = hint
    values.extend(op.results)
    for blocks in regions:
        region = Region()
        op.add_region(region)
        for arg_types, arg_hints, ops in blocks:
            b = region.add_block(Block())
            for t, hint in zip(arg_types, arg_hints):
                values.append(b.add_argument(t, hint))
            for nested in ops:
                b.append(_op(nested, values))
    return op


def checked_dump(module: Operation, text: str, debuginfo: bool = True) -> bytes | None:
    """:func:`dump_ir` of ``module`` when it loads back printing exactly ``text``
    (``print_module(..., debuginfo=debuginfo)``), else None: nothing is kept that would not
    give the same program as parsing ``text``."""
    from spmdc.ir.printer import print_module

    try:
        blob = dump_ir(module)
        same = print_module(load_ir(blob), debuginfo=debuginfo) == text
    except (ValueError, TypeError, AttributeError, pickle.PicklingError, RecursionError):
        return None
    return blob if same else None
