"""``suspend-for-backward{first=F count=N}``: split a vjp program into its forward and backward
halves with one ``func.suspend``, so ``cm(x)``'s backward keeps the forward's activations
instead of recomputing them.

The inputs ``first .. first+count-1`` (the arguments without ``spmdc.param``, in order) are the
output gradients of ``cm(x)``'s vjp program (:mod:`spmdc.api.autograd_call`). Every op that
depends on them is backward; the suspension goes right before the first such op, after
hoisting what the function's early results (the model outputs and buffer updates: results with
no ``spmdc.loss`` / ``spmdc.grad_of`` / ``spmdc.grad_of_input`` / ``spmdc.grad_norm``) still
need, and before it everything the first half computed only for the second (a parameter's
backward re-gather, its constants) is sunk past it, so no collective is in flight and no
backward buffer is held while the program is paused. Random draws keep their order.

Before (``first=1 count=1``: ``%g`` is the output gradient)::

    %y = tensor.relu %x : tensor<4xf32>
    %h = comm.all_gather_start %w {axis = "dp", dim = 0, mesh = @mesh} : ...   // backward's
    %m = tensor.mul %y, %g : tensor<4xf32>
    ...
    func.return %loss, %y, %grad_w : ...

After::

    %y = tensor.relu %x : tensor<4xf32>
    %g_1 = func.suspend %y {results = [1]} : (tensor<4xf32>) -> tensor<4xf32>
    %h = comm.all_gather_start %w {axis = "dp", dim = 0, mesh = @mesh} : ...
    %m = tensor.mul %y, %g_1 : tensor<4xf32>
    ...

The pass runs last on a rank's program (after bucketing and scheduling; the driver adds it when
the job's ``vjp_pause`` option is set) and on the propagated global program that eager
execution runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.attrs import GRAD_NORM_ATTR, GRAD_OF_ATTR, GRAD_OF_INPUT_ATTR, LOSS_ATTR, PARAM_ATTR, RANK_ATTR
from spmdc.dialects.func import FuncOp, SuspendOp
from spmdc.ir.attributes import ArrayAttr, IntegerAttr
from spmdc.ir.core import Operation, OpResult, Value
from spmdc.ir.types import TensorType
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.layouts import SHARDING

_LATE_RESULTS = (LOSS_ATTR, GRAD_OF_ATTR, GRAD_OF_INPUT_ATTR, GRAD_NORM_ATTR)


def early_results(func: FuncOp) -> list[int]:
    """The results known before the backward: the model's outputs and buffer updates."""
    return [i for i in range(len(func.return_op.operands)) if not any(k in func.res_attrs(i) for k in _LATE_RESULTS)]


def suspend(func: FuncOp, first: int, count: int) -> SuspendOp:
    """Insert the function's ``func.suspend`` (see the module doc); returns it."""
    inputs = [a for i, a in enumerate(func.args) if PARAM_ATTR not in func.arg_attrs(i)]
    if first < 0 or count < 0 or first + count > len(inputs):
        raise func.emit_error(f"suspend-for-backward: inputs {first}..{first + count - 1} do not exist (the function "
                              f"has {len(inputs)} inputs)")
    resumed = inputs[first:first + count]
    ret = func.return_op
    early = early_results(func)
    ops = [op for op in func.body.ops if op is not ret]
    late: set[Value] = set(resumed)
    split = len(ops)
    for k, op in enumerate(ops):
        if any(v in late for v in op.operands):
            late.update(op.results)
            split = min(split, k)
    for i in early:
        if ret.operand(i) in late:
            raise func.emit_error(f"suspend-for-backward: result #{i} (a model output) depends on the inputs resumed "
                                  "after the suspension")
    needed = _producers([ret.operand(i) for i in early])
    before, after = ops[:split], ops[split:]
    hoisted = [op for op in after if op in needed]
    rest = [op for op in after if op not in needed]
    sunk = _sinkable(before, needed, set(rest) | {ret})
    kept = [op for op in before if op not in sunk]
    order = kept + hoisted
    random_before = [op for op in ops if op.has_trait("Random")]
    random_after = [op for op in order + [op for op in before if op in sunk] + rest if op.has_trait("Random")]
    if random_before != random_after:
        raise func.emit_error("suspend-for-backward: the forward's outputs need a random draw that comes after "
                              "a backward one; its order would change (compile with autograd_activations='recompute')")
    attrs = {"results": ArrayAttr(tuple(IntegerAttr(i) for i in early))}
    shardings = [func.arg_attrs(a.index).get(SHARDING) for a in resumed]
    if RANK_ATTR not in func.attributes and resumed and all(s is not None for s in shardings):
        attrs[SHARDING] = ArrayAttr(tuple(shardings))   # (a global program: the values' layouts, as the arguments')
    sus = SuspendOp([ret.operand(i) for i in early], [a.type for a in resumed], attrs, location=func.location)
    for a, r in zip(resumed, sus.results):
        r.name_hint = a.name_hint
        a.replace_all_uses_with(r)
    first_half = set(order)
    for op in order:   # (by construction: the sinking moves every start whose wait is in the second half)
        for r in op.results:
            if not isinstance(r.type, TensorType) and any(u.owner not in first_half for u in r.uses):
                raise func.emit_error(f"suspend-for-backward: '{op.name}' would leave {r.type} in flight while the "
                                      "program is paused")
    for op in ops:
        op.detach()
    for op in order + [sus] + [op for op in before if op in sunk] + rest:
        func.body.insert_before(ret, op)
    return sus


def _producers(values: list[Value]) -> set[Operation]:
    """Every op the values are computed from (in the function's block)."""
    seen: set[Operation] = set()
    todo = list(values)
    while todo:
        v = todo.pop()
        if isinstance(v, OpResult) and v.op not in seen:
            seen.add(v.op)
            todo.extend(v.op.operands)
    return seen


def _sinkable(before: list[Operation], needed: set[Operation], later: set[Operation]) -> set[Operation]:
    """Ops of the first half computed only for the second: no early result needs them, they draw
    no random numbers, and only the second half (or other such ops) reads their results."""
    sunk: set[Operation] = set()
    for op in reversed(before):
        if op in needed or op.has_trait("Random") or not op.results:
            continue
        users = [u.owner for r in op.results for u in r.uses]
        if users and all(u in later or u in sunk for u in users):
            sunk.add(op)
    return sunk


@dataclass
class SuspendForBackward(ModulePass):
    """Pause ``@main`` before its backward (see the module doc)."""

    name: ClassVar[str] = "suspend-for-backward"
    first: int = 0
    count: int = 1

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp) and op.sym_name == "main":
                suspend(op, self.first, self.count)


PASS = SuspendForBackward
