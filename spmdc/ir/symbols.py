"""Symbol lookup: ops with a ``sym_name`` inside an op with the ``SymbolTable`` trait.

    shard.mesh @mesh = <["tp" = 4]>        // symbol "mesh"
    comm.all_reduce %x {mesh = @mesh, ...}  // refers to it
"""

from __future__ import annotations

from spmdc.ir.attributes import StringAttr
from spmdc.ir.core import Operation


def symbol_name(op: Operation) -> str | None:
    a = op.attributes.get("sym_name")
    return a.value if isinstance(a, StringAttr) else None


def nearest_symbol_table(op: Operation) -> Operation | None:
    if op.has_trait("SymbolTable"):
        return op
    for a in op.ancestors():
        if a.has_trait("SymbolTable"):
            return a
    return None


def lookup_symbol(from_op: Operation, name: str) -> Operation | None:
    """The op named ``@name`` in the nearest enclosing symbol table, or None."""
    table = nearest_symbol_table(from_op)
    while table is not None:
        for op in table.body.ops:
            if op.has_trait("Symbol") and symbol_name(op) == name:
                return op
        parent = table.parent_op()
        table = nearest_symbol_table(parent) if parent is not None else None
    return None
