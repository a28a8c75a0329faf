"""``expert-dispatch``: write a mixture-of-experts token permutation as expert dispatch ops, so
that expert parallelism moves each token only to the ranks of its experts (two ``all_to_all``
per layer in the forward, two in the backward, plus one all-gather of the ``[ranks, E]`` counts).

A router's permutation — HuggingFace's ``grouped_mm`` experts, torchtitan's — is a ``sort`` of the
flattened expert ids whose permutation ``%p`` (and ``%p // top_k``, the token of each sorted row,
and its inverse) only ever index rows: tokens into sorted order, the chain of row-wise ops and
``grouped_matmul``s on them, and the rows back. The pass replaces every such ``index`` /
``index_put`` by ``tensor.expert_dispatch`` / ``tensor.expert_combine`` over a slot buffer (one slot
per rank of the axis that shards the experts' dim 0; ``spmdc.dialects.tensor.experts``), gives the
chain the buffer's rows, and the grouped matmuls the route's bounds (``slot_rows``). The result is
the same function (rows are reordered only within an expert; a row-wise chain does not see it).

Before (``%w`` sharded ``[S(0)]`` on a 2-rank axis; 16 tokens, top-2, 4 experts)::

    %s:2 = tensor.sort %ids {descending = false, dim = 0} : tensor<32xi64>
    %t = tensor.div %s#1, %k {rounding_mode = "floor"} : (tensor<32xi64>, tensor<i64>) -> tensor<32xi64>
    %rows = tensor.index %x, %t : (tensor<16x8xf32>, tensor<32xi64>) -> tensor<32x8xf32>
    %y = tensor.grouped_matmul %rows, %w, %starts, %ends : (...) -> tensor<32x8xf32>
    %inv = tensor.index_put %zeros, %s#1, %arange : tensor<32xi64>
    %out = tensor.index %y, %inv : (tensor<32x8xf32>, tensor<32xi64>) -> tensor<32x8xf32>

After::

    %c = tensor.expert_counts %ids {experts = 4, sources = 2} : (tensor<32xi64>) -> tensor<2x4xi64>
    %d:3 = tensor.expert_route %ids, %c {per_source = 16, slot_rows = 32, slots = 2} : ...
    %rows = tensor.expert_dispatch %x, %d#0, %c {per_source = 16, slot_rows = 32, top_k = 2}
              : (tensor<16x8xf32>, tensor<32xi64>, tensor<2x4xi64>) -> tensor<64x8xf32>
    %y = tensor.grouped_matmul %rows, %w, %d#1, %d#2 {slot_rows = 32} : (...) -> tensor<64x8xf32>
    %out = tensor.expert_combine %y, %d#0, %c {per_source = 16, top_k = 1} : (...) -> tensor<32x8xf32>

Slots hold every assignment (``slot_rows`` = all of them): nothing is dropped. Only with
``capacity-factor=F`` (``--moe-capacity-factor``, an explicit option that changes results) does a
slot hold ``ceil(F * assignments / slots)`` rows; assignments past it get no expert output. Where the pattern
is not exactly this (a sorted value reaching anything but a row-wise op, a grouped matmul or the
way back; tokens that do not split evenly over the axis) the function is left as it was, which is
exact too (tokens gathered, expert outputs reduced); ``SPMDC_TRACE_EXPERTS=1`` says why.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import ClassVar

from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import AnnotateOp, Shard, ShardingAttr
from spmdc.dialects.tensor import (
    CastOp,
    ConstantOp,
    CumsumOp,
    DivOp,
    ExpertCombineOp,
    ExpertCountsOp,
    ExpertDispatchOp,
    ExpertRouteOp,
    GroupedMatmulOp,
    GroupedMatmulWgradOp,
    HistcOp,
    IndexOp,
    IndexPutOp,
    IotaOp,
    PadOp,
    PermuteOp,
    SortOp,
)
from spmdc.dialects.tensor.base import TensorOp
from spmdc.ir.attributes import DenseAttr, IntegerAttr
from spmdc.ir.core import Operation, Value
from spmdc.ir.rewriter import Builder, Rewriter
from spmdc.ir.types import TensorType
from spmdc.passes.pass_base import ModulePass


class NotADispatch(Exception):
    """The sort is not a token permutation this pass can rewrite (the message says why)."""


def _trace(msg: str) -> None:
    if os.environ.get("SPMDC_TRACE_EXPERTS"):
        print(f"expert-dispatch: {msg}", file=sys.stderr)


def _const(v: Value) -> list | None:
    op = v.defining_op()
    if isinstance(op, ConstantOp) and isinstance(op.attributes.get("value"), DenseAttr):
        return list(op.value.values)
    return None


def _is_range(v: Value, n: int) -> bool:
    """``v`` is ``0, 1, ..., n - 1``: a dense constant of those values or a ``tensor.iota``."""
    op = v.defining_op()
    if isinstance(op, IotaOp):
        return op.progression == range(n)
    return _const(v) == list(range(n))


def _is_zeros(v: Value) -> bool:
    vals = _const(v)
    return vals is not None and len(vals) == 1 and vals[0] == 0


@dataclass
class Move:
    """One ``index``/``index_put`` to rewrite: ``dispatch`` (to the buffer) or not (back)."""

    op: Operation
    payload: Value
    dispatch: bool
    top_k: int


@dataclass
class Plan:
    sort: SortOp
    ids: Value
    experts: int
    slots: int
    moves: list[Move] = field(default_factory=list)
    chain: list[Operation] = field(default_factory=list)     # ops whose results get the buffer's rows
    grouped: list[Operation] = field(default_factory=list)
    histc_casts: list[Operation] = field(default_factory=list)
    constants: list[tuple[Operation, int]] = field(default_factory=list)   # (op, operand index) to re-shape
    dead: list[Operation] = field(default_factory=list)


def _expert_axis_size(w: Value, mesh_shape: dict[str, tuple[int, ...]]) -> int | None:
    """The size of the mesh axis sharding the experts' dim 0 of ``w`` (through permutes that keep
    dim 0, to the plan's ``shard.annotate``); None if none does."""
    v = w
    while True:
        op = v.defining_op()
        if isinstance(op, PermuteOp) and list(op.attr_value("perm"))[0] == 0:  # type: ignore[index]
            v = op.operand(0)
            continue
        break
    op = v.defining_op()
    if not isinstance(op, AnnotateOp):
        return None
    s = op.attributes.get("sharding")
    if not isinstance(s, ShardingAttr) or s.mesh not in mesh_shape:
        return None
    shape = mesh_shape[s.mesh]
    axes = [i for i, p in enumerate(s.placements) if isinstance(p, Shard) and p.dim == 0 and shape[i] > 1]
    return shape[axes[0]] if len(axes) == 1 else None


def analyse(sort: SortOp, mesh_shape: dict[str, tuple[int, ...]]) -> Plan:
    ids = sort.operand(0)
    t = ids.type
    if not isinstance(t, TensorType) or t.rank != 1 or t.element_type != "i64" or sort.dim != 0 \
            or sort.attr_value("descending"):
        raise NotADispatch("not an ascending sort of flat i64 ids")
    n_assign = t.shape[0]
    perm, sorted_ids = sort.results[1], sort.results[0]
    toks: dict[Value, int] = {}
    invs: list[Value] = []
    moves: list[Move] = []
    dead: list[Operation] = [sort]
    for use in list(perm.uses):
        op = use.owner
        if isinstance(op, DivOp) and use.index == 0 and op.attributes.get("rounding_mode") is not None \
                and str(op.attr_value("rounding_mode")) == "floor":
            k = _const(op.operand(1))
            if not k or len(k) != 1 or int(k[0]) < 1:
                raise NotADispatch("the row of a sorted assignment is divided by a non-constant")
            toks[op.result] = int(k[0])
            dead.append(op)
        elif isinstance(op, IndexPutOp) and len(op.operands) == 3 and use.index == 1 \
                and not op.attr_value("accumulate") and _is_zeros(op.operand(0)) \
                and _is_range(op.operand(2), n_assign):
            invs.append(op.result)
            dead.append(op)
        else:
            moves.append(_move(op, use.index, perm, dispatch_on_index=True, top_k=1, n=n_assign))
    for tok, k in toks.items():
        for use in list(tok.uses):
            moves.append(_move(use.owner, use.index, tok, dispatch_on_index=True, top_k=k, n=n_assign))
    for inv in invs:
        for use in list(inv.uses):
            moves.append(_move(use.owner, use.index, inv, dispatch_on_index=False, top_k=1, n=n_assign))
    casts = []
    for use in sorted_ids.uses:
        op = use.owner
        if not (isinstance(op, CastOp) and all(isinstance(u.owner, HistcOp) for u in op.result.uses)):
            raise NotADispatch(f"the sorted ids are used by '{op.name}' (only their histogram is handled)")
        casts.append(op)
    if not moves:
        raise NotADispatch("its permutation moves no rows")
    plan = Plan(sort, ids, 0, 0, moves, histc_casts=casts, dead=dead)
    _walk_chain(plan, n_assign)
    if not plan.grouped:
        raise NotADispatch("no grouped matmul computes on the sorted rows")
    mms = [g for g in plan.grouped if isinstance(g, GroupedMatmulOp)]
    sizes = {_expert_axis_size(g.operand(1), mesh_shape) for g in mms}
    experts = {g.operand(1).tensor_type.shape[0] for g in mms}
    if len(experts) != 1 or len(sizes) != 1 or None in sizes:
        raise NotADispatch("its experts' weights are not all sharded by expert on one mesh axis")
    plan.experts, plan.slots = experts.pop(), sizes.pop()  # type: ignore[assignment]
    for c in casts:
        for u in c.result.uses:
            h = u.owner
            if h.attr_value("bins") != plan.experts or float(h.attr_value("min")) != 0.0 \
                    or float(h.attr_value("max")) != plan.experts - 1:  # type: ignore[arg-type]
                raise NotADispatch("the sorted ids' histogram is not one bin per expert over [0, E-1]")
    if plan.experts % plan.slots or n_assign % plan.slots:
        raise NotADispatch(f"{plan.experts} experts and {n_assign} assignments do not split over {plan.slots} ranks")
    for m in plan.moves:
        if (n_assign // plan.slots) % m.top_k:
            raise NotADispatch(f"tokens do not split evenly over {plan.slots} ranks")
    return plan


def _move(op: Operation, index: int, idx: Value, dispatch_on_index: bool, top_k: int, n: int) -> Move:
    """``index(x, idx)`` or ``index_put(zeros, idx, g, accumulate)``: the move it is. Indexing by
    the permutation (or its token rows) gathers into sorted order (a dispatch); ``index_put`` by
    it scatters back (a combine) — and the inverse permutation the other way round."""
    if isinstance(op, IndexOp) and len(op.operands) == 2 and index == 1:
        return Move(op, op.operand(0), dispatch_on_index, top_k)
    if isinstance(op, IndexPutOp) and len(op.operands) == 3 and index == 1 and op.attr_value("accumulate") \
            and _is_zeros(op.operand(0)):
        return Move(op, op.operand(2), not dispatch_on_index, top_k)
    raise NotADispatch(f"the permutation is used by '{op.name}' at {op.location}")


def _walk_chain(plan: Plan, n_assign: int) -> None:
    """Follow the dispatched rows, in program order, through row-wise ops to the moves back (and
    weight gradients)."""
    moves = {id(m.op): m for m in plan.moves}
    sorted_vals: set[Value] = {m.op.result for m in plan.moves if m.dispatch}
    block = plan.sort.parent
    assert block is not None
    for op in block.ops:
        touched = [i for i, v in enumerate(op.operands) if v in sorted_vals]
        if not touched:
            continue
        m = moves.get(id(op))
        if m is not None:
            if m.dispatch or any(op.operand(i) is not m.payload for i in touched):
                raise NotADispatch(f"'{op.name}' at {op.location} moves dispatched rows again")
            continue
        if isinstance(op, (GroupedMatmulOp, GroupedMatmulWgradOp)):
            if len(op.operands) != 4 or any(i > 1 for i in touched) or not _bounds_from_histogram(op, plan):
                raise NotADispatch(f"'{op.name}' at {op.location} does not group by the sorted ids' counts")
            plan.grouped.append(op)
            rows = 2 if isinstance(op, GroupedMatmulWgradOp) else 1
            if not all(op.operand(i) in sorted_vals for i in range(rows)):
                raise NotADispatch(f"'{op.name}' at {op.location} mixes dispatched rows with other rows")
            if isinstance(op, GroupedMatmulOp):
                plan.chain.append(op)
                sorted_vals.add(op.result)
            continue
        _row_wise(op, touched[0], sorted_vals, plan, n_assign)


def _bounds_from_histogram(op: Operation, plan: Plan) -> bool:
    """``ends`` is the cumsum of the sorted ids' histogram, ``starts`` it shifted by one."""
    ends, starts = op.operand(3), op.operand(2)
    p = starts.defining_op()
    if not (isinstance(p, PadOp) and p.operand(0) is ends):
        return False
    c = ends.defining_op()
    if not isinstance(c, CumsumOp):
        return False
    v = c.operand(0)
    while isinstance(v.defining_op(), CastOp):
        v = v.defining_op().operand(0)  # type: ignore[union-attr]
    h = v.defining_op()
    return isinstance(h, HistcOp) and h.operand(0).defining_op() in plan.histc_casts \
        and float(h.attr_value("min")) == 0.0  # type: ignore[arg-type]


def _row_wise(op: Operation, index: int, sorted_vals: set[Value], plan: Plan, n_assign: int) -> None:
    if not isinstance(op, TensorOp) or "Random" in op.traits:
        raise NotADispatch(f"dispatched rows reach '{op.name}' at {op.location}")
    rule = op.sharding_rule()
    dims = rule.operands[index]
    f = dims[0] if dims else None
    if f is None or f in rule.blocked or rule.reduction_kind(f) is not None or \
            any(vf == f for _, _, _, vf, _ in rule.views) or any(s[2] == 0 and s[3] != 1 for s in rule.scales):
        raise NotADispatch(f"'{op.name}' at {op.location} is not row-wise on the dispatched rows")
    for i, (w, wdims) in enumerate(zip(op.operands, rule.operands)):
        if f not in wdims:
            continue
        if wdims.index(f) != 0:
            raise NotADispatch(f"'{op.name}' at {op.location} moves the rows to another dim")
        if w in sorted_vals:
            continue
        vals = _const(w)
        if vals is not None and len(vals) == 1:
            plan.constants.append((op, i))
            continue
        raise NotADispatch(f"'{op.name}' at {op.location} combines dispatched rows with rows of another order")
    if any(w in sorted_vals and (f not in wd or wd.index(f) != 0) for w, wd in zip(op.operands, rule.operands)):
        raise NotADispatch(f"'{op.name}' at {op.location} is not row-wise on the dispatched rows")
    for r, rdims in zip(op.results, rule.results):
        if f in rdims:
            if rdims.index(f) != 0:
                raise NotADispatch(f"'{op.name}' at {op.location} moves the rows to another dim")
            sorted_vals.add(r)
        elif isinstance(r.type, TensorType) and r.type.rank and r.type.shape[0] == n_assign:
            raise NotADispatch(f"'{op.name}' at {op.location} is not row-wise on the dispatched rows")
    plan.chain.append(op)


def capacity(n_assign: int, slots: int, factor: float) -> int:
    """Rows per slot: every assignment (dropless, ``factor`` 0), else ``factor`` times a slot's even
    share, rounded up (at most every assignment)."""
    if not factor:
        return n_assign
    import math

    return max(1, min(n_assign, math.ceil(factor * n_assign / slots)))


def rewrite(plan: Plan, capacity_factor: float = 0.0, count_load: bool = True) -> None:
    sort, ids = plan.sort, plan.ids
    n_assign = ids.tensor_type.shape[0]
    per = n_assign // plan.slots
    cap = capacity(n_assign, plan.slots, capacity_factor)
    rows = plan.slots * cap
    b = Builder.after(sort)
    loc = sort.location
    counts = b.create(ExpertCountsOp, [ids], {"experts": plan.experts, "sources": plan.slots}, location=loc).result
    counts.name_hint = "expert_counts"
    route = Builder.after(counts.defining_op()).create(
        ExpertRouteOp, [ids, counts], {"slots": plan.slots, "slot_rows": cap, "per_source": per}, location=loc)
    dest, starts, ends = route.results
    dest.name_hint, starts.name_hint, ends.name_hint = "expert_dest", "expert_starts", "expert_ends"
    rewriter = Rewriter()
    order = {id(op): i for i, op in enumerate(sort.parent.ops)} if sort.parent is not None else {}
    gathers = [m.op for m in plan.moves if m.dispatch and isinstance(m.op, IndexOp)]
    counted = min(gathers, key=lambda op: order.get(id(op), 0)) if gathers and count_load else None
    for c in plan.histc_casts:
        c.set_operand(0, ids)
    # the chain first (its types), then the moves (their operands are the chain's values)
    for op, i in plan.constants:
        w = op.operand(i)
        t = w.tensor_type
        new = Builder.before(op).create(ConstantOp, [], {"value": DenseAttr(t.with_shape((rows,) + t.shape[1:]),
                                                                             _const(w))},
                                        [t.with_shape((rows,) + t.shape[1:])], location=op.location)
        op.set_operand(i, new.result)
    for op in plan.chain:
        for r in op.results:
            t = r.type
            if isinstance(t, TensorType) and t.rank and t.shape[0] == n_assign:
                r.type = t.with_shape((rows,) + t.shape[1:])
    old_bounds = []
    for op in plan.grouped:
        old_bounds += [op.operand(2), op.operand(3)]
        op.set_operand(2, starts)
        op.set_operand(3, ends)
        op.attributes["slot_rows"] = IntegerAttr(cap)
    for m in plan.moves:
        cls = ExpertDispatchOp if m.dispatch else ExpertCombineOp
        attrs = {"top_k": m.top_k, "per_source": per}
        if m.dispatch:
            attrs["slot_rows"] = cap
            if m.op is counted:
                attrs["count_load"] = True   # the forward's first dispatch: what the load table counts
        new = Builder.before(m.op).create(cls, [m.payload, dest, counts], attrs, location=m.op.location)
        rewriter.replace_op(m.op, new.results)
    for op in plan.chain + plan.grouped:   # the retyped chain must still type-check, op by op
        inferred = type(op).infer_result_types([v.type for v in op.operands], op.attributes)
        if inferred is not None and list(inferred) != [r.type for r in op.results]:
            raise op.emit_error(f"expert-dispatch: re-shaped to the slot buffer's {rows} rows it infers "
                                f"{', '.join(map(str, inferred))}")
        op.verify_()
    _erase_dead([r for op in reversed(plan.dead) for r in op.results] + old_bounds, rewriter)


def _erase_dead(values: list[Value], rewriter: Rewriter) -> None:
    """Erase the pure ops that made ``values`` once nothing uses them, then their producers."""
    work = list(values)
    while work:
        v = work.pop(0)
        op = v.defining_op()
        if op is None or op.parent is None or "Pure" not in op.traits or any(r.uses for r in op.results):
            continue
        work += list(op.operands)
        rewriter.erase_op(op)


def run_on_function(func: FuncOp, mesh_shape: dict[str, tuple[int, ...]], capacity_factor: float = 0.0) -> int:
    done = 0
    counted: set[str] = set()   # a layer's forward recomputed in the backward (checkpointing) is not counted twice
    for op in list(func.body.ops):
        if not isinstance(op, SortOp) or op.parent is None:
            continue
        try:
            plan = analyse(op, mesh_shape)
        except NotADispatch as e:
            _trace(f"sort at {op.location} left as it is: {e}")
            continue
        rewrite(plan, capacity_factor, count_load=str(op.location) not in counted)
        counted.add(str(op.location))
        _trace(f"sort at {op.location}: {len(plan.moves)} moves over {plan.slots} slots, {len(plan.chain)} ops")
        done += 1
    return done


@dataclass
class ExpertDispatch(ModulePass):
    """Token permutations of mixtures of experts as expert dispatch ops (expert parallelism's
    all_to_all); functions whose experts no mesh axis shards are left alone."""

    name: ClassVar[str] = "expert-dispatch"
    capacity_factor: float = 0.0   # > 0: slots of that many times their even share; the rest is DROPPED

    def run(self, module: Operation) -> None:
        if self.capacity_factor < 0:
            from spmdc.passes.registry import PipelineError

            raise PipelineError(f"expert-dispatch: capacity-factor must be >= 0 (0: dropless), got "
                                f"{self.capacity_factor}")
        from spmdc.dialects.shard import MeshOp

        meshes = {m.sym_name: tuple(m.shape) for m in module.body.ops if isinstance(m, MeshOp)}
        done = sum(run_on_function(op, meshes, self.capacity_factor) for op in list(module.body.ops)
                   if isinstance(op, FuncOp))
        if self.capacity_factor and not done:
            import warnings

            warnings.warn(f"expert-dispatch: capacity-factor {self.capacity_factor:g} has no effect: no mixture-of-"
                          "experts layer here is dispatched over an expert-parallel axis (plan 'ep', 'fsdp+ep' or "
                          "'fsdp+tp+ep'; SPMDC_TRACE_EXPERTS=1 says why a layer is not)", UserWarning, stacklevel=2)


PASS = ExpertDispatch
