"""``remat``: recompute a cheap elementwise value where the backward needs it again, instead of
keeping it alive through the program's peak.

A training step holds the forward's activations until the backward reads them; some of them are one
elementwise op away from values the backward keeps anyway. GELU's output is read by the weight
gradient of the next linear layer, and its input by GELU's own derivative: both are saved, though one
would do. Where a value produced by an elementwise op is alive at the program's peak (the static
estimate, :mod:`spmdc.passes.memory`) without being read there, and every operand of that op is alive
anyway where the value is read again, this pass clones the op right before that later read: the value
dies at its earlier uses, the peak loses its bytes, the step runs the op once more (torch.compile's
partitioner recomputes such ops for the same reason). The recomputed op reads the same operands,
so its result is bitwise the same.

Before (the peak at ``%w``'s matmul, ``%g`` alive there unread)::

    %g = tensor.gelu %a : tensor<16x1024xf32>
    %y = tensor.matmul %g, %w1 : ...
    %big = tensor.matmul %y, %w2 : ...            // the peak
    ...
    %dw = tensor.matmul %dyT, %g : ...            // %a is alive here anyway
    %d = tensor.mul %a, %c : ...

After::

    %g = tensor.gelu %a : tensor<16x1024xf32>
    %y = tensor.matmul %g, %w1 : ...              // %g dies here
    %big = tensor.matmul %y, %w2 : ...
    ...
    %g_1 = tensor.gelu %a : tensor<16x1024xf32>   // recomputed
    %dw = tensor.matmul %dyT, %g_1 : ...
    %d = tensor.mul %a, %c : ...

A value qualifies when its op is an elementwise op (``tensor`` dialect, no random numbers, not
already written in place), every user of it and of its views is an op of the same block (a view
made before the peak and read after it is cloned after the op), none of its uses before the peak is
still in flight at it (a started collective), and each operand of its op is a ``tensor.constant``
(cloned with it) or a value whose buffer is read at or after the value's next use anyway, produced
by no collective and read by none (an all-reduce may reduce its operand in place). The largest
such value alive at the peak is recomputed, with every other one there at once but for one feeding
another's op; then the peak is found again, until no value at it qualifies. Functions whose ops already write in place
(``inplace``) are left alone: a buffer written there is not the value it held.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.ir.core import Operation, Value
from spmdc.passes.pass_base import ModulePass


def _uses_by_index(ops: list[Operation], bases: dict[Value, Value]) -> dict[Value, int]:
    """Each buffer (a value not a view; arguments included) → the index of its last read, a started
    collective's operands read until its wait."""
    from spmdc.dialects.comm.async_ops import WaitOp

    last: dict[Value, int] = {}
    for i, op in enumerate(ops):
        uses = list(op.operands)
        if isinstance(op, WaitOp) and op.operand(0).defining_op() is not None:
            uses += list(op.operand(0).defining_op().operands)
        for v in uses:
            last[bases.get(v, v)] = i
    return last


def _is_comm(op: Operation | None) -> bool:
    return op is not None and op.name.startswith("comm.")


def _candidate(v: Value, peak: int, index: dict[Operation, int], views: dict[Value, list[Value]],
               bases: dict[Value, Value], last: dict[Value, int], block: object
               ) -> tuple[int, list[Operation], list[Operation]] | None:
    """(index of the first read after ``peak``, the constants to clone before the op, the views of
    ``v`` made before the peak and read after it, to clone after the op) when ``v`` may be recomputed
    there, else None."""
    from spmdc.dialects.comm.async_ops import StartOp
    from spmdc.dialects.tensor.elementwise import ElementwiseOp
    from spmdc.dialects.tensor.shape import ConstantOp

    maker = v.defining_op()
    if not isinstance(maker, ElementwiseOp) or len(maker.results) != 1 or maker.regions or \
            "inplace" in maker.attributes:
        return None
    group = [v] + views.get(v, [])
    late: list[int] = []
    reread: set[Value] = set()   # members read after the peak
    for w in group:
        for user in w.users:
            if user.parent is not block or user not in index:
                return None
            i = index[user]
            if i > peak:
                if user.has_trait("Terminator"):
                    return None
                late.append(i)
                reread.add(w)
            elif isinstance(user, StartOp):
                return None   # in flight until its wait (maybe past the peak)
    if not late:
        return None
    # views made before the peak whose results (or views of them) are read after it: cloned too
    redo: list[Operation] = []
    for w in reversed(group[1:]):
        view = w.defining_op()
        if w in reread or any(r in reread for u in w.users if index[u] <= peak for r in u.results):
            if view is None or index[view] > peak:
                continue
            if len(view.operands) != 1 or len(view.results) != 1:
                return None
            reread.add(w)
            redo.append(view)
    redo.reverse()
    first = min(late)
    consts: list[Operation] = []
    for a in maker.operands:
        src = a.defining_op()
        if isinstance(src, ConstantOp) and not src.operands:
            consts.append(src)
            continue
        b = bases.get(a, a)
        if last.get(b, -1) < first or _is_comm(src) or _is_comm(b.defining_op()):
            return None
        if any(_is_comm(u) for x in [b] + views.get(b, []) for u in x.users):
            return None
    return first, consts, redo


def rematerialize(block: object, limit: int = 100_000) -> int:
    """Recompute values of ``block`` (a function body) per the module docstring; returns how many."""
    from spmdc.passes.memory import lifetimes

    if any("inplace" in op.attributes for op in block.ops):   # type: ignore[attr-defined]
        return 0
    done = 0
    while done < limit:
        ops: list[Operation] = list(block.ops)   # type: ignore[attr-defined]
        bases: dict[Value, Value] = {}
        life = lifetimes(ops, bases)
        delta = [0] * (len(ops) + 1)
        for v, (b, e) in life.items():
            delta[b] += v.type.num_bytes   # type: ignore[attr-defined]
            delta[e + 1] -= v.type.num_bytes   # type: ignore[attr-defined]
        live = top = peak = 0
        for i in range(len(ops)):
            live += delta[i]
            if live > top:
                top, peak = live, i
        index = {op: i for i, op in enumerate(ops)}
        last = _uses_by_index(ops, bases)
        views: dict[Value, list[Value]] = {}
        for w, b in bases.items():
            if w is not b:
                views.setdefault(b, []).append(w)
        # every value at the peak that qualifies, largest first, but none feeding another's op (its
        # uses would change under it): each lowers the peak, none raises anything elsewhere
        found = []
        for v, (b, e) in sorted(life.items(), key=lambda kv: -kv[0].type.num_bytes):   # type: ignore[attr-defined]
            if b < peak < e and (got := _candidate(v, peak, index, views, bases, last, block)) is not None:
                found.append((v, *got))
        chosen: list[tuple[Value, int, list[Operation], list[Operation]]] = []
        taken: set[Value] = set()
        fed: set[Value] = set()   # (operands of the chosen ops)
        for v, first, consts, redo in found:
            feeds = {bases.get(a, a) for a in v.defining_op().operands}
            if v in fed or feeds & taken:
                continue
            chosen.append((v, first, consts, redo))
            taken.add(v)
            fed |= feeds
        if not chosen:
            return done
        for v, first, consts, redo in chosen[:limit - done]:
            anchor = ops[first]
            mapping: dict[Value, Value] = {}
            for op in consts + [v.defining_op()] + redo:
                block.insert_before(anchor, op.clone(mapping))   # type: ignore[attr-defined]
            for old in [v] + [op.results[0] for op in redo]:
                for use in list(old.uses):
                    if use.owner in index and index[use.owner] > peak:
                        use.owner.set_operand(use.index, mapping[old])
            done += 1
    return done


@dataclass
class Remat(ModulePass):
    """Recompute elementwise values alive at the peak where they are read again."""

    name: ClassVar[str] = "remat"

    def run(self, module: Operation) -> None:
        from spmdc.dialects.func import FuncOp

        for op in module.body.ops:
            if isinstance(op, FuncOp):
                rematerialize(op.body)


PASS = Remat
