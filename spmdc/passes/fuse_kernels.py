"""``fuse-kernels``: group elementwise chains (and one trailing row reduction) into ``kernel.fused``.

Greedy producer→consumer fusion over each function body, in program order. An op joins
the region of one of its operands' producers when the result is still one kernel:

* ``elementwise`` regions: elementwise/broadcast ops; every value a region yields has the
  region's iteration shape (values of smaller, broadcast shapes may live inside it);
* ``reduction`` regions: an elementwise prologue over the row shape ``[..., N]`` and at
  most one row op at the end — ``sum``/``max``/``mean``/``var`` over the last dim, or
  ``softmax``/``log_softmax`` along it; nothing is added after it;
* ``matmul`` regions (option ``matmul-epilogue``): one ``tensor.matmul`` first, then
  elementwise epilogue ops on its result shape (bias, GELU/SiLU, residual add).

Never across a ``comm`` op, a call or any op with regions (they close every open
region), never across a function boundary, never duplicating work: a producer whose
result is used outside the region only joins when that result becomes a region output
(and has the iteration shape). Splat constants are cloned into the regions using them.

Before::

    %0 = tensor.add %x, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    %1 = tensor.relu %0 : tensor<8x16xf32>
    %2 = tensor.sum %1 {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
    %3 = comm.all_reduce %2 {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x1xf32>

After::

    %0 = kernel.fused %x, %b {kind = "reduction"} : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x1xf32> {
    ^bb0(%x_1: tensor<8x16xf32>, %b_1: tensor<16xf32>):
      %1 = tensor.add %x_1, %b_1 : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
      %2 = tensor.relu %1 : tensor<8x16xf32>
      %3 = tensor.sum %2 {dims = [1], keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
      kernel.yield %3 : tensor<8x1xf32>
    }
    %3 = comm.all_reduce %0 {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x1xf32>
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import ClassVar

from spmdc.dialects.kernel import FusedOp, YieldOp
from spmdc.dialects.tensor.reduction import ReduceOp
from spmdc.ir.core import Block, Operation, Region, Value
from spmdc.passes.pass_base import ModulePass

_ROLES = {"elementwise": "ew", "row": "red", "matmul": "mm"}


def is_splat_constant(v: Value) -> bool:
    op = v.defining_op()
    if op is None or op.name != "tensor.constant":
        return False
    vals = getattr(op.attributes["value"], "values", ())
    return len(vals) == 1


def classify(op: Operation) -> str | None:
    """``"ew"``, ``"red"``, ``"mm"`` or None (not fusable): what the op declares it can be in a
    kernel (``kernel_role``, beside its class in :mod:`spmdc.dialects.tensor`)."""
    role = getattr(op, "kernel_role", None)
    return _ROLES.get(role()) if role is not None and not op.regions else None  # type: ignore[arg-type]


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


class Group:
    def __init__(self, op: Operation, role: str):
        self.ops = [op]
        self.kind = {"ew": "elementwise", "red": "reduction", "mm": "matmul"}[role]
        self.sealed = role == "red"


@dataclass
class FuseKernels(ModulePass):
    """Elementwise chains (+ one trailing row reduction, or a leading matmul) → ``kernel.fused``."""

    name: ClassVar[str] = "fuse-kernels"
    matmul_epilogue: bool = False      # fuse matmul + elementwise epilogue into one region
    min_ops: int = 1                   # smallest group that becomes a region

    def __post_init__(self) -> None:
        if self.min_ops < 1:
            raise ValueError(f"min-ops must be at least 1, got {self.min_ops}")

    def run(self, module: Operation) -> None:
        from spmdc.dialects.func import FuncOp

        for op in list(module.walk()):
            if isinstance(op, FuncOp):
                self.fuse_block(op.body)

    # -- grouping -----------------------------------------------------------------------------
    def fuse_block(self, block: Block) -> None:
        self.pos = {id(op): i for i, op in enumerate(block.ops)}
        self.block = block
        group_of: dict[int, Group] = {}
        groups: list[Group] = []
        open_groups: list[Group] = []
        for op in block.ops:
            role = classify(op)
            if role == "mm" and not self.matmul_epilogue:
                role = None
            if role is None:
                if op.name.startswith("comm.") or op.regions or "Pure" not in op.traits or op.name == "func.call":
                    for g in open_groups:
                        g.sealed = True
                    open_groups = []
                continue
            producers: list[Group] = []
            for v in op.operands:
                d = v.defining_op()
                g = group_of.get(id(d)) if d is not None else None
                if g is not None and not g.sealed and g not in producers:
                    producers.append(g)
            joined = None
            if role != "mm":
                for g in producers:
                    if self.legal(g.ops + [op], g.kind if role == "ew" else self._red_kind(g)):
                        joined = g
                        break
            if joined is None:
                joined = Group(op, role)
                groups.append(joined)
                open_groups.append(joined)
            else:
                joined.ops.append(op)
                if role == "red":
                    joined.kind, joined.sealed = "reduction", True
                for g in producers:  # absorb the other producers' regions when still one kernel
                    if g is joined or g.sealed or g.kind != "elementwise":
                        continue
                    merged = sorted(g.ops + joined.ops, key=lambda o: self.pos[id(o)])
                    if self.legal(merged, joined.kind):
                        joined.ops = merged
                        g.ops = []
                        for o in merged:
                            group_of[id(o)] = joined
            group_of[id(op)] = joined
        for g in groups:
            if len(g.ops) >= max(1, self.min_ops):
                self.materialize(g)

    @staticmethod
    def _red_kind(g: Group) -> str:
        return "reduction" if g.kind == "elementwise" else "invalid"

    def legal(self, ops: list[Operation], kind: str) -> bool:
        if kind == "invalid":
            return False
        members = {id(o) for o in ops}
        last = max(self.pos[id(o)] for o in ops)
        reds = [o for o in ops if classify(o) == "red"]
        mms = [o for o in ops if o.name == "tensor.matmul"]
        if len(reds) > 1 or (kind == "matmul") != bool(mms) or len(mms) > 1:
            return False
        if reds and any(u is not None and id(u) in members for u in _users(reds[0])):
            return False
        if mms and any(v.defining_op() is not None and id(v.defining_op()) in members for v in mms[0].operands):
            return False
        if kind == "reduction":
            space = reds[0].operand(0).type.shape
        elif kind == "matmul":
            space = mms[0].result.type.shape
        else:
            space = max((o.result.type.shape for o in ops), key=lambda s: (prod(s), len(s)))
        for o in ops:
            shape = o.result.type.shape
            is_red = o in reds and isinstance(o, ReduceOp)
            if not is_red and not _broadcasts_to(shape, space):
                return False
            for u in _users(o):
                if u is not None and id(u) in members:
                    continue
                if u is not None and u.parent is self.block and self.pos.get(id(u), last + 1) <= last:
                    return False  # an outside user before the region's position
                if not is_red and shape != space:
                    return False  # an output must be computed for every point of the space
        return True

    # -- rewriting ----------------------------------------------------------------------------
    def materialize(self, g: Group) -> None:
        members = {id(o) for o in g.ops}
        inputs: list[Value] = []
        outputs: list[Value] = []
        for o in g.ops:
            for v in o.operands:
                d = v.defining_op()
                if (d is None or id(d) not in members) and not is_splat_constant(v) and v not in inputs:
                    inputs.append(v)
            for r in o.results:
                if any(u is None or id(u) not in members for u in _users(o, r)):
                    outputs.append(r)
        body = Block([v.type for v in inputs])
        mapping: dict[Value, Value] = {}
        for v, a in zip(inputs, body.args):
            mapping[v] = a
            a.name_hint = v.name_hint
        for o in g.ops:
            for v in o.operands:
                if v not in mapping and is_splat_constant(v):
                    c = v.defining_op().clone({})  # type: ignore[union-attr]
                    body.append(c)
                    mapping[v] = c.result
            body.append(o.clone(mapping))
        body.append(YieldOp.create([mapping[r] for r in outputs], result_types=[]))
        anchor = g.ops[-1]
        fused = FusedOp.create(inputs, {"kind": g.kind}, result_types=[r.type for r in outputs],
                               regions=[Region([body])], location=anchor.location)
        self.block.insert_before(anchor, fused)
        for r, new in zip(outputs, fused.results):
            new.name_hint = r.name_hint
            r.replace_all_uses_with(new)
        consts = {id(v.defining_op()): v.defining_op() for o in g.ops for v in o.operands if is_splat_constant(v)}
        for o in reversed(g.ops):
            o.erase()
        for c in consts.values():
            if c is not None and c.parent is not None and not any(r.uses for r in c.results):
                c.erase()


def _users(op: Operation, value: Value | None = None) -> list[Operation | None]:
    """Users of ``op``'s results as ops of the same block (None: used by something unknown)."""
    out: list[Operation | None] = []
    for r in ([value] if value is not None else op.results):
        for u in r.uses:
            owner = u.owner
            while owner is not None and owner.parent is not op.parent:
                owner = owner.parent_op()
            out.append(owner)
    return out


PASS = FuseKernels
