"""Printer of the textual IR; prints exactly what :mod:`spmdc.ir.parser` reads.

Ops print in their custom form unless ``generic=True``::

    %0 = tensor.add %a, %b : tensor<4xf32>                              // custom
    %0 = "tensor.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>  // generic

The default custom form of an op is
``op-name operands attr-dict? : types region*`` where ``types`` is one type when
every operand and result has it, the operand types for an op without results, and
a function type otherwise. ``func.func``, ``shard.mesh`` and ``builtin.module``
print their own forms (see their classes).

The generic form is also text that upstream MLIR parses (docs/ir.md, "Generic form and
upstream MLIR"): attributes print in their generic form (:meth:`Attribute.generic`), an
empty block keeps its ``^bb0:`` label, and a region that spmdc knows to be isolated from
above (``kernel.fused``) gets names that shadow no name of the enclosing regions, since
upstream, not knowing the op, reads every region as seeing the values around it.
"""

from __future__ import annotations

import io
import re

from spmdc.ir.attributes import Attribute, format_attr_dict, format_symbol, quote
from spmdc.ir.core import Block, Operation, Region, Value
from spmdc.ir.types import FunctionType

_HINT_OK = re.compile(r"^[A-Za-z_$.][\w$.-]*$", re.ASCII)  # MLIR's suffix-id, ASCII only


class Namer:
    """Gives every value a unique printed name within one isolated scope; ``reserved``: names it
    must not take (those an isolated region would shadow in the generic form)."""

    def __init__(self, parent: Namer | None = None, reserved: set[str] | None = None):
        self.names: dict[int, str] = {}
        self.used: set[str] = set(parent.used) if parent else set(reserved or ())
        self.parent = parent
        self.next_id = 0
        self.next_arg = 0

    def lookup(self, v: Value) -> str | None:
        n = self.names.get(id(v))
        if n is None and self.parent is not None:
            return self.parent.lookup(v)
        return n

    def assign(self, v: Value, is_arg: bool = False) -> str:
        hint = v.name_hint
        if hint and _HINT_OK.match(hint):
            name = hint
            n = 1
            while name in self.used:
                name = f"{hint}_{n}"
                n += 1
        elif is_arg:
            name = f"arg{self.next_arg}"
            self.next_arg += 1
            while name in self.used:
                name = f"arg{self.next_arg}"
                self.next_arg += 1
        else:
            name = str(self.next_id)
            self.next_id += 1
            while name in self.used:
                name = str(self.next_id)
                self.next_id += 1
        self.used.add(name)
        self.names[id(v)] = name
        return name


class Printer:
    def __init__(self, generic: bool = False, debuginfo: bool = False, indent_width: int = 2):
        self.generic = generic
        self.debuginfo = debuginfo
        self.indent_width = indent_width
        self.out = io.StringIO()
        self.indent = 0
        self.namer = Namer()
        self._stack: list[Namer] = []

    # -- helpers used by op classes' custom printers --------------------------------------
    def write(self, text: str) -> None:
        self.out.write(text)

    def value(self, v: Value) -> str:
        name = self.namer.lookup(v)
        if name is None:
            return "%<<UNKNOWN SSA VALUE>>"
        return "%" + name

    def use(self, v: Value) -> str:
        """A value as an operand: ``%x`` or ``%r#1`` for a result of a multi-result op."""
        op = v.defining_op()
        if op is not None and len(op.results) > 1:
            return f"{self.value(op.results[0])}#{v.index}"  # type: ignore[attr-defined]
        return self.value(v)

    def define(self, v: Value, is_arg: bool = False) -> str:
        return "%" + self.namer.assign(v, is_arg)

    def push_scope(self, isolated: bool) -> None:
        """Enter a region: isolated regions restart numbering, others continue it. In the
        generic form an isolated region still avoids the names visible around it."""
        self._stack.append(self.namer)
        if not isolated:
            self.namer = _ChildNamer(self.namer)
        else:
            self.namer = Namer(reserved=self.namer.used if self.generic else None)

    def pop_scope(self) -> None:
        inner, self.namer = self.namer, self._stack.pop()
        if isinstance(inner, _ChildNamer):
            self.namer.used |= inner.used
            self.namer.next_id = max(self.namer.next_id, inner.next_id)
            self.namer.next_arg = max(self.namer.next_arg, inner.next_arg)

    # -- ops -------------------------------------------------------------------------------
    def print_op(self, op: Operation) -> None:
        self.write(" " * self.indent)
        if op.results:
            if len(op.results) == 1:
                self.write(self.define(op.results[0]) + " = ")
            else:
                first = self.define(op.results[0])
                for r in op.results[1:]:
                    self.namer.names[id(r)] = "<multi>"
                self.write(f"{first}:{len(op.results)} = ")
        custom = getattr(op, "print_custom", None)
        if self.generic or type(op).__name__ == "UnregisteredOp":
            self.print_generic(op)
        elif custom is not None:
            custom(self)
        else:
            self.print_default_custom(op)
        if self.debuginfo:
            self.write(" " + str(op.location))
        self.write("\n")

    def operand_list(self, op: Operation) -> str:
        return ", ".join(self.use(v) for v in op.operands)

    def print_generic(self, op: Operation) -> None:
        self.write(f"{quote(op.name)}({self.operand_list(op)})")
        if op.regions:
            self.write(" (")
            for i, r in enumerate(op.regions):
                if i:
                    self.write(", ")
                self.print_region(r, op, print_entry_label=True)
            self.write(")")
        if op.attributes:
            self.write(" " + format_attr_dict(op.attributes, generic=self.generic))
        fn = FunctionType(tuple(v.type for v in op.operands), tuple(r.type for r in op.results))
        self.write(f" : {fn}")

    def print_default_custom(self, op: Operation, elided: tuple[str, ...] = ()) -> None:
        self.write(op.name)
        if op.operands:
            self.write(" " + self.operand_list(op))
        attrs = {k: v for k, v in op.attributes.items() if k not in elided}
        if attrs:
            self.write(" " + format_attr_dict(attrs))
        suffix = self.custom_type_suffix(op)
        if not suffix and op.regions:
            suffix = " : () -> ()"  # without ':' a region would read back as an attr-dict
        self.write(suffix)
        for r in op.regions:
            self.write(" ")
            self.print_region(r, op, print_entry_label=True)

    @staticmethod
    def custom_type_suffix(op: Operation) -> str:
        in_types = [v.type for v in op.operands]
        out_types = [r.type for r in op.results]
        if not in_types and not out_types:
            return ""
        if not out_types:
            return " : " + ", ".join(str(t) for t in in_types)
        every = in_types + out_types
        if all(t == every[0] for t in every):
            return f" : {every[0]}"
        return f" : {FunctionType(tuple(in_types), tuple(out_types))}"

    def print_region(self, region: Region, owner: Operation, print_entry_label: bool,
                     entry_args_printed: bool = False, new_scope: bool = True) -> None:
        if new_scope:
            self.push_scope(owner.has_trait("IsolatedFromAbove"))
        self.write("{\n")
        self.indent += self.indent_width
        for i, block in enumerate(region.blocks):
            if entry_args_printed and i == 0:
                pass
            elif print_entry_label and (block.args or i > 0 or len(region.blocks) > 1
                                        or (self.generic and not block.ops)):
                self.print_block_label(block, i)  # upstream reads '{ }' as a region of no block
            for op in block.ops:
                self.print_op(op)
        self.indent -= self.indent_width
        self.write(" " * self.indent + "}")
        if new_scope:
            self.pop_scope()

    def print_block_label(self, block: Block, index: int) -> None:
        args = ", ".join(f"{self.define(a, is_arg=True)}: {a.type}" for a in block.args)
        label = f"^bb{index}" + (f"({args})" if block.args else "")
        self.write(" " * max(self.indent - self.indent_width, 0) + label + ":\n")

    def attr_dict(self, attrs: dict[str, Attribute]) -> str:
        return format_attr_dict(attrs)


class _ChildNamer(Namer):
    """Scope of a region that sees the enclosing values (names stay unique overall)."""

    def __init__(self, parent: Namer):
        super().__init__(parent)
        self.next_id = parent.next_id
        self.next_arg = parent.next_arg


def print_module(module: Operation, generic: bool = False, debuginfo: bool = False) -> str:
    """The text of ``module`` (or any op) with a trailing newline."""
    p = Printer(generic=generic, debuginfo=debuginfo)
    p.print_op(module)
    return p.out.getvalue()


def op_to_string(op: Operation, generic: bool = False) -> str:
    return print_module(op, generic=generic).rstrip("\n")


__all__ = ["Printer", "print_module", "op_to_string", "format_symbol"]
