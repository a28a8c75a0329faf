"""``bucket-collectives``: one collective per block instead of one per parameter (SimpleFSDP).

On per-rank programs (after ``partition``): the all-gathers of parameters (arguments with
``spmdc.param``) are grouped by mesh axis, element type, phase (forward / backward re-gather) and model block
(``h.3``, ``wte``, ... from the op's location), and each group becomes one
``comm.all_gather_bucket`` placed where its first member was; the reduce-scatters that
store gradients (results returned as ``spmdc.grad_of``) are grouped by axis, reduction
and the parameter's block, and each group becomes one ``comm.reduce_scatter_bucket``
right after its last operand is computed. ``max-bytes`` caps a bucket (bytes of the whole
tensors, gathered or reduced: the same on every rank of the group, so all ranks bucket alike).

Before::

    %w1 = comm.all_gather %h.0.fc1.weight {axis = "dp", dim = 0, mesh = @m} : (tensor<8x16xf32>) -> tensor<16x16xf32>
    %w2 = comm.all_gather %h.0.fc2.weight {axis = "dp", dim = 0, mesh = @m} : (tensor<8x16xf32>) -> tensor<16x16xf32>

After::

    %b:2 = comm.all_gather_bucket %h.0.fc1.weight, %h.0.fc2.weight {axis = "dp", dims = [0, 0], mesh = @m}
        : (tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from spmdc.dialects.attrs import BUCKET_ATTR, BUCKETS_ATTR, GRAD_OF_ATTR, PARAM_ATTR, RANK_ATTR
from spmdc.dialects.comm import (
    AllGatherBucketOp,
    AllGatherOp,
    AllReduceBucketOp,
    AllReduceOp,
    ReduceScatterBucketOp,
    ReduceScatterOp,
)
from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import chunk_sizes
from spmdc.ir.attributes import ArrayAttr, IntegerAttr
from spmdc.ir.core import Operation
from spmdc.ir.location import NameLoc
from spmdc.ir.rewriter import Builder, Rewriter
from spmdc.passes.pass_base import ModulePass
from spmdc.sharding.blocks import block_of, module_of
from spmdc.sharding.cost import AxisCost, ComputeCost


def _group_bytes(op: Operation) -> int:
    """A collective's size as every rank of its group sees it (the whole tensor: the gathered
    result, the reduced operand), so that each rank of a group makes the same buckets even
    when shards are uneven (a rank's own piece may be smaller, or empty)."""
    return (op.result if isinstance(op, AllGatherOp) else op.operand(0)).tensor_type.num_bytes


def _root_level(block: str) -> bool:
    """A key's block naming a root-level module (``wte``, ``ln_f``), not a repeated block, a
    manual bucket (``=glob``) or an op (``#index``)."""
    return not block.startswith(("#", "=")) and block_of(block) is None


LOOSE_FRACTION = 0.5
"""A group of root-level modules joins a neighbouring block's bucket when its bytes are at most
this fraction of a typical (median) block's: a position embedding or a final norm does; an
embedding table as large as a block keeps its own bucket."""


def _groups(members: list[tuple[tuple, Operation]], max_bytes: int, order: dict[int, int]) -> list[list[Operation]]:
    """Buckets per key (its last element the model block), capped at ``max_bytes``; a bucket of
    one collective, or of root-level modules (embeddings, final norm, head), joins its
    neighbour in program order with the same key but the block (the embedding joins the first
    block, the final norm the last) instead of launching alone."""
    by_key: dict[tuple, list[list[Operation]]] = {}
    sizes: dict[tuple, int] = {}
    for key, op in members:
        nbytes = _group_bytes(op)
        buckets = by_key.setdefault(key, [[]])
        if buckets[-1] and sizes[key] + nbytes > max_bytes:
            buckets.append([])
            sizes[key] = 0
        buckets[-1].append(op)
        sizes[key] = sizes.get(key, 0) + nbytes
    lanes: dict[tuple, list[list[Operation]]] = {}   # same key but the block, in program order
    for key, bs in by_key.items():
        lanes.setdefault(key[:-1], []).extend(bs)
    blocks = {id(op): key[-1] for key, op in members}

    def nbytes(ops: list[Operation]) -> int:
        return sum(_group_bytes(op) for op in ops)

    out = []
    for bs in lanes.values():
        sizes = sorted(nbytes(b) for b in bs if not all(_root_level(blocks[id(op)]) for op in b))
        typical = sizes[len(sizes) // 2] if sizes else 0

        def loose(b: list[Operation]) -> bool:
            return len(b) == 1 or (all(_root_level(blocks[id(op)]) for op in b)
                                   and nbytes(b) <= LOOSE_FRACTION * typical)

        def manual(b: list[Operation]) -> bool:
            return blocks[id(b[0])].startswith("=")

        bs.sort(key=lambda b: min(order[id(op)] for op in b))
        merged: list[list[Operation]] = []
        for b in bs:
            if merged and not manual(b) and not manual(merged[-1]) and (loose(b) or loose(merged[-1])) \
                    and nbytes(merged[-1] + b) <= max_bytes:
                merged[-1].extend(b)      # a loose bucket joins its neighbour (or takes it in)
            else:
                merged.append(list(b))
        out.extend(b for b in merged if len(b) > 1)
    return out


def _auto_groups(members: list[tuple[tuple, Operation]], entry: Any, max_bytes: int) -> list[list[Operation]]:
    """Buckets chosen by the cost model (``mode=auto``), per lane (key without the block), over
    the gathers in the order they are needed. With prefetching, a bucket's communication runs
    during the compute from the previous bucket's first use to its own (its window); what does
    not fit is exposed. A gather joins the open bucket (under ``max_bytes``) when that exposes
    no more time than launching it alone, prefetched behind the compute from the open bucket's
    first use to its own: small gathers between little compute merge (one launch instead of
    several), and a bucket closes once its communication would no longer hide."""
    comm, compute = AxisCost(), ComputeCost()
    ops = list(entry.ops)
    pos = {id(op): i for i, op in enumerate(ops)}
    elapsed = [0.0]
    for op in ops:   # prefix sums of estimated compute time
        elapsed.append(elapsed[-1] + (0.0 if op.name.startswith("comm.") else compute.op_time(op)))

    def need(op: Operation) -> int:
        return min((pos[id(u.owner)] for u in op.result.uses if id(u.owner) in pos), default=pos[id(op)])

    def time(group: list[Operation]) -> float:
        return comm.all_gather(float(sum(_group_bytes(o) for o in group)), group[0].group_size())

    lanes: dict[tuple, list[Operation]] = {}
    for key, op in members:
        lanes.setdefault(key[:-1], []).append(op)
    out = []
    for lane in lanes.values():
        lane.sort(key=need)
        buckets: list[list[Operation]] = []
        prev_need = 0
        for op in lane:
            cur = buckets[-1] if buckets else None
            if cur is not None:
                window = elapsed[need(cur[0])] - elapsed[prev_need]
                grows = max(0.0, time(cur + [op]) - window) - max(0.0, time(cur) - window)
                alone = max(0.0, time([op]) - (elapsed[need(op)] - elapsed[need(cur[0])]))
                if sum(_group_bytes(o) for o in cur + [op]) <= max_bytes and grows <= alone:
                    cur.append(op)
                    continue
                prev_need = need(cur[0])
            buckets.append([op])
        out.extend(b for b in buckets if len(b) > 1)
    return out


def _member_sizes(group: list[Operation], gathered_is_result: bool) -> dict[str, Any]:
    """``{"sizes": [[...], ...]}`` when a member is ragged (explicit ``sizes``): every member's
    per-rank sizes, torch.chunk's for the plain ones; else nothing."""
    if not any("sizes" in op.attributes for op in group):
        return {}
    rows = []
    for op in group:
        z = op.sizes()
        if z is None:
            full = (op.result if gathered_is_result else op.operand(0)).tensor_type.shape[op.attr_value("dim")]
            z = chunk_sizes(full, op.group_size())
        rows.append(ArrayAttr(tuple(IntegerAttr(int(v)) for v in z)))
    return {"sizes": ArrayAttr(tuple(rows))}


def _replace(group: list[Operation], bucket: Operation, rewriter: Rewriter) -> None:
    for op, res in zip(group, bucket.results):
        res.name_hint = op.result.name_hint
        rewriter.replace_op(op, [res])


def bucket_function(func: FuncOp, max_bytes: int, mode: str = "blocks") -> int:
    rewriter = Rewriter()
    entry = func.body
    gathers = []
    params = {a for i, a in enumerate(func.args) if PARAM_ATTR in func.arg_attrs(i)}
    manual = _manual_buckets(func)
    # a parameter's shard, or its cast (mixed precision: the shard is cast, then gathered)
    casts = {op.result: op.operand(0) for op in entry.ops if op.name == "tensor.cast" and op.operand(0) in params}
    shards = params | set(casts)
    for op in entry.ops:
        if isinstance(op, AllGatherOp) and op.operand(0) in shards and "shard.sharding" not in op.attributes:
            user = min((u.owner for u in op.result.uses), key=entry.index_of, default=op)
            where = user.location.name if isinstance(user.location, NameLoc) else ""
            # the model block of the first use; without a location, the first user itself
            # (Inductor's rule: gathers feeding one op share a bucket)
            block = module_of(where) if where else f"#{entry.index_of(user)}"
            param = casts.get(op.operand(0), op.operand(0))
            fqn = func.arg_attrs(param.index).get(PARAM_ATTR)
            if fqn is not None and fqn.value in manual:   # type: ignore[attr-defined]
                block = "=" + manual[fqn.value]   # type: ignore[attr-defined]
            phase = "bwd" if (op.result.name_hint or "").endswith("_bwd") else "fwd"
            dtype = op.operand(0).tensor_type.element_type  # one flat buffer per element type
            gathers.append(((op.attributes["mesh"], op.attr_value("axis"), dtype, phase, block), op))
    made = 0
    order = {id(op): i for i, op in enumerate(entry.ops)}
    groups = _auto_groups(gathers, entry, max_bytes) if mode == "auto" else _groups(gathers, max_bytes, order)
    for group in groups:
        first = min(group, key=entry.index_of)
        # placed just before the first use of any member (``schedule-collectives`` moves it
        # earlier for overlap), after every member's operand (a parameter, or its cast)
        need = min((u.owner for op in group for u in op.result.uses if u.owner.parent is entry),
                   key=entry.index_of, default=first)
        defs = [d for op in group if (d := op.operand(0).defining_op()) is not None]
        if any(entry.index_of(d) >= entry.index_of(need) for d in defs):
            continue   # a cast computed after the first use: keep this group per parameter
        bucket = Builder.before(need).create(
            AllGatherBucketOp, [op.operand(0) for op in group],
            {"mesh": first.attributes["mesh"], "axis": first.attributes["axis"],
             "dims": ArrayAttr(tuple(IntegerAttr(op.attr_value("dim")) for op in group)),  # type: ignore[arg-type]
             **_member_sizes(group, gathered_is_result=True)},
            result_types=[op.result.type for op in group], location=first.location)
        _replace(group, bucket, rewriter)
        made += 1
    grads = _gradients(func)
    for kind, bucket_cls in ((ReduceScatterOp, ReduceScatterBucketOp), (AllReduceOp, AllReduceBucketOp)):
        made += _bucket_reductions(entry, kind, bucket_cls, grads, max_bytes, rewriter, manual)
    return made + _bucket_adjacent_all_reduces(entry, max_bytes, rewriter)


def _bucket_adjacent_all_reduces(entry: Any, max_bytes: int, rewriter: Rewriter) -> int:
    """All-reduces of one kind (mesh, axes, op, element type) issued one after another before
    any of their results is used (a loss's numerator and denominator) become one bucket, at the
    last of them."""
    runs: list[list[Operation]] = []
    run: list[Operation] = []
    for op in entry.ops:
        if isinstance(op, AllReduceOp) and "shard.sharding" not in op.attributes:
            key = (op.attributes["mesh"], op.axes, op.attr_value("op"), op.operand(0).tensor_type.element_type)
            first = run[0] if run else None
            if first is not None and key == (first.attributes["mesh"], first.axes, first.attr_value("op"),
                                             first.operand(0).tensor_type.element_type) \
                    and sum(_group_bytes(o) for o in run + [op]) <= max_bytes:
                run.append(op)
                continue
            runs.append(run)
            run = [op]
        elif run and any(v.defining_op() in run for v in op.operands):
            runs.append(run)      # a member's result is used: the run ends
            run = []
    runs.append(run)
    made = 0
    for group in (r for r in runs if len(r) > 1):
        last = group[-1]
        first = group[0]
        bucket = Builder.before(last).create(
            AllReduceBucketOp, [op.operand(0) for op in group],
            {k: first.attributes[k] for k in ("mesh", "axes", "op")},
            result_types=[op.result.type for op in group], location=first.location)
        _replace(group, bucket, rewriter)
        made += 1
    return made


def _gradients(func: FuncOp) -> dict[int, str]:
    """id of a value → the parameter whose gradient it is: the function's ``spmdc.grad_of``
    results, and the values they are computed from elementwise (a clipped gradient's
    reduce-scatter feeds the clipping's multiply, not the return) or by a further reduction
    (HSDP: the reduce-scatter over dp feeds the all-reduce over the replicas; a heterogeneous
    plan's reduce-scatter feeds the split all-reduce across device groups)."""
    ret = func.return_op
    grads: dict[int, str] = {}
    frontier = []
    for i, v in enumerate(ret.operands):
        g = func.res_attrs(i).get(GRAD_OF_ATTR)
        if g is not None:
            grads[id(v)] = g.value  # type: ignore[attr-defined]
            frontier.append((v, g.value, 0))  # type: ignore[attr-defined]
    while frontier:   # up to the clipping's multiply: two elementwise steps back
        v, name, depth = frontier.pop()
        d = v.defining_op()
        if d is not None and d.name == "comm.split_all_reduce" and depth < 3:   # across device groups
            x = d.operands[v.index]   # type: ignore[attr-defined]
            if id(x) not in grads:
                grads[id(x)] = name
                frontier.append((x, name, depth + 1))
            continue
        if d is None or depth >= 3 or d.name not in ("tensor.mul", "tensor.convert", "tensor.cast",
                                                     "comm.all_reduce"):
            continue
        for x in d.operands:
            if id(x) not in grads and x.type == v.type:
                grads[id(x)] = name
                frontier.append((x, name, depth + 1))
    return grads


def _manual_buckets(func: FuncOp) -> dict[str, str]:
    """Parameter FQN → its manual bucket (``spmdc.bucket``, from the plan's ``buckets``)."""
    out = {}
    for i in range(len(func.args)):
        attrs = func.arg_attrs(i)
        if BUCKET_ATTR in attrs and PARAM_ATTR in attrs:
            out[attrs[PARAM_ATTR].value] = attrs[BUCKET_ATTR].value  # type: ignore[attr-defined]
    return out


def _bucket_reductions(entry: Any, kind: type, bucket_cls: type, grads: dict[int, str], max_bytes: int,
                       rewriter: Rewriter, manual: dict[str, str]) -> int:
    """Gradient reductions of one kind, per (mesh, axes, op, element type, block), one bucket
    each right after its last operand is computed (when every member's users come later)."""
    members = []
    for op in entry.ops:
        if isinstance(op, kind) and id(op.result) in grads and "shard.sharding" not in op.attributes:
            axes = op.attr_value("axis") if kind is ReduceScatterOp else op.axes
            fqn = grads[id(op.result)]
            key = (op.attributes["mesh"], axes, op.attr_value("op"), op.operand(0).tensor_type.element_type,
                   "=" + manual[fqn] if fqn in manual else module_of(fqn))
            members.append((key, op))
    order = {id(op): i for i, op in enumerate(entry.ops)}
    made = 0
    for group in _groups(members, max_bytes, order):
        last_def = max((op.operand(0).defining_op() for op in group),
                       key=lambda d: entry.index_of(d) if d is not None else -1)
        at = entry.index_of(last_def) if last_def is not None else -1
        if any(entry.index_of(u.owner) <= at for op in group for u in op.result.uses):
            continue   # a member is used before the bucket could run: keep it per parameter
        anchor = Builder.after(last_def) if last_def is not None else Builder.before(min(group, key=entry.index_of))
        first = group[0]
        attrs = {k: first.attributes[k] for k in ("mesh", "axis", "axes", "op") if k in first.attributes}
        if kind is ReduceScatterOp:
            attrs["dims"] = ArrayAttr(tuple(IntegerAttr(op.attr_value("dim")) for op in group))  # type: ignore[arg-type]
            attrs.update(_member_sizes(group, gathered_is_result=False))
        bucket = anchor.create(bucket_cls, [op.operand(0) for op in group], attrs,
                               result_types=[op.result.type for op in group], location=first.location)
        _replace(group, bucket, rewriter)
        made += 1
    return made


@dataclass
class BucketCollectives(ModulePass):
    """Merge parameter all-gathers and gradient reduce-scatters per model block."""

    name: ClassVar[str] = "bucket-collectives"
    max_bytes: int = 128 * 1024 * 1024   # whole-tensor bytes: a block of a large model stays one bucket
    mode: str = "blocks"
    """``blocks``: parameter gathers bucketed per model block (and the plan's manual buckets);
    ``auto``: by the cost model, ignoring blocks (:func:`_auto_groups`)."""

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ValueError(f"max-bytes must be positive, got {self.max_bytes}")
        if self.mode not in ("blocks", "auto"):
            raise ValueError(f"mode must be 'blocks' or 'auto', got '{self.mode}'")

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp) and RANK_ATTR in op.attributes:
                mode = op.attr_value(BUCKETS_ATTR, self.mode)   # a plan's `buckets: auto`
                bucket_function(op, self.max_bytes, str(mode))


PASS = BucketCollectives
