"""``schedule-collectives``: split collectives into start/wait and move them apart so that
communication overlaps compute (SimpleFSDP's reordering), under a per-rank memory cap.

On per-rank programs (after ``partition`` and ``bucket-collectives``), every all-gather,
reduce-scatter and all-reduce (bucketed or not) becomes ``comm.*_start`` + ``comm.wait``.
Collectives form *lanes*: gathers, reduce-scatters and all-reduces, per mesh and axes. Then

1. each wait sinks to just before the first use of its results, but no further than the next
   start in its lane (a reduce-scatter is waited just before the next one is issued: one in
   flight per lane);
2. each start rises to just after the previous wait in its lane and after its operands are
   computed (the all-gather of block i+1 is issued right after block i's gather is waited,
   so it runs while block i computes; in the backward, the re-gathers in reverse block order
   likewise), unless that would lift the program's estimated peak memory
   (:mod:`spmdc.passes.memory`) above ``memory-cap`` bytes (0: no cap). Without a cap,
   ``keep-peak`` bounds the rise by the peak the program has with every start where it was:
   a prefetch never makes the peak higher (the backward's first re-gather is not issued during
   the loss, where the activations peak), nor does a wait that holds a pack while it sinks (a
   reduce-scatter's operands stay alive to its wait: under a cap, or keep-peak, it sinks only as
   far as they fit). Its decisions are taken from estimates that are the
   same on every rank unless the ranks' shapes differ (``spmdc.uneven``): there it is off.

A view read only by a start moves up first, to just after what it views (it computes nothing),
so that the start can rise as far as its data is ready. No op moves across a value it depends
on, and starts keep their relative order within a
lane. Ranks of one process group must issue its collectives in one order: every decision
above depends only on the program's structure, which is the same on every rank; the memory
cap is not (a rank's shards may be smaller), so under a cap a start also never rises above
another start on its process group (lanes of one group keep their program order).

Before::

    %a:2 = comm.all_gather_bucket %w0, %w1 {axis = "dp", dims = [0, 0], mesh = @m} : ...
    %y = tensor.matmul %x, %a#0 ...
    %b:2 = comm.all_gather_bucket %w2, %w3 {axis = "dp", dims = [0, 0], mesh = @m} : ...
    %z = tensor.matmul %y, %b#0 ...

After::

    %h = comm.all_gather_bucket_start %w0, %w1 {...} : (...) -> !comm.handle<...>
    %a:2 = comm.wait %h : ...
    %h_1 = comm.all_gather_bucket_start %w2, %w3 {...} : (...) -> !comm.handle<...>
    %y = tensor.matmul %x, %a#0 ...          // overlaps the second gather
    %b:2 = comm.wait %h_1 : ...
    %z = tensor.matmul %y, %b#0 ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.attrs import RANK_ATTR, UNEVEN_ATTR
from spmdc.dialects.comm import START_OPS, CollectiveOp, StartOp, WaitOp
from spmdc.dialects.func import FuncOp
from spmdc.ir.core import Block, Operation
from spmdc.ir.types import HandleType
from spmdc.passes.memory import profile
from spmdc.passes.pass_base import ModulePass

_LANE = {"comm.all_gather": "gather", "comm.all_gather_bucket": "gather",
         "comm.reduce_scatter": "reduce_scatter", "comm.reduce_scatter_bucket": "reduce_scatter",
         "comm.all_reduce": "all_reduce", "comm.all_reduce_bucket": "all_reduce"}


def split_async(block: Block) -> list[tuple[StartOp, WaitOp]]:
    """Replace each per-rank collective of a splittable kind by a start and, right after it,
    its wait (same meaning); return the pairs in program order."""
    pairs = []
    for op in list(block.ops):
        cls = START_OPS.get(op.name)
        if cls is None or not isinstance(op, CollectiveOp) or op.is_global():
            continue
        start = cls(list(op.operands), [HandleType(tuple(r.type for r in op.results))],  # type: ignore[arg-type]
                    dict(op.attributes), (), op.location)
        start.result.name_hint = (op.results[0].name_hint or "c") + "_h"
        wait = WaitOp([start.result], [r.type for r in op.results], {}, (), op.location)
        block.insert_before(op, start)
        block.insert_before(op, wait)
        for old, new in zip(op.results, wait.results):
            new.name_hint = old.name_hint
            old.replace_all_uses_with(new)
        op.erase()
        pairs.append((start, wait))
    return pairs


def lane(start: StartOp) -> tuple:
    return (_LANE[start.SYNC.name], start.symbol_ref("mesh"), start.axes)


def schedule_block(block: Block, memory_cap: int = 0, keep_peak: bool = False) -> list[tuple[StartOp, WaitOp]]:
    """Split and reorder ``block``'s collectives (see the module docstring); the pairs made.
    ``keep_peak`` (no cap given): starts rise only as far as the estimated peak allows."""
    pairs = split_async(block)
    if not pairs:
        return pairs
    _hoist_views(block, pairs)
    ops = block.ops
    by_lane: dict[tuple, list[tuple[StartOp, WaitOp]]] = {}
    for p in pairs:
        by_lane.setdefault(lane(p[0]), []).append(p)
    nxt = {id(w): (ps[k + 1][0] if k + 1 < len(ps) else None)
           for ps in by_lane.values() for k, (_, w) in enumerate(ps)}
    prev = {id(s): (ps[k - 1][1] if k else None) for ps in by_lane.values() for k, (s, _) in enumerate(ps)}
    # 1. waits sink (in reverse program order, so a later wait has already moved)
    if not memory_cap:
        order = _Order(ops)
        _sink(order, pairs, nxt, block, _PeakGuard(order.in_order()) if keep_peak else None)
        _rise(order, pairs, prev, block, keep_peak)
        ops[:] = order.in_order()
        return pairs
    before_sink = profile(ops).peak
    for start, wait in reversed(pairs):
        i = ops.index(wait)
        users = [ops.index(u.owner) for r in wait.results for u in r.uses if u.owner.parent is block]
        limit = min(users, default=len(ops) - 1)
        following = nxt[id(wait)]
        if following is not None:
            limit = min(limit, ops.index(following))
        target = limit - 1
        if target > i:
            ops.insert(target, ops.pop(i))
            if sink_bytes(start) > 0 and profile(ops).peak > max(memory_cap, before_sink):
                ops.insert(i, ops.pop(target))   # (holding its buffers longer would pass the cap)
    # 2. starts rise, one in flight per lane, within the memory cap
    base_peak = profile(ops).peak
    group_of = {id(s): (s.symbol_ref("mesh"), s.axes) for s, _ in pairs}
    for n, (start, _) in enumerate(pairs):
        pos = {id(op): k for k, op in enumerate(ops)}
        i = pos[id(start)]
        floor = 0
        for v in start.operands:
            d = v.defining_op()
            if d is not None and d.parent is block:
                floor = max(floor, pos[id(d)] + 1)
        before = prev[id(start)]
        if before is not None:
            floor = max(floor, pos[id(before)] + 1)
        if memory_cap:   # rank-dependent decisions must not reorder one group's collectives
            for other, _ in pairs[:n]:
                if group_of[id(other)] == group_of[id(start)]:
                    floor = max(floor, pos[id(other)] + 1)
        if floor >= i:
            continue
        ops.insert(floor, ops.pop(i))
        if memory_cap:
            peak = profile(ops).peak
            if peak > max(memory_cap, base_peak):
                ops.insert(i, ops.pop(floor))   # over the cap: stays where it was
            else:
                base_peak = max(base_peak, peak)
    return pairs


def _hoist_views(block: Block, pairs: list[tuple[StartOp, WaitOp]]) -> None:
    """A chain of views read only by a start (a reshape of a gradient, made where autograd needed it)
    moves up to just after the value it views: it computes and allocates nothing, and the start can
    then rise as far as its data is ready (the input gradient's all-reduce overlaps the weight
    gradient's matmul)."""
    ops = block.ops
    for start, _ in pairs:
        for v in start.operands:
            chain: list[Operation] = []
            d = v.defining_op()
            while (d is not None and d.parent is block and d.has_trait("View") and len(d.operands) == 1
                   and len(d.results) == 1
                   and all(u.owner is (chain[-1] if chain else start) for u in d.results[0].uses)):
                chain.append(d)
                d = d.operand(0).defining_op()
            for view in reversed(chain):   # (the innermost first: each lands right after its operand)
                ops.pop(block.index_of(view))
                src = view.operand(0).defining_op()
                ops.insert(block.index_of(src) + 1 if src is not None and src.parent is block else 0, view)


class _Order:
    """``ops`` as a linked list with order keys: moving an op and comparing two positions cost O(1)
    (a list's insert and index are O(ops), quadratic over a 16k-op program's starts)."""

    def __init__(self, ops: list[Operation]) -> None:
        self.ops = ops
        self.prev: dict[int, Operation | None] = {}
        self.next: dict[int, Operation | None] = {}
        for k, op in enumerate(ops):
            self.prev[id(op)] = ops[k - 1] if k else None
            self.next[id(op)] = ops[k + 1] if k + 1 < len(ops) else None
        self.head: Operation | None = ops[0] if ops else None
        self._renumber()

    def _renumber(self) -> None:
        self.key: dict[int, float] = {}
        op, k = self.head, 0
        while op is not None:
            self.key[id(op)] = float(k)
            op, k = self.next[id(op)], k + 1

    def _unlink(self, op: Operation) -> None:
        p, n = self.prev[id(op)], self.next[id(op)]
        if p is None:
            self.head = n
        else:
            self.next[id(p)] = n
        if n is not None:
            self.prev[id(n)] = p

    def move_after(self, op: Operation, anchor: Operation | None) -> None:
        """``op`` right after ``anchor`` (None: first)."""
        self._unlink(op)
        n = self.head if anchor is None else self.next[id(anchor)]
        self.prev[id(op)], self.next[id(op)] = anchor, n
        if anchor is None:
            self.head = op
        else:
            self.next[id(anchor)] = op
        if n is not None:
            self.prev[id(n)] = op
        lo = self.key[id(anchor)] if anchor is not None else self.key[id(n)] - 2.0
        hi = self.key[id(n)] if n is not None else lo + 2.0
        mid = (lo + hi) / 2
        if not lo < mid < hi:   # the keys ran out of precision between these two
            self._renumber()
        else:
            self.key[id(op)] = mid

    def in_order(self) -> list[Operation]:
        out, op = [], self.head
        while op is not None:
            out.append(op)
            op = self.next[id(op)]
        return out


def _sink(order: _Order, pairs: list[tuple[StartOp, WaitOp]], nxt: dict[int, StartOp | None], block: Block,
          guard: _PeakGuard | None = None) -> None:
    """Step 1 (no memory cap): each wait, last first, moves down to just before its first user in
    ``block``, its lane's next start, or the terminator, whichever comes first. ``guard`` (keep-peak):
    a wait that holds more than it frees while it waits (a reduce-scatter's pack) moves no further
    than that fits under the peak of the program as it was."""
    last = order.ops[-1]
    for start, wait in reversed(pairs):
        limits = [u.owner for r in wait.results for u in r.uses if u.owner.parent is block]
        if nxt[id(wait)] is not None:
            limits.append(nxt[id(wait)])
        limit = min(limits, key=lambda a: order.key[id(a)], default=last)
        if order.key[id(limit)] <= order.key[id(wait)] or order.prev[id(limit)] is wait:
            continue
        if guard is not None and sink_bytes(start) > 0:
            limit = guard.lowest(wait, limit, sink_bytes(start))
            if order.prev[id(limit)] is wait or order.key[id(limit)] <= order.key[id(wait)]:
                continue
        order.move_after(wait, order.prev[id(limit)])


def _rise(order: _Order, pairs: list[tuple[StartOp, WaitOp]], prev: dict[int, WaitOp | None],
          block: Block, keep_peak: bool = False) -> None:
    """Step 2 (no memory cap): each start moves up to just after the last of its operands'
    definitions in ``block`` and its lane's previous wait (or to the block's top). ``keep_peak``:
    no further than its receive buffers fit under the peak the program has with every start
    where it was (after step 1): prefetching never lifts the peak. The live bytes are those of
    that order, raised by each start that moves over the ops it moves above."""
    guard = _PeakGuard(order.in_order()) if keep_peak else None
    for start, _ in pairs:
        anchors = [d for v in start.operands if (d := v.defining_op()) is not None and d.parent is block]
        if prev[id(start)] is not None:
            anchors.append(prev[id(start)])
        anchor = max(anchors, key=lambda a: order.key[id(a)], default=None)
        before = order.prev[id(start)]
        if before is None or (anchor is not None and order.key[id(anchor)] >= order.key[id(before)]):
            continue   # already right after it
        if guard is not None:
            anchor = guard.highest(start, anchor)
            if anchor is before:
                continue
        order.move_after(start, anchor)


def in_flight_bytes(start: StartOp) -> int:
    """What a started collective holds until its wait: its receive buffer (the handle's bytes) and,
    for a gather, the pack of its operands and the backend's own transfer buffer (gloo receives into
    one of its own and copies out; the runtime then unpacks: :mod:`spmdc.runtime.collectives`)."""
    handle = start.result.type.num_bytes   # type: ignore[attr-defined]
    if _LANE[start.SYNC.name] != "gather":
        return handle
    return 2 * handle + sum(getattr(v.type, "num_bytes", 0) for v in start.operands)


def sink_bytes(start: StartOp) -> int:
    """Bytes a collective holds longer when its wait moves down: its operands, which the estimate
    keeps alive to the wait (a reduce-scatter's or all-reduce's pack), plus its results (at the wait
    itself both are alive; elsewhere its receive buffer and its results just trade places). A
    gather's operands are stored shards: none."""
    if _LANE[start.SYNC.name] == "gather":
        return 0
    return (sum(getattr(v.type, "num_bytes", 0) for v in start.operands)
            + start.result.type.num_bytes)   # type: ignore[attr-defined]


class _PeakGuard:
    """Live bytes after each op of the order before step 2 (indices fixed there): how high a start
    may rise without lifting their peak."""

    def __init__(self, ops: list[Operation]) -> None:
        self.ops = list(ops)
        self.pos = {id(op): k for k, op in enumerate(self.ops)}
        prof = profile(self.ops)
        self.live = list(prof.live)
        self.cap = prof.peak
        self.moved: set[int] = set()

    def highest(self, start: StartOp, anchor: Operation | None) -> Operation | None:
        """The op ``start`` may follow: at or below ``anchor`` (None: the top), as high as its
        buffers fit under the cap; records the move."""
        i = self.pos[id(start)]
        floor = self.pos[id(anchor)] + 1 if anchor is not None else 0
        nbytes = in_flight_bytes(start)
        k = i
        while k > floor and self.live[k - 1] + nbytes <= self.cap:
            k -= 1
        for j in range(k, i):
            self.live[j] += nbytes
        self.moved.add(id(start))
        j = k - 1
        while j >= 0 and id(self.ops[j]) in self.moved:   # (an op still in its place)
            j -= 1
        return self.ops[j] if j >= 0 else None

    def lowest(self, wait: WaitOp, limit: Operation, nbytes: int) -> Operation:
        """The op ``wait`` may precede: at or above ``limit``, as low as holding ``nbytes`` more
        fits under the cap (ops moved by earlier calls skipped); records the added bytes."""
        i = self.pos[id(wait)]
        end = self.pos[id(limit)]
        k = i
        while k + 1 < end and self.live[k + 1] + nbytes <= self.cap:
            k += 1
        for j in range(i, k + 1):
            self.live[j] += nbytes
        self.moved.add(id(wait))
        j = k + 1
        while j < end and id(self.ops[j]) in self.moved:
            j += 1
        return self.ops[j] if j < end else limit


@dataclass
class ScheduleCollectives(ModulePass):
    """Async start/wait collectives, reordered for overlap under ``memory-cap`` bytes."""

    name: ClassVar[str] = "schedule-collectives"
    memory_cap: int = 0
    keep_peak: bool = False

    def __post_init__(self) -> None:
        if self.memory_cap < 0:
            raise ValueError(f"memory-cap must be >= 0 bytes (0: no cap), got {self.memory_cap}")

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp) and RANK_ATTR in op.attributes:
                # (ranks of uneven shapes estimate different peaks: their decisions could order one
                # process group's collectives differently, so they rise as far as they can)
                schedule_block(op.body, self.memory_cap, self.keep_peak and UNEVEN_ATTR not in op.attributes)


PASS = ScheduleCollectives
