"""Reference interpreter: runs an spmdc function op by op with torch eager ops.

    module = parse_module(text)
    (y,) = interpret(module, [x, w])            # positional, in argument order
    (y,) = interpret(module, {"x": x, "fc.weight": w})   # by name hint or spmdc.param

Every op runs through its ``reference`` — the evaluation of the same torch expression
the generated code contains (:mod:`spmdc.dialects.pyexpr`), so the interpreter and the
codegen share one semantics. On global programs ``shard.annotate``/``shard.redistribute``
do not change values. A per-rank program additionally needs ``comm``, the rank's
collectives (:class:`spmdc.runtime.collectives.Collectives`) for ``comm`` ops.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any

from spmdc.dialects.attrs import PARAM_ATTR
from spmdc.ir.core import Operation, Value
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.symbols import lookup_symbol


class Interpreter:
    def __init__(self, comm: Any = None):
        self.comm = comm

    def call(self, module: Operation, func_name: str, args: Sequence[Any]) -> list[Any]:
        from spmdc.runtime.suspended import run_whole

        gen = self.steps(module, func_name, args)
        try:
            next(gen)
        except StopIteration as stop:
            return list(stop.value)
        return run_whole(gen)   # (it suspended: refused)

    def steps(self, module: Operation, func_name: str,
              args: Sequence[Any]) -> Generator[list[Any], list[Any], list[Any]]:
        """Run ``@func_name`` as a generator: at ``func.suspend`` it yields the operands' values and
        takes the results' values (:mod:`spmdc.runtime.suspended`); returns the function's results."""
        from spmdc.dialects.func import FuncOp

        func = lookup_symbol(module, func_name)
        if not isinstance(func, FuncOp):
            raise DiagnosticError(f"no function '@{func_name}' in the module", module.location)
        if len(args) != len(func.args):
            raise DiagnosticError(f"'@{func_name}' takes {len(func.args)} arguments, got {len(args)}",
                                  func.location)
        env: dict[Value, Any] = dict(zip(func.args, args))
        for op in func.body.ops:
            if op.name == "func.suspend":
                got = yield [env[v] for v in op.operands]
                env.update(zip(op.results, got))
                continue
            if op.has_trait("Terminator"):
                return [env[v] for v in op.operands]
            for r, t in zip(op.results, self.run_op(module, op, [env[v] for v in op.operands])):
                env[r] = t
        return []

    def run_block(self, module: Operation, block, env: dict[Value, Any]) -> list[Any]:
        for op in block.ops:
            if op.has_trait("Terminator"):
                return [env[v] for v in op.operands]
            ins = [env[v] for v in op.operands]
            outs = self.run_op(module, op, ins)
            for r, t in zip(op.results, outs):
                env[r] = t
        return []

    def run_op(self, module: Operation, op: Operation, ins: list[Any]) -> list[Any]:
        if op.name == "kernel.fused":
            inner = dict(zip(op.body.args, ins))
            return self.run_block(module, op.body, inner)
        if op.name == "func.call":
            return self.call(module, op.attributes["callee"].name, ins)  # type: ignore[attr-defined]
        ref = getattr(op, "reference", None)
        if ref is None:
            raise op.emit_error("has no torch implementation")
        out = ref(*ins, comm=self.comm)
        return list(out) if len(op.results) != 1 else [out]


def bind_inputs(module: Operation, func_name: str, inputs: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
    """Order ``inputs`` as the function's arguments (by ``spmdc.param`` or name hint when a dict)."""
    if not isinstance(inputs, Mapping):
        return list(inputs)
    from spmdc.dialects.func import FuncOp

    func = lookup_symbol(module, func_name)
    assert isinstance(func, FuncOp)
    ordered = []
    for i, a in enumerate(func.args):
        p = func.arg_attrs(i).get(PARAM_ATTR)
        keys = [k for k in (getattr(p, "value", None), a.name_hint, f"arg{i}") if k]
        hit = next((k for k in keys if k in inputs), None)
        if hit is None:
            raise KeyError(f"no input given for argument #{i} ({', '.join(keys)})")
        ordered.append(inputs[hit])
    return ordered


def interpret(module: Operation, inputs: Sequence[Any] | Mapping[str, Any], func: str = "main",
              comm: Any = None) -> list[Any]:
    """Run ``@func`` and return its results as a list of tensors."""
    return Interpreter(comm).call(module, func, bind_inputs(module, func, inputs))
