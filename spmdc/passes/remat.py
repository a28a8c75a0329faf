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
already written in place), every user of it and of its views is an op of the same block (a view made
before the peak and read after it is cloned after the op), none of its uses before the peak is still
in flight at it (a started collective whose wait is not before the peak: a mixed-precision
parameter's cast, gathered in the forward and again in the backward, qualifies), and each operand of
its op can be had at the later read for fewer bytes than the value holds:

* for nothing when it is a scalar ``tensor.constant`` (cloned with it), an argument of the function
  (the caller holds it: a mixed-precision parameter's cast is recomputed from the parameter), a
  buffer read there or later anyway, or a parameter's gather when the same parameter is gathered
  again before that read (the backward's re-gather of an FSDP block: a normalization's output
  ``xhat * w + b``, which the next linear layer's weight gradient reads, is recomputed from the
  normalized input its own gradient keeps and the re-gathered ``w`` and ``b``);
* for its own bytes, kept alive until the read, when it dies before it (a float32 cast of a bfloat16
  activation is recomputed from the activation, half its size);
* or recomputed in turn, when its op is elementwise too (up to four ops deep): SiLU's output
  ``x * sigmoid(x)`` comes back from the gate projection ``x`` its derivative keeps anyway::

    %s = tensor.sigmoid %x : tensor<128x256xf32>
    %m = tensor.mul %x, %s : tensor<128x256xf32>        // dies in the forward now
    ...
    %s_1 = tensor.sigmoid %x : tensor<128x256xf32>
    %m_1 = tensor.mul %x, %s_1 : tensor<128x256xf32>
    %gu = tensor.mul %dy, %m_1 : tensor<128x256xf32>

A collective's result is never an operand otherwise (an all-reduce may reduce its operand in place),
nor a buffer a collective reads. The largest qualifying value alive at the peak is recomputed, with
every other one there at once but for one feeding another's ops, or one whose recomputation (its
chain's intermediates, the buffers kept for it) would itself reach the peak where it runs; then the
peak is found again, until no value at it qualifies. The pass runs before ``schedule-collectives``
(prefetches are then kept under the lowered peak) and again after it, at the peak the schedule moved.
Functions whose ops already write in place (``inplace``) are left alone: a buffer written there is
not the value it held.
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


@dataclass
class _Recipe:
    """How to recompute a value before its first read after the peak (index ``first``): ``ops`` to
    clone there in order (scalar constants, elementwise ops of a chain, the value's op, views of it);
    ``kept``: bytes of buffers that die before ``first`` and are kept alive until then instead;
    ``transient``: bytes the chain's intermediate results allocate there; ``subst``: operands the
    clones read in place of the originals (a parameter's gather in the backward for the forward's)."""

    first: int
    ops: list[Operation]
    redo: list[Operation]
    kept: int
    transient: int
    subst: dict[Value, Value]


_CHAIN_DEPTH = 4   # elementwise ops recomputed behind the value's own, at most, per operand path


def _recomputable(op: Operation | None) -> bool:
    from spmdc.dialects.tensor.elementwise import ElementwiseOp

    return isinstance(op, ElementwiseOp) and len(op.results) == 1 and not op.regions and \
        "inplace" not in op.attributes


_GATHERS = ("comm.all_gather", "comm.all_gather_bucket")


def _attrs(op: Operation) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in op.attributes.items()))


def _key(v: Value, memo: dict[Value, object], depth: int = 8) -> object:
    """A structural key of ``v``: equal keys, equal values. An argument; a pure elementwise op's result
    from its operands' keys; a gather's result (or its wait's) from the gathered operands' keys (the
    backward's re-gather of a parameter is the forward's gather again); anything else itself."""
    from spmdc.dialects.comm.async_ops import StartOp, WaitOp, collective_kind

    if v in memo:
        return memo[v]
    op = v.defining_op()
    key: object = ("value", id(v))
    if op is None:
        key = ("arg", id(getattr(v, "block", None)), getattr(v, "index", -1))
    elif depth > 0 and _recomputable(op):
        key = (op.name, _attrs(op), str(v.type), tuple(_key(o, memo, depth - 1) for o in op.operands))
    elif depth > 0:
        start = op.operand(0).defining_op() if isinstance(op, WaitOp) else op
        kind = collective_kind(start) if start is not None else None
        if kind == "comm.all_gather":
            key = ("gather", _attrs(start), str(v.type), _key(start.operand(0), memo, depth - 1))
        elif kind == "comm.all_gather_bucket":   # (per member: buckets of the forward and backward differ)
            k = getattr(v, "index", 0)
            sync = start.as_sync() if isinstance(start, StartOp) else start
            sizes = sync.member_sizes()  # type: ignore[attr-defined]
            key = ("gather", str(start.attributes["mesh"]), sync.axis, sync.dims[k],  # type: ignore[attr-defined]
                   None if sizes is None else tuple(sizes[k]), str(v.type), _key(start.operand(k), memo, depth - 1))
    memo[v] = key
    return key


@dataclass
class _Ctx:
    """One round's view of the block: each buffer's last read, views, the index of each op, and the
    gathers' results by key (:func:`_key`)."""

    block: object
    index: dict[Operation, int]
    bases: dict[Value, Value]
    views: dict[Value, list[Value]]
    last: dict[Value, int]
    gathered: dict[object, list[Value]]
    memo: dict[Value, object]


def _gathered(ops: list[Operation], memo: dict[Value, object]) -> dict[object, list[Value]]:
    """Every gather's results (a synchronous gather's, a started one's wait's) by :func:`_key`."""
    from spmdc.dialects.comm.async_ops import StartOp, WaitOp, collective_kind

    out: dict[object, list[Value]] = {}
    for op in ops:
        made = op.operand(0).defining_op() if isinstance(op, WaitOp) else op
        if made is not None and collective_kind(made) in _GATHERS and (isinstance(op, WaitOp) or
                                                                       not isinstance(op, StartOp)):
            for r in op.results:
                out.setdefault(_key(r, memo), []).append(r)
    return out


def _operand_plan(a: Value, first: int, depth: int, ctx: _Ctx
                  ) -> tuple[int, list[Operation], dict[Value, Value]] | None:
    """The cheapest way to have operand ``a`` at ``first``: (bytes kept alive for it, ops to clone,
    values to read instead) -- nothing when its buffer is alive there anyway (or is an argument, or a
    scalar constant to clone, or a gathered parameter gathered again and alive there: read that
    one); else its buffer kept alive, or its own elementwise op recomputed from its operands in
    turn; None when it is another collective's (or read by one: an all-reduce may reduce in place)."""
    from spmdc.dialects.tensor.shape import ConstantOp

    src = a.defining_op()
    if isinstance(src, ConstantOp) and not src.operands:
        return 0, [src], {}
    b = ctx.bases.get(a, a)
    if any(_is_comm(u) for x in [b] + ctx.views.get(b, []) for u in x.users):
        return None
    if _is_comm(src) or _is_comm(b.defining_op()):
        if b is not a:
            return None
        # the same parameter gathered before ``first`` (the backward's re-gather, or this one): read
        # there, kept alive until then when it is not anyway
        best_e: tuple[int, list[Operation], dict[Value, Value]] | None = None
        for e in ctx.gathered.get(_key(a, ctx.memo), []):
            made = e.defining_op()
            if made not in ctx.index or ctx.index[made] >= first or any(_is_comm(u) for u in e.users):
                continue
            cost = 0 if ctx.last.get(e, -1) >= first else e.type.num_bytes   # type: ignore[attr-defined]
            if best_e is None or cost < best_e[0]:
                best_e = (cost, [], {} if e is a else {a: e})
        return best_e
    if getattr(b, "block", None) is ctx.block or ctx.last.get(b, -1) >= first:   # an argument, or alive there
        return 0, [], {}
    best: tuple[int, list[Operation], dict[Value, Value]] = (b.type.num_bytes, [], {})   # type: ignore[attr-defined]
    if depth > 0 and b is a and _recomputable(src):
        chain: list[Operation] = []
        subst: dict[Value, Value] = {}
        cost = 0
        for o in src.operands:  # type: ignore[union-attr]
            got = _operand_plan(o, first, depth - 1, ctx)
            if got is None:
                return best
            cost += got[0]
            chain += [op for op in got[1] if op not in chain]
            subst.update(got[2])
        if cost < best[0]:
            best = (cost, chain + [src], subst)  # type: ignore[list-item]
    return best


def _candidate(v: Value, peak: int, ctx: _Ctx) -> _Recipe | None:
    """How ``v`` may be recomputed at its first read after ``peak`` (see :class:`_Recipe`), else
    None."""
    from spmdc.dialects.comm.async_ops import StartOp

    index, views, block = ctx.index, ctx.views, ctx.block
    maker = v.defining_op()
    if not _recomputable(maker):
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
            elif isinstance(user, StartOp) and not all(index.get(u, peak) < peak for u in user.result.users):
                return None   # in flight at the peak (its wait is not before it)
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
    kept = 0
    ops: list[Operation] = []
    subst: dict[Value, Value] = {}
    for a in maker.operands:  # type: ignore[union-attr]
        got = _operand_plan(a, first, _CHAIN_DEPTH, ctx)
        if got is None:
            return None
        kept += got[0]
        ops += [op for op in got[1] if op not in ops]
        subst.update(got[2])
    if kept >= v.type.num_bytes:   # type: ignore[attr-defined]
        return None
    transient = sum(op.results[0].type.num_bytes for op in ops if op.results and op.operands)   # type: ignore[attr-defined]
    return _Recipe(first, ops + [maker], redo, kept, transient, subst)  # type: ignore[list-item]


def _erase_unused(ops: list[Operation]) -> None:
    """Erase those of the recomputed values' original ops (and, in turn, their operands' pure ops)
    that nothing reads any more."""
    from spmdc.passes.dce import is_trivially_dead

    work = list(reversed(ops))
    while work:
        op = work.pop(0)
        if op.parent is None or not is_trivially_dead(op):
            continue
        makers = [m for a in op.operands if (m := a.defining_op()) is not None]
        op.erase()
        work += makers


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
        live_at = [0] * len(ops)
        for i in range(len(ops)):
            live += delta[i]
            live_at[i] = live
            if live > top:
                top, peak = live, i
        index = {op: i for i, op in enumerate(ops)}
        last = _uses_by_index(ops, bases)
        views: dict[Value, list[Value]] = {}
        for w, b in bases.items():
            if w is not b:
                views.setdefault(b, []).append(w)
        # every value at the peak that qualifies, largest first, but none feeding another's ops (its
        # uses would change under them), and none whose recomputation (its chain's intermediates, the
        # buffers kept for it) would reach the peak where it runs: each lowers the peak, none raises
        # anything above it
        memo: dict[Value, object] = {}
        ctx = _Ctx(block, index, bases, views, last, _gathered(ops, memo), memo)
        found = []
        for v, (b, e) in sorted(life.items(), key=lambda kv: -kv[0].type.num_bytes):   # type: ignore[attr-defined]
            if b < peak < e and (got := _candidate(v, peak, ctx)) is not None:
                found.append((v, got))
        chosen: list[tuple[Value, _Recipe]] = []
        taken: set[Value] = set()
        fed: set[Value] = set()   # (operands of the chosen ops)
        kept = 0
        for v, r in found:
            feeds = {bases.get(a, a) for op in r.ops for a in op.operands} | set(r.subst.values())
            if v in fed or feeds & taken or live_at[r.first] + r.transient + kept + r.kept >= top:
                continue
            chosen.append((v, r))
            taken.add(v)
            fed |= feeds
            kept += r.kept
        if not chosen:
            return done
        moved: list[Operation] = []
        for v, r in chosen[:limit - done]:
            anchor = ops[r.first]
            mapping: dict[Value, Value] = dict(r.subst)
            for op in r.ops + r.redo:
                block.insert_before(anchor, op.clone(mapping))   # type: ignore[attr-defined]
            for old in [v] + [op.results[0] for op in r.redo]:
                for use in list(old.uses):
                    if use.owner in index and index[use.owner] > peak:
                        use.owner.set_operand(use.index, mapping[old])
            moved += r.redo + r.ops
            done += 1
        _erase_unused(moved)   # (a value read only after the peak moved there whole)
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
