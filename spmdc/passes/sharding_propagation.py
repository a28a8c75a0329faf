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
4. gradient results' annotated layouts come last (and ``shard.annotate {spmdc.late}``, the
   stored layout of a gradient that is used again, as by gradient clipping); anything still
   unknown is replicated.

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
from typing import Any, ClassVar

from spmdc.dialects.attrs import GRAD_OF_ATTR, GROUP_INDEX_ATTR, LATE_ATTR, PARAM_ATTR
from spmdc.dialects.func import FuncOp, ReturnOp
from spmdc.dialects.shard import AnnotateOp, RaggedShard, RedistributeOp, Replicate, ShardingAttr
from spmdc.ir.attributes import IntegerAttr
from spmdc.ir.core import Operation, Value
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.types import TensorType
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.cost import INF
from spmdc.sharding.layouts import SHARDING, Layout, func_mesh, layout_of, set_result_layouts
from spmdc.sharding.strategy import choose, choose_or_fallback, rule_for

LATE = LATE_ATTR   # on a shard.annotate: constrains its operand only in the last phase (a stored gradient)


def can_make_partial(v: Value, p: object) -> bool:
    """Whether ``v``'s producer can make it ``p`` from nothing (a zero constant is any Partial sum)."""
    prod = v.defining_op()
    return prod is not None and getattr(p, "op", None) in rule_for(prod).partial_results


def propagate_function(module: Operation, func: FuncOp) -> None:
    mesh = func_mesh(module, func)
    if mesh is None:
        return
    state = Propagation(func, mesh.shape)
    state.seed()
    state.run()
    state.write_back(mesh.sym_name)


class Propagation:
    """The worklist over one function: known layouts, the queue, the deferred conflicts.

    The queue is ordered by (phase, program order): phase 0 moves layouts forward
    (operands → results), phase 1 also backward (users → operands), phase 2 is the function
    results' annotations. Forward information wins ties, so activations follow the inputs
    and gradients follow activations.
    """

    def __init__(self, func: FuncOp, mesh_shape: tuple[int, ...]):
        self.func, self.shape = func, mesh_shape
        self.replicated: Layout = tuple(Replicate() for _ in mesh_shape)
        self.known: dict[int, Layout] = {}
        self.ops = [op for op in func.body.ops if not isinstance(op, ReturnOp)]
        self.ret = func.return_op
        self.index = {id(op): i for i, op in enumerate(self.ops)}
        self.index[id(self.ret)] = len(self.ops)
        self.by_id: dict[int, Operation] = {id(op): op for op in self.ops + [self.ret]}
        self.heap: list[tuple[int, int, int]] = []
        self.queued: dict[int, int] = {}
        self.conflicts: dict[int, Operation] = {}
        # a deferred op's best choice for the layouts known around it (recomputed only when they change:
        # every conflict round looks at every deferred op)
        self.choices: dict[int, tuple[Any, Any]] = {}
        self.trace = bool(os.environ.get("SPMDC_TRACE_PROPAGATION"))
        self.current = ""   # what is deciding now (for the trace)
        self.ragged: list[tuple[int, tuple[int, ...], int]] = []   # (axis, units, coord) input splits (seed)

    # -- known layouts --------------------------------------------------------------------------
    def set_(self, v: Value, lay: Layout) -> bool:
        if id(v) in self.known or not isinstance(v.type, TensorType):
            return False
        self.known[id(v)] = tuple(lay)
        return True

    def seed(self) -> None:
        """Arguments (replicated unless annotated), ``shard.annotate`` / ``redistribute``
        results and results that already carry ``shard.sharding``: never changed. The ragged
        splits the arguments hold become candidates for every op (:func:`choose`'s ``ragged``)."""
        ragged = set()
        for a in self.func.args:
            self.set_(a, layout_of(a) or self.replicated)
            if PARAM_ATTR in self.func.arg_attrs(a.index) or not isinstance(a.type, TensorType):
                continue   # a whole-matrix parameter's RS is its storage, not a split of the batch
            ragged |= {(ax, p.units) for ax, p in enumerate(layout_of(a) or ()) if isinstance(p, RaggedShard)
                       and a.type.shape[p.dim] == sum(p.units) and sum(1 for u in p.units if u) > 1}
        # a device group's program (spmdc.group_index = g) runs at coordinate g of axis 0 (grp)
        g = self.func.attributes.get(GROUP_INDEX_ATTR)
        here = g.value if isinstance(g, IntegerAttr) else -1  # type: ignore[attr-defined]
        self.ragged = sorted((ax, units, here if ax == 0 else -1) for ax, units in ragged)
        for op in self.ops:
            if isinstance(op, AnnotateOp):
                self.set_(op.result, op.sharding.placements)
            elif isinstance(op, RedistributeOp):
                self.set_(op.result, op.target.placements)
            else:
                for r in op.results:
                    lay = layout_of(r)
                    if lay is not None:
                        self.set_(r, lay)

    def assign(self, v: Value, lay: Layout) -> bool:
        if not self.set_(v, lay):
            return False
        if self.trace:
            print(f"[sharding-propagation] %{v.name_hint or '?'} = [{', '.join(map(str, lay))}]  "
                  f"by {self.current}", file=sys.stderr)
        for u in v.uses:
            self.push(u.owner, 0)
        prod = v.defining_op()
        if prod is not None:
            self.push(prod, 1)
        return True

    def producer_admits(self, v: Value, lay: Layout) -> bool:
        """A layout asked for by a user is taken only if the producer can make it."""
        prod = v.defining_op()
        if prod is None:
            return True
        ins = [self.known.get(id(x)) for x in prod.operands]
        outs = [lay if r is v else self.known.get(id(r)) for r in prod.results]
        try:
            return choose(prod, rule_for(prod), self.shape, ins, outs, exact_results=True).cost < INF
        except DiagnosticError:
            return False

    def pending(self, op: Operation) -> tuple[list, list] | None:
        """Known layouts of operands and results when some (not all) are known."""
        ins = [self.known.get(id(v)) for v in op.operands]
        outs = [self.known.get(id(r)) for r in op.results]
        both = ins + outs
        if all(x is not None for x in both) or all(x is None for x in both):
            return None
        return ins, outs

    def apply(self, op: Operation, choice, results_only: bool = False) -> None:
        if not results_only:
            for v, lay in zip(op.operands, choice.operands):
                if id(v) not in self.known and self.producer_admits(v, lay):
                    self.assign(v, lay)
        for r, lay in zip(op.results, choice.results):
            self.assign(r, lay)

    # -- the worklist -----------------------------------------------------------------------------
    def push(self, op: Operation, phase: int) -> None:
        if op.parent is not self.func.body:
            return
        if self.queued.get(id(op), 2) > phase:
            self.queued[id(op)] = phase
            heapq.heappush(self.heap, (phase, self.index[id(op)], id(op)))

    def run(self) -> None:
        for op in self.ops:
            self.push(op, 0)
        self.push(self.ret, 1)
        while True:
            self.drain()
            if self.resolve_cheapest_conflict():
                continue
            # Last resort: annotated function results decide values nothing else did.
            before = len(self.known)
            self.current = "func.return (result annotations)"
            self.visit_return(2)
            if len(self.known) == before:
                return

    def drain(self) -> None:
        """Conflict-free steps until the queue is empty."""
        while self.heap:
            phase, _, key = heapq.heappop(self.heap)
            if self.queued.get(key) != phase:
                continue
            del self.queued[key]
            self.current = f"{self.by_id[key].name} #{self.index[key]} {'forward' if phase == 0 else 'backward'}"
            self.visit(self.by_id[key], phase)

    def resolve_cheapest_conflict(self) -> bool:
        """Resolve the cheapest deferred op (program order breaks ties); False if none is left."""
        best = None
        cache = self.choices
        for op in list(self.conflicts.values()):
            state = self.pending(op)
            if state is None:
                self.conflicts.pop(id(op))
                continue
            hit = cache.get(id(op))
            if hit is not None and hit[0] == state:
                choice = hit[1]
            else:
                choice, _ = choose_or_fallback(op, rule_for(op), self.shape, *state, partial_ok=can_make_partial,
                                               ragged=self.ragged)
                cache[id(op)] = (state, choice)
            key = (choice.cost, choice.changes, self.index[id(op)])
            if best is None or key < best[0]:
                best = (key, op, choice)
        if best is None:
            return False
        (cost, _, position), op, choice = best
        self.conflicts.pop(id(op))
        self.current = f"{op.name} #{position} conflict cost {cost:.1f}"
        self.apply(op, choice)
        return True

    # -- one conflict-free step -----------------------------------------------------------------
    def visit(self, op: Operation, phase: int) -> None:
        """Take what needs no redistribution; defer conflicts."""
        if isinstance(op, ReturnOp):
            if phase == 0:
                self.push(op, 1)
            else:
                self.visit_return(phase)
            return
        if isinstance(op, (AnnotateOp, RedistributeOp)):
            if phase == 0:
                self.push(op, 1)
                return
            if LATE in op.attributes and phase < 2:
                return   # a stored gradient's layout: it speaks with the gradient results, last
            lay = op.sharding.placements if isinstance(op, AnnotateOp) else op.source.placements
            if id(op.operand(0)) not in self.known and self.producer_admits(op.operand(0), lay):
                self.assign(op.operand(0), lay)
            return
        state = self.pending(op)
        if state is None:
            self.conflicts.pop(id(op), None)
            return
        ins, outs = state
        if phase == 0 and (any(x is None for x in ins) or all(x is not None for x in outs)):
            self.push(op, 1)  # forward needs every operand; otherwise wait for the backward phase
            return
        choice, _ = choose_or_fallback(op, rule_for(op), self.shape, ins, outs, partial_ok=can_make_partial,
                                       ragged=self.ragged)
        if choice.is_free and choice.ambiguous:
            self.conflicts[id(op)] = op  # the known values do not decide: let others speak first
        elif choice.is_free:
            self.conflicts.pop(id(op), None)
            self.apply(op, choice, results_only=phase == 0)
            if phase == 0 and any(self.known.get(id(v)) is None for v in op.operands):
                self.push(op, 1)
        else:
            self.conflicts[id(op)] = op

    def visit_return(self, phase: int) -> None:
        """Annotated function results constrain values nobody else decided. A gradient's
        layout is where it is stored (reduce-scattered or all-reduced into place); it must not
        pull the backward's activations into that layout, so it speaks only in phase 2."""
        for i, v in enumerate(self.ret.operands):
            if (GRAD_OF_ATTR in self.func.res_attrs(i)) != (phase == 2):
                continue
            s = self.func.res_attrs(i).get(SHARDING)
            if isinstance(s, ShardingAttr) and id(v) not in self.known and self.producer_admits(v, s.placements):
                self.assign(v, s.placements)
        if phase == 2:
            for op in self.ops:
                if isinstance(op, AnnotateOp) and LATE in op.attributes:
                    self.visit(op, 2)

    # -- results ----------------------------------------------------------------------------------
    def write_back(self, mesh: str) -> None:
        """Every argument, op result and function result gets its layout (unknown: replicated)."""
        func, known, replicated = self.func, self.known, self.replicated
        for i, a in enumerate(func.args):
            func.set_arg_attr(i, SHARDING, ShardingAttr(mesh, known.get(id(a), replicated)))
        for op in self.ops:
            tensors = [r for r in op.results if isinstance(r.type, TensorType)]
            if tensors and len(tensors) == len(op.results):
                set_result_layouts(op, mesh, [known.get(id(r), replicated) for r in op.results])
        for i, v in enumerate(self.ret.operands):
            if not isinstance(func.res_attrs(i).get(SHARDING), ShardingAttr):
                func.set_res_attr(i, SHARDING, ShardingAttr(mesh, known.get(id(v), replicated)))


@dataclass
class ShardingPropagation(ModulePass):
    """Assign a layout to every tensor value (user annotations win)."""

    name: ClassVar[str] = "sharding-propagation"

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp):
                propagate_function(module, op)


PASS = ShardingPropagation
