"""``in-place``: an elementwise op whose operand dies at it writes its result into that operand.

A decomposed backward is long chains of elementwise ops on tensors that die at their next use
(``mul``, ``add``, ``tanh``, ``mul``, ...); out of place, each link allocates a buffer while its
input is still alive, so two buffers of the chain are live at every step where one would do. This
pass marks such an op ``inplace = k`` (the index of the operand receiving the result); the code
generator then emits torch's ``out=`` form and the memory estimate counts no allocation for it.

Before::

    %2 = tensor.mul %0, %1 : tensor<64x64xf32>
    %3 = tensor.tanh %2 : tensor<64x64xf32>          // %2 dies here
    func.return %3 : tensor<64x64xf32>

After::

    %2 = tensor.mul %0, %1 : tensor<64x64xf32>
    %3 = tensor.tanh %2 {inplace = 0} : tensor<64x64xf32>
    func.return %3 : tensor<64x64xf32>

(generated: ``tanh = torch.tanh(mul, out=mul)``). Operand ``k`` qualifies when

* the op has a form writing into operand ``k`` (``inplace_expr``: an elementwise op's ``out=``,
  ``tensor.scatter``'s ``scatter_`` into its first operand) and operand ``k`` has the result's type
  (no broadcast to a larger shape, no dtype change);
* the operand is a buffer this function allocated with an op that always returns a new tensor
  (an elementwise op other than a cast, a matmul, a softmax, a reduction, a gather or scatter, a
  splat constant: ``torch.full``): never an argument
  (a parameter, an input), a view, a collective's result (which may be a view of an argument)
  or a cast (``.to`` returns its input itself when the type already matches);
* this op is the last use of that buffer and of every view of it (:func:`spmdc.passes.memory.lifetimes`:
  a started collective's operands count until its wait); every user of the buffer is in this
  block and is this op, a view, an op returning a new tensor or a collective's start (no alias of
  it escapes); no other operand of the op reads the same buffer through a view (a transpose of it
  would be read while it is written).

Ops inside ``kernel.fused`` regions are left alone (a Triton kernel allocates its own outputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.ir.core import Operation, Value
from spmdc.passes.pass_base import ModulePass

FRESH_OPS = frozenset({"tensor.matmul", "tensor.linear", "tensor.softmax", "tensor.log_softmax", "tensor.sum",
                       "tensor.mean", "tensor.var", "tensor.scatter", "tensor.gather"})


def allocates_fresh(op: Operation | None) -> bool:
    """Whether ``op``'s torch form always returns a new tensor (never one of its operands): a splat
    ``tensor.constant`` is ``torch.full`` on every call (a large dense one is a shared tensor)."""
    from spmdc.dialects.tensor.elementwise import CastOp, ElementwiseOp
    from spmdc.dialects.tensor.shape import ConstantOp

    if op is None:
        return False
    if isinstance(op, ConstantOp):
        return op.is_splat
    return (isinstance(op, ElementwiseOp) and not isinstance(op, CastOp)) or op.name in FRESH_OPS


def mark_in_place(ops: list[Operation]) -> int:
    """Mark the ops of one block that may write into a dying operand; returns how many."""
    from spmdc.passes.memory import lifetimes

    bases: dict[Value, Value] = {}
    life = lifetimes(ops, bases)
    views: dict[Value, list[Value]] = {}
    for w, b in bases.items():
        views.setdefault(b, []).append(w)
    marked = 0
    for i, op in enumerate(ops):
        if getattr(op, "inplace_expr", None) is None or "inplace" in op.attributes or len(op.results) != 1:
            continue
        names = [f"_{j}" for j in range(len(op.operands))]
        for k, v in enumerate(op.operands):
            if v.type != op.results[0].type or v in bases or life.get(v, (0, -1))[1] != i:
                continue
            if not allocates_fresh(v.defining_op()) or op.inplace_expr(names, k) is None:
                continue
            if any(u is not v and bases.get(u, u) is v for u in op.operands):
                continue
            if not _no_alias_escapes(op, [v] + views.get(v, [])):
                continue
            op.set_attr("inplace", k)
            marked += 1
            break
    return marked


def _no_alias_escapes(op: Operation, group: list[Value]) -> bool:
    """Whether every user of the buffer (``group``: it and its views) is ``op``, a view, an op
    returning a new tensor or a collective's start (which packs or holds it until its wait), all
    in ``op``'s block: no other tensor may share the buffer once ``op`` writes into it."""
    from spmdc.dialects.comm.async_ops import StartOp

    for w in group:
        for user in w.users:
            if user.parent is not op.parent:
                return False
            if not (user is op or user.has_trait("View") or allocates_fresh(user) or isinstance(user, StartOp)):
                return False
    return True


@dataclass
class InPlace(ModulePass):
    """Elementwise ops write into an operand that dies at them (``inplace = k``)."""

    name: ClassVar[str] = "in-place"

    def run(self, module: Operation) -> None:
        from spmdc.dialects.func import FuncOp

        for op in module.body.ops:
            if isinstance(op, FuncOp):
                mark_in_place(list(op.body.ops))


PASS = InPlace
