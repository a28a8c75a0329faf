"""The top-level ``module`` (``builtin.module``): part of the core IR, as in MLIR.

    module {
      shard.mesh @mesh = <["tp" = 2]>
      func.func @main(...) { ... }
    }

Generic form: ``"builtin.module"() ({ ... }) : () -> ()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spmdc.ir.attributes import StringAttr, format_attr_dict, format_symbol
from spmdc.ir.core import Block, Operation, Region
from spmdc.ir.location import UNKNOWN, Location
from spmdc.ir.registry import Dialect

if TYPE_CHECKING:
    from spmdc.ir.printer import Printer


class ModuleOp(Operation):
    """A container of symbols (meshes, functions); its body has no terminator.

    ``module @m { ... }``; generic form ``"builtin.module"() ({ ... }) : () -> ()``.
    """

    name = "builtin.module"
    num_operands = 0
    num_results = 0
    num_regions = 1
    optional_attrs = {"sym_name": StringAttr}
    traits = frozenset({"IsolatedFromAbove", "NoTerminator", "SymbolTable"})

    @classmethod
    def build_empty(cls, location: Location = UNKNOWN) -> ModuleOp:
        return cls([], [], {}, [Region([Block()])], location)

    def print_custom(self, p: Printer) -> None:
        p.write("module")
        attrs = dict(self.attributes)
        sym = attrs.pop("sym_name", None)
        if isinstance(sym, StringAttr):
            p.write(" @" + format_symbol(sym.value))
        if attrs:
            p.write(" attributes " + format_attr_dict(attrs))
        p.write(" ")
        p.print_region(self.regions[0], self, print_entry_label=False)

    def verify_(self) -> None:
        if len(self.regions[0].blocks) != 1 or self.body.args:
            raise self.emit_error("expects a single block without arguments")
        seen: dict[str, Operation] = {}
        for op in self.body.ops:
            sym = op.attributes.get("sym_name")
            if op.has_trait("Symbol") and isinstance(sym, StringAttr):
                if sym.value in seen:
                    raise op.emit_error(f"redefinition of symbol '@{sym.value}'")
                seen[sym.value] = op


DIALECT = Dialect("builtin", [ModuleOp])
