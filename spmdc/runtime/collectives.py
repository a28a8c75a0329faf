"""``comm`` ops on torch.distributed process groups, one group per mesh axis.

Uneven shards follow ``torch.chunk``: gathers pad every piece to the largest one,
exchange, and cut the padding off again, so any size works on any backend.

    comm = Collectives(device_mesh)          # torch.distributed.device_mesh.DeviceMesh
    y = comm.all_gather(x, "tp", 0, (8, 16)) # what a comm.all_gather op's torch expression calls

Programs call these methods through :class:`CountingComm`, which records what they issue.

Every wait is bounded by ``SPMDC_COLLECTIVE_TIMEOUT`` seconds when set (else by the process
group's own timeout). A collective that times out raises :class:`CollectiveTimeout`, naming the
ranks of its group that never arrived: each rank that timed out marks its arrival in the c10d
store (``spmdc/arrive/<group>/<seq>/<rank>``) and, for a grace period, looks for the others'.
A process whose collective timed out then ends with status 1 at exit, at once: its process
group's backend threads are stuck, and destroying the group would hang the rank and the job.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from spmdc.dialects.shard import chunk_sizes
from spmdc.runtime.pairwise import TAG_BASE, ScatterExchange, gather_into, uses_pairwise

TIMEOUT_ENV = "SPMDC_COLLECTIVE_TIMEOUT"
ARRIVE = "spmdc/arrive"
GRACE_S = 10.0   # how long a timed-out rank looks for the other ranks' arrival marks, at most


class CollectiveTimeout(RuntimeError):
    """A collective that some ranks of its process group never joined; the message names them."""


def collective_timeout(environ: Any = None) -> float | None:
    """Seconds from ``SPMDC_COLLECTIVE_TIMEOUT`` (None when unset: the process group's timeout)."""
    text = (os.environ if environ is None else environ).get(TIMEOUT_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds")
    return value


def absent_ranks(store: Any, ranks: list[int], me: int, tag: str, grace_s: float) -> list[int] | None:
    """Mark ``me`` arrived at the collective ``tag`` in ``store`` and return the ``ranks`` whose
    marks are still missing after ``grace_s`` (None: no store to ask)."""
    if store is None:
        return None
    try:
        store.set(f"{ARRIVE}/{tag}/{me}", "1")
        deadline = time.monotonic() + grace_s
        while True:
            absent = [r for r in ranks if r != me and not store.check([f"{ARRIVE}/{tag}/{r}"])]
            if not absent or time.monotonic() >= deadline:
                return absent
            time.sleep(0.05)
    except RuntimeError:   # the store went away (its rank ended)
        return None


_TIMED_OUT: list[CollectiveTimeout] = []   # this process's collective timeouts (at most one is raised)


def timed_out() -> bool:
    """Whether a collective of this process timed out: its process group cannot be destroyed
    (its backend threads are stuck in the collective), so skip ``destroy_process_group``."""
    return bool(_TIMED_OUT)


def _exit_at_once() -> None:
    """At interpreter exit after a collective timeout: leave with status 1 before the process
    group's destructor joins the stuck backend threads (which would hang the rank, and the job)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _note_timeout(err: CollectiveTimeout) -> CollectiveTimeout:
    if not _TIMED_OUT:
        import atexit

        atexit.register(_exit_at_once)
    _TIMED_OUT.append(err)
    return err


def _default_store() -> Any:
    """The default process group's c10d store (torch names no public accessor); None if none."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, AttributeError, ValueError):
        return None


_REDUCE = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.SUM}


@dataclass
class CommStats:
    """Collectives this rank issued: op name → (count, bytes sent+received locally)."""

    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    order: list[str] | None = None
    """When a list: every collective issued (``comm.all_gather_bucket_start``, ...) and every
    ``comm.wait``, in the order the program ran them."""

    expert_rows: dict[int, int] = field(default_factory=dict)
    """Rows each expert this rank holds received (forward dispatches, ``count_load``): the
    load-balance table of ``spmdc run``."""
    expert_dropped: dict[int, int] = field(default_factory=dict)
    """Rows routed to those experts that did not fit their slot (``--moe-capacity-factor`` only)."""
    seconds: dict[str, float] | None = None
    """When a dict: the wall seconds this rank spent in each kind's calls and in ``comm.wait``
    (``"comm.wait"``), and a pipeline stage in waiting for its peer stage's messages (``"recv"``): the
    time the program was held by communication (measurements; None: not timed)."""

    def add(self, name: str, nbytes: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        self.bytes[name] = self.bytes.get(name, 0) + nbytes


class Pending:
    """A started collective (``comm.*_start``): ``wait()`` blocks on its ``torch.distributed``
    works and returns the unpacked result. It keeps the send/receive buffers alive until then
    (``keep``: tensors the backend reads while the collective runs)."""

    __slots__ = ("_works", "_finish", "_done", "_waiter")

    def __init__(self, keep: list[Any], finish: Any, waiter: Callable[[Any], None] | None = None):
        self._works = keep
        self._finish = finish
        self._done = False
        self._waiter = waiter   # waits on one work (bounded, naming absent ranks); None: work.wait()

    def wait(self) -> Any:
        if self._done:
            raise RuntimeError("comm.wait: this collective was already waited")
        works, self._works = self._works, []
        while works:   # (the works, a backend's own transfer buffers with them -- gloo's all-gather
            w = works.pop(0)   # receives into one --, and the kept send buffers go before the result
            if hasattr(w, "wait"):   # is unpacked, not with this frame)
                if self._waiter is not None:
                    self._waiter(w)
                else:
                    w.wait()
            del w
        self._done = True
        finish, self._finish = self._finish, None
        return finish()


class Collectives:
    """The collectives of one rank: one method per ``comm`` op, named after it."""

    def __init__(self, device_mesh: Any, timeout_s: float | None = None):
        self.mesh = device_mesh
        self.stats = CommStats()
        self.timeout_s = timeout_s if timeout_s is not None else collective_timeout()
        self._seq: dict[str, int] = {}   # collectives issued per axis (equal on every rank: SPMD)
        self._tags: dict[str, int] = {}  # point-to-point tags used per axis (pairwise exchanges)

    def _waiter(self, kind: str, axis: str) -> Callable[[Any], None]:
        """How to wait on one ``kind`` collective on ``axis``: at most ``timeout_s`` (else the
        process group's timeout); a timeout raises :class:`CollectiveTimeout`."""
        seq = self._seq[axis] = self._seq.get(axis, 0) + 1
        start = time.monotonic()

        def wait(work: Any) -> None:
            try:
                if self.timeout_s is None:
                    work.wait()
                else:
                    work.wait(timeout=timedelta(seconds=self.timeout_s))
            except RuntimeError as e:
                if "timed out" not in str(e).lower():
                    raise
                raise self._timed_out(kind, axis, seq, time.monotonic() - start) from e
        return wait

    def _timed_out(self, kind: str, axis: str, seq: int, waited: float) -> CollectiveTimeout:
        ranks = [int(r) for r in dist.get_process_group_ranks(self.group(axis))]
        me = dist.get_rank()
        grace = min(GRACE_S, self.timeout_s) if self.timeout_s is not None else GRACE_S
        absent = absent_ranks(_default_store(), ranks, me, f"{'-'.join(map(str, ranks))}/{axis}/{seq}", grace)
        if absent:
            who = f"ranks {absent} never arrived"
        elif absent is None:
            who = "which ranks never arrived is unknown (no c10d store to ask)"
        else:
            who = "every rank arrived (one failed inside the collective)"
        return _note_timeout(CollectiveTimeout(f"collective {kind} on axis '{axis}' (ranks {ranks}) timed out "
                                               f"after {waited:.1f}s on rank {me}: {who}"))

    def group(self, axis: str) -> Any:
        return self.mesh.get_group(axis)

    def size(self, axis: str) -> int:
        return self.mesh.size(self.mesh.mesh_dim_names.index(axis))

    def coord(self, axis: str) -> int:
        return self.mesh.get_local_rank(axis)

    # Every collective the scheduler can split has a ``*_start`` form that issues it with
    # ``async_op=True`` and returns a :class:`Pending`; the plain form waits at once.
    def all_gather_bucket(self, xs: list[torch.Tensor], axis: str, dims: list[int],
                          out_shapes: list[tuple[int, ...]], sizes: list[Any] | None = None) -> list[torch.Tensor]:
        return self.all_gather_bucket_start(xs, axis, dims, out_shapes, sizes).wait()

    def _bucket_sizes(self, n: int, fulls: list[int], sizes: list[Any] | None) -> list[list[int]]:
        """Per member, each rank's piece along its dim: explicit (a ragged shard) or torch.chunk's."""
        return [list(z) if sizes is not None and z is not None else chunk_sizes(f, n)
                for f, z in zip(fulls, sizes if sizes is not None else [None] * len(fulls))]

    def all_gather_bucket_start(self, xs: list[torch.Tensor], axis: str, dims: list[int],
                                out_shapes: list[tuple[int, ...]], sizes: list[Any] | None = None) -> Pending:
        """Each rank packs its pieces of every member back to back (no padding between them),
        pads that run to the longest rank's, and the buffer is all-gathered once; unpacked per
        rank and member. Ragged members (``sizes``: each rank's piece, per member or None) pack at
        their sizes, so a bucket whose ranks hold nearly equal bytes moves nearly no padding."""
        n = self.size(axis)
        per = self._bucket_sizes(n, [shape[d] for shape, d in zip(out_shapes, dims)], sizes)
        rests = [tuple(x.movedim(d, 0).shape[1:]) for x, d in zip(xs, dims)]
        row = [int(torch.Size(r).numel()) for r in rests]
        lengths = [sum(z[r] * k for z, k in zip(per, row)) for r in range(n)]
        longest = max(lengths)
        mine = torch.cat([x.movedim(d, 0).reshape(-1) for x, d in zip(xs, dims)])
        if mine.numel() < longest:
            mine = torch.cat([mine, mine.new_zeros(longest - mine.numel())])
        buf = mine.new_empty((n * longest,))
        works = self._gather_into(buf, mine, axis)
        waiter = self._waiter("all_gather", axis)

        def finish() -> list[torch.Tensor]:
            per_rank = buf.view(n, longest)
            pieces: list[list[torch.Tensor]] = [[] for _ in dims]
            for r in range(n):
                offset = 0
                for i, (z, rest, k) in enumerate(zip(per, rests, row)):
                    pieces[i].append(per_rank[r, offset:offset + z[r] * k].view((z[r],) + rest))
                    offset += z[r] * k
            return [torch.cat(p).movedim(0, d).contiguous() for p, d in zip(pieces, dims)]
        return Pending([*works, mine], finish, waiter)

    def reduce_scatter_bucket(self, xs: list[torch.Tensor], axis: str, dims: list[int],
                              op: str, sizes: list[Any] | None = None) -> list[torch.Tensor]:
        return self.reduce_scatter_bucket_start(xs, axis, dims, op, sizes).wait()

    def reduce_scatter_bucket_start(self, xs: list[torch.Tensor], axis: str, dims: list[int], op: str,
                                    sizes: list[Any] | None = None) -> Pending:
        """Lay every member's per-rank pieces out rank-major, each rank's run of pieces back to
        back and padded to the longest run, reduce-scatter the buffer once, unpack this rank's
        pieces (``sizes`` as in :meth:`all_gather_bucket_start`)."""
        n = self.size(axis)
        me = self.coord(axis)
        per = self._bucket_sizes(n, [x.shape[d] for x, d in zip(xs, dims)], sizes)
        moved = [x.movedim(d, 0) for x, d in zip(xs, dims)]
        runs: list[list[torch.Tensor]] = [[] for _ in range(n)]
        for xt, z in zip(moved, per):
            for r, piece in enumerate(torch.split(xt, z)):
                runs[r].append(piece.reshape(-1))
        lengths = [sum(t.numel() for t in run) for run in runs]
        longest = max(lengths)
        flat = []
        for run, length in zip(runs, lengths):
            flat.extend(run)
            if length < longest:
                flat.append(moved[0].new_zeros(longest - length))
        buf = torch.cat(flat)
        waiter = self._waiter("reduce_scatter", axis)
        works, reduced = self._scatter_packed(buf, op, axis, waiter)
        rests = [tuple(xt.shape[1:]) for xt in moved]
        del moved, runs, flat   # (the members are packed: the closure below must not keep them alive)

        def finish() -> list[torch.Tensor]:
            got = reduced() / n if op == "avg" else reduced()
            out, offset = [], 0
            for rest, z, d in zip(rests, per, dims):
                numel = z[me] * int(torch.Size(rest).numel())
                out.append(got[offset:offset + numel].view((z[me],) + rest).movedim(0, d).contiguous())
                offset += numel
            return out
        return Pending([*works, buf], finish, waiter)

    def _scatter_packed(self, buf: torch.Tensor, op: str, axis: str, wait: Callable[[Any], None]
                        ) -> tuple[list[Any], Callable[[], torch.Tensor]]:
        return scatter_packed(buf, op, self.group(axis), self.size(axis), self.coord(axis), self._tag(axis), wait)

    def _tag(self, axis: str) -> int:
        """A fresh point-to-point tag for one pairwise exchange on ``axis`` (the same on every rank
        of its group: they issue the same collectives in the same order)."""
        k = self._tags[axis] = (self._tags.get(axis, -1) + 1) % (1 << 20)
        return TAG_BASE + k

    def _gather_into(self, buf: torch.Tensor, mine: torch.Tensor, axis: str) -> list[Any]:
        """Start gathering every rank's ``mine`` into ``buf`` (``n`` equal rows); the works to wait."""
        group = self.group(axis)
        if uses_pairwise(group):
            return gather_into(buf, mine, group, self.size(axis), self.coord(axis), self._tag(axis))
        return [dist.all_gather_into_tensor(buf, mine, group=group, async_op=True)]

    def all_reduce_bucket(self, xs: list[torch.Tensor], axes: list[str], op: str) -> list[torch.Tensor]:
        return self.all_reduce_bucket_start(xs, axes, op).wait()

    def all_reduce_bucket_start(self, xs: list[torch.Tensor], axes: list[str], op: str) -> Pending:
        """Concatenate every tensor (flattened) into one buffer, all-reduce it once per axis, split."""
        flat = torch.cat([x.reshape(-1) for x in xs])
        pending = self._all_reduce_inplace(flat, axes, op)

        def finish() -> list[torch.Tensor]:
            out = pending.wait()
            return [piece.view_as(x) for piece, x in zip(out.split([x.numel() for x in xs]), xs)]
        return Pending([], finish)

    # -- primitives ----------------------------------------------------------------------
    def all_reduce(self, x: torch.Tensor, axes: list[str], op: str) -> torch.Tensor:
        return self.all_reduce_start(x, axes, op).wait()

    def all_reduce_start(self, x: torch.Tensor, axes: list[str], op: str) -> Pending:
        return self._all_reduce_inplace(x.clone(), axes, op)

    def _all_reduce_inplace(self, y: torch.Tensor, axes: list[str], op: str) -> Pending:
        """Reduce ``y`` in place over the first axis asynchronously; the rest (a multi-axis
        reduction) run when it is waited."""
        waiter = self._waiter("all_reduce", axes[0])
        finish_first = self._reduce_start(y, op, axes[0], waiter)

        def finish() -> torch.Tensor:
            finish_first()
            n = self.size(axes[0])
            for axis in axes[1:]:
                self._reduce_start(y, op, axis, self._waiter("all_reduce", axis))()
                n *= self.size(axis)
            return y / n if op == "avg" else y
        return Pending([], finish)

    def _reduce_start(self, y: torch.Tensor, op: str, axis: str, wait: Callable[[Any], None]) -> Callable[[], Any]:
        """Start all-reducing ``y`` in place over ``axis``; returns what finishes it. (On gloo too the
        backend's own all-reduce: a pairwise reduce-scatter then gather measured no faster.)"""
        work = dist.all_reduce(y, op=_REDUCE[op], group=self.group(axis), async_op=True)
        return lambda: wait(work)

    def keep_at_origin(self, x: torch.Tensor, axes: list[str]) -> torch.Tensor:
        """``x`` on the ranks at coordinate 0 of every axis in ``axes``, zeros elsewhere (comm.keep_at_origin)."""
        return x if all(self.coord(a) == 0 for a in axes) else torch.zeros_like(x)

    def all_slice(self, x: torch.Tensor, axis: str, dim: int, sizes: list[int] | None = None) -> torch.Tensor:
        sizes = sizes if sizes is not None else chunk_sizes(x.shape[dim], self.size(axis))
        i = self.coord(axis)   # (a copy, never a view: the whole operand may die here, as the estimate has it)
        return x.narrow(dim, sum(sizes[:i]), sizes[i]).clone(memory_format=torch.contiguous_format)

    def all_gather(self, x: torch.Tensor, axis: str, dim: int, out_shape: tuple[int, ...],
                   sizes: list[int] | None = None) -> torch.Tensor:
        return self.all_gather_start(x, axis, dim, out_shape, sizes).wait()

    def all_gather_start(self, x: torch.Tensor, axis: str, dim: int, out_shape: tuple[int, ...],
                         sizes: list[int] | None = None) -> Pending:
        """Gather every rank's piece along ``dim`` (torch.chunk pieces, or the explicit ``sizes``
        of a ragged shard), each padded to the largest for one ``all_gather_into_tensor``."""
        n = self.size(axis)
        sizes = sizes if sizes is not None else chunk_sizes(out_shape[dim], n)
        pad = max(sizes)
        xt = x.movedim(dim, 0)
        if xt.shape[0] < pad:
            xt = torch.cat([xt, xt.new_zeros((pad - xt.shape[0],) + tuple(xt.shape[1:]))])
        xt = xt.contiguous()
        buf = xt.new_empty((n * pad,) + tuple(xt.shape[1:]))
        works = self._gather_into(buf, xt, axis)

        def finish() -> torch.Tensor:
            pieces = [buf[i * pad:i * pad + s] for i, s in enumerate(sizes)]
            return torch.cat(pieces).movedim(0, dim).contiguous()
        return Pending([*works, xt], finish, self._waiter("all_gather", axis))

    def reduce_scatter(self, x: torch.Tensor, axis: str, dim: int, op: str,
                       sizes: list[int] | None = None) -> torch.Tensor:
        return self.reduce_scatter_start(x, axis, dim, op, sizes).wait()

    def reduce_scatter_start(self, x: torch.Tensor, axis: str, dim: int, op: str,
                             sizes: list[int] | None = None) -> Pending:
        n = self.size(axis)
        sizes = sizes if sizes is not None else chunk_sizes(x.shape[dim], n)
        pad = max(sizes)
        xt = x.movedim(dim, 0)
        pieces = []
        start = 0
        for s in sizes:
            p = xt[start:start + s]
            start += s
            if s < pad:
                p = torch.cat([p, p.new_zeros((pad - s,) + tuple(p.shape[1:]))])
            pieces.append(p)
        buf = torch.cat(pieces)
        waiter = self._waiter("reduce_scatter", axis)
        works, reduced = self._scatter_packed(buf, op, axis, waiter)

        def finish() -> torch.Tensor:
            mine = reduced()[:sizes[self.coord(axis)]]
            if op == "avg":
                mine = mine / n
            return mine.movedim(0, dim).contiguous()
        return Pending([*works, buf], finish, waiter)

    def wait(self, pending: Pending) -> Any:
        """``comm.wait``: block on a started collective, return its tensor (or list of tensors)."""
        return pending.wait()

    def all_to_all(self, x: torch.Tensor, axis: str, split_dim: int, concat_dim: int,
                   out_shape: tuple[int, ...]) -> torch.Tensor:
        n = self.size(axis)
        send_sizes = chunk_sizes(x.shape[split_dim], n)
        send = list(torch.split(x, send_sizes, dim=split_dim))
        recv_cd = chunk_sizes(out_shape[concat_dim], n)
        recv_shapes = []
        for i in range(n):
            s = list(out_shape)
            s[concat_dim] = recv_cd[i]
            recv_shapes.append(s)
        flat_in = torch.cat([p.contiguous().reshape(-1) for p in send])
        out_splits = [int(torch.Size(s).numel()) for s in recv_shapes]
        flat_out = flat_in.new_empty(sum(out_splits))
        work = dist.all_to_all_single(flat_out, flat_in, output_split_sizes=out_splits,
                                      input_split_sizes=[p.numel() for p in send], group=self.group(axis),
                                      async_op=True)
        self._waiter("all_to_all", axis)(work)
        parts = [t.reshape(s) for t, s in zip(torch.split(flat_out, out_splits), recv_shapes)]
        return torch.cat(parts, dim=concat_dim).contiguous()


    # Expert dispatch (mixture of experts): one all_to_all with run-time splits each way; the
    # payloads (tokens, routing weights, ...) travel packed as bytes in one exchange.
    def expert_dispatch(self, xs: list[torch.Tensor], dest: torch.Tensor, counts: torch.Tensor, axis: str,
                        top_ks: list[int], slot_rows: int, count_load: bool = False) -> list[torch.Tensor]:
        """``comm.expert_dispatch``: send each routed assignment's rows to the rank holding its
        expert's slot; return this rank's slot buffers (``slot_rows`` rows, zeros past its rows).
        ``count_load``: add the rows each of this rank's experts receives to ``stats.expert_rows``."""
        from spmdc.dialects.expert_helpers import blocks

        n, me = self.size(axis), self.coord(axis)
        start, kept = blocks(counts, n, slot_rows)
        per = counts.shape[1] // n
        order, send = _by_slot(dest, slot_rows, n)
        recv = kept[:, me * per:(me + 1) * per].sum(dim=1).tolist()
        if count_load:
            mine = slice(me * per, (me + 1) * per)
            for e, (rows, routed) in enumerate(zip(kept[:, mine].sum(dim=0).tolist(),
                                                   counts[:, mine].sum(dim=0).tolist()), start=me * per):
                self.stats.expert_rows[e] = self.stats.expert_rows.get(e, 0) + int(rows)
                if routed > rows:
                    self.stats.expert_dropped[e] = self.stats.expert_dropped.get(e, 0) + int(routed - rows)
        packed, layout = _pack([x[order // k] for x, k in zip(xs, top_ks)])
        got = self._all_to_all_rows(packed, send, recv, axis, "comm.expert_dispatch")
        pos = torch.cat([start[s, e] - me * slot_rows + torch.arange(int(kept[s, e]))
                         for s in range(n) for e in range(me * per, (me + 1) * per)]) if sum(recv) else \
            torch.zeros(0, dtype=torch.int64)
        outs = []
        for rows in _unpack(got, layout):
            buf = rows.new_zeros((slot_rows,) + tuple(rows.shape[1:]))
            buf[pos] = rows
            outs.append(buf)
        return outs

    def expert_combine(self, bufs: list[torch.Tensor], dest: torch.Tensor, counts: torch.Tensor, axis: str,
                       top_ks: list[int]) -> list[torch.Tensor]:
        """``comm.expert_combine``: send each row of this rank's slot back to the rank that routed
        it; return, per payload, the rows in assignment order (zeros for dropped ones), summed
        over each token's ``top_k`` assignments."""
        from spmdc.dialects.expert_helpers import blocks

        n, me = self.size(axis), self.coord(axis)
        slot_rows = bufs[0].shape[0]
        start, kept = blocks(counts, n, slot_rows)
        per = counts.shape[1] // n
        mine = range(me * per, (me + 1) * per)
        rows = [torch.arange(int(kept[s, e])) + (start[s, e] - me * slot_rows) for s in range(n) for e in mine]
        idx = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64)
        send = [int(kept[s, me * per:(me + 1) * per].sum()) for s in range(n)]
        order, recv = _by_slot(dest, slot_rows, n)
        packed, layout = _pack([b[idx] for b in bufs])
        got = self._all_to_all_rows(packed, send, recv, axis, "comm.expert_combine")
        outs = []
        for r, k in zip(_unpack(got, layout), top_ks):
            full = r.new_zeros((dest.shape[0],) + tuple(r.shape[1:]))
            full[order] = r
            outs.append(full if k == 1 else full.reshape((-1, k) + tuple(r.shape[1:])).sum(dim=1))
        return outs

    def _all_to_all_rows(self, packed: torch.Tensor, send: list[int], recv: list[int], axis: str,
                         kind: str) -> torch.Tensor:
        """One ``all_to_all_single`` of byte rows with run-time splits (``send[q]`` rows to rank
        ``q`` of ``axis``, ``recv[s]`` from rank ``s``); recorded as ``kind`` with the bytes sent."""
        out = packed.new_empty((sum(recv), packed.shape[1]))
        self.stats.add(kind, packed.numel())
        if self.stats.order is not None:
            self.stats.order.append(kind)
        work = dist.all_to_all_single(out, packed.contiguous(), output_split_sizes=recv, input_split_sizes=send,
                                      group=self.group(axis), async_op=True)
        self._waiter("all_to_all_v", axis)(work)
        return out

def scatter_packed(buf: torch.Tensor, op: str, group: Any, n: int, me: int, tag: int = TAG_BASE,
                   wait: Callable[[Any], None] | None = None) -> tuple[list[Any], Callable[[], torch.Tensor]]:
    """Start reducing ``buf`` (rank-major: ``n`` equal pieces along dim 0, one per rank; a buffer of
    the caller's own) over ``group``, where this rank is ``me``; returns the works to wait first and
    a function giving this rank's reduced piece (waiting what is left with ``wait``). On gloo the
    pieces are exchanged pair by pair (:class:`~spmdc.runtime.pairwise.ScatterExchange`: sends now,
    receives into one piece's buffer when the result is asked for, reduced into the pack in
    place); on other backends it is reduce-scattered into a buffer of one piece."""
    wait = wait if wait is not None else (lambda w: w.wait())
    if uses_pairwise(group):
        ex = ScatterExchange(buf, op, group, n, me, tag)
        shape = (buf.shape[0] // n,) + tuple(buf.shape[1:])
        return [], lambda: ex.finish(wait).view(shape).clone()   # (not a view: buf dies)
    out = buf.new_empty((buf.shape[0] // n,) + tuple(buf.shape[1:]))
    work = dist.reduce_scatter_tensor(out, buf, op=_REDUCE[op], group=group, async_op=True)
    return [work], lambda: out


COLLECTIVES = ("all_reduce", "all_gather", "all_slice", "reduce_scatter", "all_to_all", "all_gather_bucket",
               "reduce_scatter_bucket", "all_reduce_bucket")
STARTS = tuple(c + "_start" for c in ("all_reduce", "all_gather", "reduce_scatter", "all_gather_bucket",
                                      "reduce_scatter_bucket", "all_reduce_bucket"))


class CountingComm:
    """What a program runs with: forwards to ``comm``, each collective also recorded into ``comm.stats``.

        outs = fn(args, CountingComm(comm))     # comm.stats then holds the program's collectives
    """

    def __init__(self, comm: Any):
        self._comm = comm

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._comm, name)
        stats = self._comm.stats
        if name == "wait":
            def wait(p: Any) -> Any:
                if stats.order is not None:
                    stats.order.append("comm.wait")
                return _timed(stats, "comm.wait", target, p)
            return wait
        if name not in COLLECTIVES and name not in STARTS:
            return target
        kind = "comm." + name.removesuffix("_start")   # a started collective counts as its kind

        def call(x: Any, *args: Any, **kwargs: Any) -> Any:
            xs = x if isinstance(x, list) else [x]  # bucketed collectives take a list
            stats.add(kind, sum(t.numel() * t.element_size() for t in xs))
            if stats.order is not None:
                stats.order.append("comm." + name)
            return _timed(stats, kind, target, x, *args, **kwargs)
        return call


def _timed(stats: CommStats, kind: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, its wall seconds added to ``stats.seconds[kind]`` when timed."""
    if stats.seconds is None:
        return fn(*args, **kwargs)
    t = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        stats.seconds[kind] = stats.seconds.get(kind, 0.0) + time.perf_counter() - t


def _by_slot(dest: torch.Tensor, slot_rows: int, n: int) -> tuple[torch.Tensor, list[int]]:
    """This rank's routed assignments in buffer order (by ``dest``; dropped ones left out) and how
    many go to each of the ``n`` slots."""
    order = (dest >= 0).nonzero().reshape(-1)
    order = order[torch.argsort(dest[order], stable=True)]
    return order, torch.bincount(torch.div(dest[order], slot_rows, rounding_mode="floor"), minlength=n).tolist()


def _pack(parts: list[torch.Tensor]) -> tuple[torch.Tensor, list[tuple[torch.dtype, tuple[int, ...], int]]]:
    """Rows of several tensors (any dtypes, same row count) side by side as bytes: ``[rows, bytes]``."""
    rows = parts[0].shape[0]
    cols, layout = [], []
    for p in parts:
        per_row = int(torch.Size(p.shape[1:]).numel())
        b = p.contiguous().reshape(rows, per_row).view(torch.uint8)
        cols.append(b)
        layout.append((p.dtype, tuple(p.shape[1:]), b.shape[1]))
    return torch.cat(cols, dim=1), layout


def _unpack(packed: torch.Tensor, layout: list[tuple[torch.dtype, tuple[int, ...], int]]) -> list[torch.Tensor]:
    out, at = [], 0
    for dtype, rest, width in layout:
        piece = packed[:, at:at + width].contiguous()
        at += width
        out.append(piece.view(dtype).reshape((packed.shape[0],) + rest))
    return out
