"""``sharding-propagation``: give every tensor value a layout, from the user's annotations.

Known layouts come from function argument/result ``shard.sharding`` attributes
(arguments without one are replicated), ``shard.annotate`` ops and any
``shard.sharding`` already on op results; they are never changed. A worklist then
decides the rest (details and the reasons in docs/passes.md):

1. forward, conflict-free: an op whose operands are all known takes the strategy that
   redistributes none of them; its results take that strategy's layouts;
2. backward, conflict-free: an op with known results or some known operands assigns its
   unknown values when the known ones select a single free strategy;
3. conflicts: the cheapest (α-β cost of the redistributions it needs) is resolved with
   its best strategy (:mod:`spmdc.sharding.strategy`), and 1-2 continue;
4. gradient results' annotated layouts come last; anything still unknown is replicated.

A value is only ever made ``Partial`` by its own producer. ``SPMDC_TRACE_PROPAGATION=1``
prints every decision.

Before::

    func.func @f(%x: tensor<8x16xf32> {shard.sharding = #shard<@m, [S(0)]>}, %w: tensor<16x4xf32>) -> tensor<8x4xf32> {
      %0 = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
      %1 = tensor.relu %0 : tensor<8x4xf32>

After::

      %0 = tensor.matmul %x, %w {shard.sharding = [#shard<@m, [S(0)]>]} : ...
      %1 = tensor.relu %0 {shard.sharding = [#shard<@m, [S(0)]>]} : tensor<8x4xf32>
"""

from __future__ import annotations

import heapq
import os
import sys
from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.func import FuncOp, ReturnOp
from spmdc.dialects.shard import AnnotateOp, RedistributeOp
from spmdc.ir.core import Operation, Value
from spmdc.dialects.shard import Replicate, ShardingAttr
from spmdc.ir.types import TensorType
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.layouts import SHARDING, Layout, func_mesh, layout_of, set_result_layouts
from spmdc.sharding.cost import INF
from spmdc.sharding.strategy import choose, rule_for
from spmdc.ir.diagnostics import DiagnosticError


def can_make_partial(v: Value, p: object) -> bool:
    """Whether ``v``'s producer can make it ``p`` from nothing (a zero constant is any Partial sum)."""
    prod = v.defining_op()
    return prod is not None and getattr(p, "op", None) in rule_for(prod).partial_results


def propagate_function(module: Operation, func: FuncOp) -> None:
    mesh = func_mesh(module, func)
    if mesh is None:
        return
    shape = mesh.shape
    replicated: Layout = tuple(Replicate() for _ in shape)
    known: dict[int, Layout] = {}
    values: dict[int, Value] = {}

    def set_(v: Value, lay: Layout) -> bool:
        if id(v) in known or not isinstance(v.type, TensorType):
            return False
        known[id(v)] = tuple(lay)
        values[id(v)] = v
        return True

    for a in func.args:
        set_(a, layout_of(a) or replicated)
    ops = [op for op in func.body.ops if not isinstance(op, ReturnOp)]
    for op in ops:
        if isinstance(op, AnnotateOp):
            set_(op.result, op.sharding.placements)
        elif isinstance(op, RedistributeOp):
            set_(op.result, op.target.placements)
        else:
            for r in op.results:
                lay = layout_of(r)
                if lay is not None:
                    set_(r, lay)
    ret = func.return_op

    def producer_admits(v: Value, lay: Layout) -> bool:
        """A layout asked for by a user is taken only if the producer can make it."""
        prod = v.defining_op()
        if prod is None:
            return True
        ins = [known.get(id(x)) for x in prod.operands]
        outs = [lay if r is v else known.get(id(r)) for r in prod.results]
        try:
            return choose(prod, rule_for(prod), shape, ins, outs, exact_results=True).cost < INF
        except DiagnosticError:
            return False

    index = {id(op): i for i, op in enumerate(ops)}
    index[id(ret)] = len(ops)
    # Worklist ordered by (phase, program order): phase 0 moves layouts forward (operands →
    # results), phase 1 also backward (users → operands). Forward information wins ties, so
    # activations follow the inputs and gradients follow activations.
    heap: list[tuple[int, int, int]] = []
    queued: dict[int, int] = {}
    by_id: dict[int, Operation] = {id(op): op for op in ops + [ret]}
    conflicts: dict[int, Operation] = {}

    def push(op: Operation, phase: int) -> None:
        if op.parent is not func.body:
            return
        if queued.get(id(op), 2) > phase:
            queued[id(op)] = phase
            heapq.heappush(heap, (phase, index[id(op)], id(op)))

    trace = os.environ.get("SPMDC_TRACE_PROPAGATION")
    current: list[str] = [""]

    def assign(v: Value, lay: Layout) -> bool:
        if not set_(v, lay):
            return False
        if trace:
            print(f"[sharding-propagation] %{v.name_hint or '?'} = [{', '.join(map(str, lay))}]  "
                  f"by {current[0]}", file=sys.stderr)
        for u in v.uses:
            push(u.owner, 0)
        prod = v.defining_op()
        if prod is not None:
            push(prod, 1)
        return True

    def pending(op: Operation) -> tuple[list, list] | None:
        ins = [known.get(id(v)) for v in op.operands]
        outs = [known.get(id(r)) for r in op.results]
        both = ins + outs
        if all(x is not None for x in both) or all(x is None for x in both):
            return None
        return ins, outs

    def apply(op: Operation, choice, results_only: bool = False) -> None:
        if not results_only:
            for v, lay in zip(op.operands, choice.operands):
                if id(v) not in known and producer_admits(v, lay):
                    assign(v, lay)
        for r, lay in zip(op.results, choice.results):
            assign(r, lay)

    def visit_free(op: Operation, phase: int) -> None:
        """Conflict-free step: take what needs no redistribution; defer conflicts."""
        if isinstance(op, ReturnOp):  # annotated results constrain values nobody else decided
            if phase == 0:
                push(op, 1)
                return
            for i, v in enumerate(op.operands):
                # A gradient's layout is where it is stored (reduce-scattered or all-reduced
                # into place); it must not pull the backward's activations into that layout,
                # so it speaks only once everything else is settled (phase 2).
                if ("spmdc.grad_of" in func.res_attrs(i)) != (phase == 2):
                    continue
                s = func.res_attrs(i).get(SHARDING)
                if isinstance(s, ShardingAttr) and id(v) not in known and producer_admits(v, s.placements):
                    assign(v, s.placements)
            return
        if isinstance(op, (AnnotateOp, RedistributeOp)):
            if phase == 0:
                push(op, 1)
                return
            lay = op.sharding.placements if isinstance(op, AnnotateOp) else op.source.placements
            if id(op.operand(0)) not in known and producer_admits(op.operand(0), lay):
                assign(op.operand(0), lay)
            return
        state = pending(op)
        if state is None:
            conflicts.pop(id(op), None)
            return
        ins, outs = state
        if phase == 0 and (any(x is None for x in ins) or all(x is not None for x in outs)):
            push(op, 1)  # forward needs every operand; otherwise wait for the backward phase
            return
        choice = choose(op, rule_for(op), shape, ins, outs, partial_ok=can_make_partial)
        if choice.is_free and choice.ambiguous:
            conflicts[id(op)] = op  # the known values do not decide: let others speak first
        elif choice.is_free:
            conflicts.pop(id(op), None)
            apply(op, choice, results_only=phase == 0)
            if phase == 0 and any(known.get(id(v)) is None for v in op.operands):
                push(op, 1)
        else:
            conflicts[id(op)] = op

    for op in ops:
        push(op, 0)
    push(ret, 1)
    while True:
        while heap:
            phase, _, key = heapq.heappop(heap)
            if queued.get(key) != phase:
                continue
            del queued[key]
            current[0] = f"{by_id[key].name} #{index[key]} {'forward' if phase == 0 else 'backward'}"
            visit_free(by_id[key], phase)
        # Resolve the cheapest conflict (program order breaks ties), then go on conflict-free.
        best = None
        for op in list(conflicts.values()):
            state = pending(op)
            if state is None:
                conflicts.pop(id(op))
                continue
            choice = choose(op, rule_for(op), shape, *state, partial_ok=can_make_partial)
            key2 = (choice.cost, choice.changes, index[id(op)])
            if best is None or key2 < best[0]:
                best = (key2, op, choice)
        if best is None:
            # Last resort: annotated function results decide values nothing else did.
            before = len(known)
            current[0] = "func.return (result annotations)"
            visit_free(ret, 2)
            if len(known) == before:
                break
            continue
        conflicts.pop(id(best[1]))
        current[0] = f"{best[1].name} #{index[id(best[1])]} conflict cost {best[0][0]:.1f}"
        apply(best[1], best[2])

    for i, a in enumerate(func.args):
        func.set_arg_attr(i, SHARDING, ShardingAttr(mesh.sym_name, known.get(id(a), replicated)))
    for op in ops:
        tensors = [r for r in op.results if isinstance(r.type, TensorType)]
        if tensors and len(tensors) == len(op.results):
            set_result_layouts(op, mesh.sym_name, [known.get(id(r), replicated) for r in op.results])
    for i, v in enumerate(ret.operands):
        if not isinstance(func.res_attrs(i).get(SHARDING), ShardingAttr):
            func.set_res_attr(i, SHARDING, ShardingAttr(mesh.sym_name, known.get(id(v), replicated)))


@dataclass
class ShardingPropagation(ModulePass):
    """Assign a layout to every tensor value (user annotations win)."""

    name: ClassVar[str] = "sharding-propagation"

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp):
                propagate_function(module, op)


PASS = ShardingPropagation
