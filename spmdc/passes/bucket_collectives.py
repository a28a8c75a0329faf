"""``bucket-collectives``: one collective per block instead of one per parameter (SimpleFSDP).

On per-rank programs (after ``partition``): the all-gathers of parameters (arguments with
``spmdc.param``) are grouped by mesh axis, element type, phase (forward / backward re-gather) and model block
(``h.3``, ``wte``, ... from the op's location), and each group becomes one
``comm.all_gather_bucket`` placed where its first member was; the reduce-scatters that
store gradients (results returned as ``spmdc.grad_of``) are grouped by axis, reduction
and the parameter's block, and each group becomes one ``comm.reduce_scatter_bucket``
right after its last operand is computed. ``max-bytes`` caps a bucket (local bytes).

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

from spmdc.dialects.comm import (
    AllGatherBucketOp,
    AllGatherOp,
    AllReduceBucketOp,
    AllReduceOp,
    ReduceScatterBucketOp,
    ReduceScatterOp,
)
from spmdc.dialects.func import FuncOp
from spmdc.ir.attributes import ArrayAttr, IntegerAttr
from spmdc.ir.core import Operation
from spmdc.ir.location import NameLoc
from spmdc.ir.rewriter import Builder, Rewriter
from spmdc.passes.pass_base import ModulePass


def block_of(path: str) -> str:
    """``h.3.attn.q_proj.weight`` → ``h.3``; ``wte.weight`` → ``wte``."""
    parts = path.split("/")[0].split(".")
    if len(parts) > 1 and parts[1].isdigit():
        return ".".join(parts[:2])
    return parts[0]


def _groups(members: list[tuple[tuple, Operation]], max_bytes: int, order: dict[int, int]) -> list[list[Operation]]:
    """Buckets per key (its last element the model block), capped at ``max_bytes``; a bucket of
    one collective joins its neighbour in program order with the same key but the block (the
    embedding joins the first block, the final norm the last) instead of launching alone."""
    by_key: dict[tuple, list[list[Operation]]] = {}
    sizes: dict[tuple, int] = {}
    for key, op in members:
        nbytes = op.operand(0).tensor_type.num_bytes
        buckets = by_key.setdefault(key, [[]])
        if buckets[-1] and sizes[key] + nbytes > max_bytes:
            buckets.append([])
            sizes[key] = 0
        buckets[-1].append(op)
        sizes[key] = sizes.get(key, 0) + nbytes
    lanes: dict[tuple, list[list[Operation]]] = {}   # same key but the block, in program order
    for key, bs in by_key.items():
        lanes.setdefault(key[:-1], []).extend(bs)
    out = []
    for bs in lanes.values():
        bs.sort(key=lambda b: min(order[id(op)] for op in b))
        merged: list[list[Operation]] = []
        pending: list[Operation] = []   # singletons waiting for the next bucket
        for b in bs:
            size = sum(op.operand(0).tensor_type.num_bytes for op in b + pending)
            if len(b) == 1 and not pending and merged and sum(
                    op.operand(0).tensor_type.num_bytes for op in merged[-1] + b) <= max_bytes:
                merged[-1].extend(b)      # joins the previous bucket
            elif len(b) + len(pending) == 1:
                pending = list(b)         # wait for a later neighbour
            elif size <= max_bytes:
                merged.append(pending + b)
                pending = []
            else:
                merged.extend([pending, b] if pending else [b])
                pending = []
        if pending and merged and len(merged[-1]) > 1 and sum(
                op.operand(0).tensor_type.num_bytes for op in merged[-1] + pending) <= max_bytes:
            merged[-1].extend(pending)
        elif pending:
            merged.append(pending)
        out.extend(b for b in merged if len(b) > 1)
    return out


def _replace(group: list[Operation], bucket: Operation, rewriter: Rewriter) -> None:
    for op, res in zip(group, bucket.results):
        res.name_hint = op.result.name_hint
        rewriter.replace_op(op, [res])


def bucket_function(func: FuncOp, max_bytes: int) -> int:
    rewriter = Rewriter()
    entry = func.body
    gathers = []
    params = {a for i, a in enumerate(func.args) if "spmdc.param" in func.arg_attrs(i)}
    for op in entry.ops:
        if isinstance(op, AllGatherOp) and op.operand(0) in params and "shard.sharding" not in op.attributes:
            user = min((u.owner for u in op.result.uses), key=entry.index_of, default=op)
            where = user.location.name if isinstance(user.location, NameLoc) else ""
            # the model block of the first use; without a location, the first user itself
            # (Inductor's rule: gathers feeding one op share a bucket)
            block = block_of(where) if where else f"#{entry.index_of(user)}"
            phase = "bwd" if (op.result.name_hint or "").endswith("_bwd") else "fwd"
            dtype = op.operand(0).tensor_type.element_type  # one flat buffer per element type
            gathers.append(((op.attributes["mesh"], op.attr_value("axis"), dtype, phase, block), op))
    made = 0
    order = {id(op): i for i, op in enumerate(entry.ops)}
    for group in _groups(gathers, max_bytes, order):
        first = min(group, key=entry.index_of)
        # placed just before the first use of any member (``schedule-collectives`` moves it
        # earlier for overlap); operands are parameters, defined on entry
        need = min((u.owner for op in group for u in op.result.uses if u.owner.parent is entry),
                   key=entry.index_of, default=first)
        bucket = Builder.before(need).create(
            AllGatherBucketOp, [op.operand(0) for op in group],
            {"mesh": first.attributes["mesh"], "axis": first.attributes["axis"],
             "dims": ArrayAttr(tuple(IntegerAttr(op.attr_value("dim")) for op in group))},  # type: ignore[arg-type]
            result_types=[op.result.type for op in group], location=first.location)
        _replace(group, bucket, rewriter)
        made += 1
    grads = _gradients(func)
    for kind, bucket_cls in ((ReduceScatterOp, ReduceScatterBucketOp), (AllReduceOp, AllReduceBucketOp)):
        made += _bucket_reductions(entry, kind, bucket_cls, grads, max_bytes, rewriter)
    return made


def _gradients(func: FuncOp) -> dict[int, str]:
    """id of a value → the parameter whose gradient it is: the function's ``spmdc.grad_of``
    results, and the values they are computed from elementwise (a clipped gradient's
    reduce-scatter feeds the clipping's multiply, not the return)."""
    ret = func.return_op
    grads: dict[int, str] = {}
    frontier = []
    for i, v in enumerate(ret.operands):
        g = func.res_attrs(i).get("spmdc.grad_of")
        if g is not None:
            grads[id(v)] = g.value  # type: ignore[attr-defined]
            frontier.append((v, g.value, 0))  # type: ignore[attr-defined]
    while frontier:   # up to the clipping's multiply: two elementwise steps back
        v, name, depth = frontier.pop()
        d = v.defining_op()
        if d is None or depth >= 2 or d.name not in ("tensor.mul", "tensor.convert", "tensor.cast"):
            continue
        for x in d.operands:
            if id(x) not in grads and x.type == v.type:
                grads[id(x)] = name
                frontier.append((x, name, depth + 1))
    return grads


def _bucket_reductions(entry: Any, kind: type, bucket_cls: type, grads: dict[int, str], max_bytes: int,
                       rewriter: Rewriter) -> int:
    """Gradient reductions of one kind, per (mesh, axes, op, element type, block), one bucket
    each right after its last operand is computed (when every member's users come later)."""
    members = []
    for op in entry.ops:
        if isinstance(op, kind) and id(op.result) in grads and "shard.sharding" not in op.attributes:
            axes = op.attr_value("axis") if kind is ReduceScatterOp else op.axes
            key = (op.attributes["mesh"], axes, op.attr_value("op"), op.operand(0).tensor_type.element_type,
                   block_of(grads[id(op.result)]))
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
        bucket = anchor.create(bucket_cls, [op.operand(0) for op in group], attrs,
                               result_types=[op.result.type for op in group], location=first.location)
        _replace(group, bucket, rewriter)
        made += 1
    return made


@dataclass
class BucketCollectives(ModulePass):
    """Merge parameter all-gathers and gradient reduce-scatters per model block."""

    name: ClassVar[str] = "bucket-collectives"
    max_bytes: int = 25 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ValueError(f"max-bytes must be positive, got {self.max_bytes}")

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp) and "spmdc.rank" in op.attributes:
                bucket_function(op, self.max_bytes)


PASS = BucketCollectives
