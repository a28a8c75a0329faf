"""``func`` dialect ops: functions, returns and calls.

    func.func @main(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>},
                    %w: tensor<16x32xf32> {spmdc.param = "fc.weight"})
        -> (tensor<8x32xf32> {spmdc.loss}) {
      %0 = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
      func.return %0 : tensor<8x32xf32>
    }
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from spmdc.ir.attributes import (
    ArrayAttr,
    Attribute,
    DictAttr,
    StringAttr,
    SymbolRefAttr,
    TypeAttr,
    format_attr_dict,
    format_symbol,
)
from spmdc.ir.core import Block, Operation, Region
from spmdc.ir.location import UNKNOWN, Location
from spmdc.ir.registry import dialect_of_attribute
from spmdc.ir.symbols import lookup_symbol
from spmdc.ir.types import FunctionType, Type

if TYPE_CHECKING:
    from spmdc.ir.printer import Printer

_ELIDED = ("sym_name", "function_type", "arg_attrs", "res_attrs")


class FuncOp(Operation):
    """A function: one block whose arguments are the parameters, ending in ``func.return``.

    Argument/result attributes (``shard.sharding``, ``spmdc.param``, ``spmdc.grad_of``,
    ``spmdc.loss``) live in ``arg_attrs`` / ``res_attrs`` (arrays of dictionaries).

    ``func.func @f(%x: tensor<4xf32> {spmdc.param = "w"}) -> tensor<4xf32> { func.return %x : tensor<4xf32> }``
    """

    name = "func.func"
    num_operands = 0
    num_results = 0
    num_regions = 1
    required_attrs = {"sym_name": StringAttr, "function_type": TypeAttr}
    optional_attrs = {"arg_attrs": ArrayAttr, "res_attrs": ArrayAttr}
    traits = frozenset({"IsolatedFromAbove", "Symbol"})

    @classmethod
    def build(cls, sym_name: str, arg_types: Sequence[Type], result_types: Sequence[Type],
              arg_attrs: Sequence[dict[str, Attribute]] | None = None,
              res_attrs: Sequence[dict[str, Attribute]] | None = None,
              region: Region | None = None, location: Location = UNKNOWN) -> FuncOp:
        if region is None:
            region = Region([Block(arg_types)])
        attrs: dict[str, Attribute] = {
            "sym_name": StringAttr(sym_name),
            "function_type": TypeAttr(FunctionType(tuple(arg_types), tuple(result_types))),
        }
        op = cls([], [], attrs, [region], location)
        for i, d in enumerate(arg_attrs or []):
            for k, v in d.items():
                op.set_arg_attr(i, k, v)
        for i, d in enumerate(res_attrs or []):
            for k, v in d.items():
                op.set_res_attr(i, k, v)
        return op

    # -- accessors ---------------------------------------------------------------------
    @property
    def sym_name(self) -> str:
        return self.attributes["sym_name"].value  # type: ignore[attr-defined]

    @property
    def function_type(self) -> FunctionType:
        return self.attributes["function_type"].type  # type: ignore[attr-defined]

    @property
    def args(self):
        return self.body.args

    def _attrs_list(self, key: str, n: int) -> list[dict[str, Attribute]]:
        a = self.attributes.get(key)
        dicts = [d.as_dict() for d in a.values] if isinstance(a, ArrayAttr) else []  # type: ignore[attr-defined]
        return dicts + [{} for _ in range(n - len(dicts))]

    def _attrs_at(self, key: str, i: int) -> dict[str, Attribute]:
        """One entry (a fresh dict): O(size of that entry), not of the whole signature."""
        a = self.attributes.get(key)
        if isinstance(a, ArrayAttr) and i < len(a):
            return a.values[i].as_dict()  # type: ignore[attr-defined]
        return {}

    def arg_attrs(self, i: int) -> dict[str, Attribute]:
        return self._attrs_at("arg_attrs", i)

    def res_attrs(self, i: int) -> dict[str, Attribute]:
        return self._attrs_at("res_attrs", i)

    def _set(self, key: str, n: int, i: int, name: str, value: Attribute | None) -> None:
        a = self.attributes.get(key)
        entries = list(a.values) if isinstance(a, ArrayAttr) else []  # type: ignore[attr-defined]
        entries += [DictAttr(()) for _ in range(n - len(entries))]
        d = entries[i].as_dict()  # type: ignore[attr-defined]
        if value is None:
            d.pop(name, None)
        else:
            d[name] = value
        entries[i] = DictAttr.of(d)
        if any(e.entries for e in entries):  # type: ignore[attr-defined]
            self.attributes[key] = ArrayAttr(tuple(entries))
        else:
            self.attributes.pop(key, None)

    def set_arg_attr(self, i: int, name: str, value: Attribute | None) -> None:
        self._set("arg_attrs", len(self.function_type.inputs), i, name, value)

    def set_res_attr(self, i: int, name: str, value: Attribute | None) -> None:
        self._set("res_attrs", len(self.function_type.results), i, name, value)

    def set_function_type(self, fn: FunctionType) -> None:
        """Update the signature (after adding/removing arguments or results)."""
        old_in = [self.arg_attrs(i) for i in range(len(self.function_type.inputs))]
        old_out = [self.res_attrs(i) for i in range(len(self.function_type.results))]
        self.attributes["function_type"] = TypeAttr(fn)
        for key, old, n in (("arg_attrs", old_in, len(fn.inputs)), ("res_attrs", old_out, len(fn.results))):
            lst = (old + [{} for _ in range(n)])[:n]
            if any(lst):
                self.attributes[key] = ArrayAttr(tuple(DictAttr.of(d) for d in lst))
            else:
                self.attributes.pop(key, None)

    @property
    def return_op(self) -> ReturnOp:
        term = self.body.ops[-1] if self.body.ops else None
        assert isinstance(term, ReturnOp), "function does not end in func.return"
        return term

    # -- text ----------------------------------------------------------------------------
    def print_custom(self, p: Printer) -> None:
        fn = self.function_type
        p.write(f"func.func @{format_symbol(self.sym_name)}(")
        p.push_scope(isolated=True)
        args = []
        for i, a in enumerate(self.body.args):
            attrs = self.arg_attrs(i)
            text = f"{p.define(a, is_arg=True)}: {a.type}"
            args.append(text + (" " + format_attr_dict(attrs) if attrs else ""))
        p.write(", ".join(args) + ")")
        results = []
        for i, t in enumerate(fn.results):
            attrs = self.res_attrs(i)
            results.append(str(t) + (" " + format_attr_dict(attrs) if attrs else ""))
        if len(results) == 1 and not self.res_attrs(0):
            p.write(f" -> {results[0]}")
        elif results:
            p.write(" -> (" + ", ".join(results) + ")")
        extra = {k: v for k, v in self.attributes.items() if k not in _ELIDED}
        if extra:
            p.write(" attributes " + format_attr_dict(extra))
        p.write(" ")
        p.print_region(self.regions[0], self, print_entry_label=False, entry_args_printed=True,
                       new_scope=False)
        p.pop_scope()

    def verify_(self) -> None:
        fn = self.function_type
        region = self.regions[0]
        if len(region.blocks) != 1:
            raise self.emit_error("expects a single-block body")
        args = [a.type for a in self.body.args]
        if tuple(args) != fn.inputs:
            raise self.emit_error(f"entry block argument types ({', '.join(map(str, args))}) do not "
                                  f"match the function type {fn}")
        for key, n in (("arg_attrs", len(fn.inputs)), ("res_attrs", len(fn.results))):
            a = self.attributes.get(key)
            if a is not None:
                if not isinstance(a, ArrayAttr) or len(a) != n or not all(isinstance(d, DictAttr) for d in a):
                    raise self.emit_error(f"'{key}' must be an array of {n} dictionaries")
        if not self.body.ops or not isinstance(self.body.ops[-1], ReturnOp):
            raise self.emit_error("body must end with 'func.return'")
        self._verify_value_attributes()

    def _verify_value_attributes(self) -> None:
        """Argument/result attributes named ``<dialect>.<x>`` are checked by their dialect
        (``shard.sharding`` by ``shard``), as MLIR's ``verifyRegionArgAttribute`` does."""
        fn = self.function_type
        for i, t in enumerate(fn.inputs):
            for name, attr in self.arg_attrs(i).items():
                d = dialect_of_attribute(name)
                if d is not None and d.verify_arg_attribute is not None:
                    d.verify_arg_attribute(self, i, name, attr, t)
        for i, t in enumerate(fn.results):
            for name, attr in self.res_attrs(i).items():
                d = dialect_of_attribute(name)
                if d is not None and d.verify_result_attribute is not None:
                    d.verify_result_attribute(self, i, name, attr, t)


class ReturnOp(Operation):
    """``func.return %a, %b : tensor<4xf32>, tensor<f32>`` — types must match the function."""

    name = "func.return"
    num_results = 0
    traits = frozenset({"Terminator", "Pure"})

    def verify_(self) -> None:
        func = self.parent_op()
        if not isinstance(func, FuncOp):
            raise self.emit_error("expects parent op 'func.func'")
        want = func.function_type.results
        got = tuple(v.type for v in self.operands)
        if got != want:
            raise self.emit_error(f"has {len(got)} operands of types ({', '.join(map(str, got))}) but "
                                  f"the enclosing function returns ({', '.join(map(str, want))})")
        if func.body.ops[-1] is not self:
            raise self.emit_error("must be the last operation of its block")


class SuspendOp(Operation):
    """``%g = func.suspend %out {results = [1]} : (tensor<8x4xf32>) -> tensor<8x4xf32>``.

    The function pauses here: its caller receives the operands — the function's results
    ``results`` (their indices), known before the backward — and later resumes it with the
    values of this op's results, which replace arguments the first part did not read (the
    output gradients of ``cm(x)``'s vjp program). What the first part computed and the rest
    reads stays alive in between: the saved activations. Inserted by ``suspend-for-backward``
    (:mod:`spmdc.passes.suspend_for_backward`); at most one per function, never moved or erased
    by a pass (not ``Pure``).
    """

    name = "func.suspend"
    required_attrs = {"results": ArrayAttr}

    def verify_(self) -> None:
        func = self.parent_op()
        if not isinstance(func, FuncOp):
            raise self.emit_error("expects parent op 'func.func'")
        idx = [getattr(a, "value", None) for a in self.attributes["results"]]  # type: ignore[attr-defined]
        n = len(func.function_type.results)
        if len(idx) != len(self.operands) or not all(isinstance(i, int) and 0 <= i < n for i in idx):
            raise self.emit_error(f"'results' must give, for each of its {len(self.operands)} operands, the index of "
                                  f"a result of the function (0..{n - 1}), got {list(idx)}")
        ret = func.return_op
        for i, v in zip(idx, self.operands):
            if ret.operand(i) is not v:
                raise self.emit_error(f"operand for result #{i} is not the value the function returns there")
        if sum(1 for op in func.body.ops if isinstance(op, SuspendOp)) > 1:
            raise self.emit_error("a function may suspend at most once")


class CallOp(Operation):
    """``%r = func.call %x {callee = @f} : (tensor<4xf32>) -> tensor<4xf32>``."""

    name = "func.call"
    required_attrs = {"callee": SymbolRefAttr}

    def verify_(self) -> None:
        callee = self.attributes["callee"].name  # type: ignore[attr-defined]
        target = lookup_symbol(self, callee)
        if not isinstance(target, FuncOp):
            raise self.emit_error(f"'@{callee}' does not reference a valid function")
        fn = target.function_type
        ins = tuple(v.type for v in self.operands)
        outs = tuple(r.type for r in self.results)
        if ins != fn.inputs or outs != fn.results:
            raise self.emit_error(f"types {FunctionType(ins, outs)} do not match callee type {fn}")
