"""Finest-slice tables between two layouts (union layouts and Partial sources included): what
batched send/recv (BSR) and the split all-reduce move, computed without ranks.

Hetu v2 resolves a move between two HSPMD layouts that no collective expresses with a table
of *finest slices*: cut the tensor at every boundary of every piece, source and destination;
for each slice a destination rank needs, pick a rank that holds it and send it. Hetu's BSR
takes only whole sources; here a source may be a pending reduction (``P(op)`` inside a group,
``partial(op)`` across groups): a destination then receives one piece per distinct partial
*term* and reduces them on arrival.

    plan = bsr_plan((12, 5), src, dst, meshes)     # the table: who sends what to whom
    out = run_bsr(plan, my_piece, rank)            # spmdc.runtime.bsr: one batch_isend_irecv

``src``/``dst``: a :class:`~spmdc.dialects.shard.ShardingAttr` or
:class:`~spmdc.dialects.shard.UnionShardingAttr`; ``meshes``: mesh name → :class:`MeshSpec`
(axis names, shape, the ranks it spans). Each rank holds one box of the tensor per layout
(``R``, ``S``, ``RS``, ``P`` placements; a strided ``SS`` piece is several boxes: refused).
Destinations are whole values (no ``P``). Messages: one per (sender, receiver) pair that has
data, all slices for that pair packed into one buffer; a rank's own slices are copied locally.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spmdc.dialects.shard import CrossPartial, Partial, Replicate, ShardingAttr, Split, StridedShard
from spmdc.dialects.shard.union import UnionShardingAttr
from spmdc.sharding.mesh import local_offset, local_shape

Box = tuple[tuple[int, int], ...]   # [start, end) per dim


@dataclass(frozen=True)
class MeshSpec:
    """A device group as the runtime sees it: axis names, sizes, the job's ranks (row-major)."""

    axes: tuple[str, ...]
    shape: tuple[int, ...]
    devices: tuple[int, ...]

    @staticmethod
    def of(op: Any) -> MeshSpec:
        """From a ``shard.mesh`` op."""
        return MeshSpec(tuple(op.axis_names), tuple(op.shape), tuple(op.devices))


@dataclass(frozen=True)
class Piece:
    """What one rank holds: a box of the global tensor, and which partial term it is (None:
    the value itself; equal terms are duplicates, distinct terms add up to the value)."""

    device: int
    box: Box
    term: tuple | None = None
    op: str | None = None
    local: Box | None = None
    """Where the box sits in the rank's local tensor, as a box whose start is the local origin
    (None: the local tensor is exactly the box). One part of a strided ``SS(d, k)`` piece: the
    rank's local tensor holds its k parts end to end along ``d``."""

    @property
    def at(self) -> Box:
        """The box to read this piece's cells from the local tensor with (:func:`box_view`)."""
        return self.local if self.local is not None else self.box


@dataclass
class BsrPlan:
    """The slice table: ``sends[(src, dst)]`` lists ``(slice, src box, dst box)`` in packing order."""

    shape: tuple[int, ...]
    src: list[Piece]
    dst: list[Piece]
    sends: dict[tuple[int, int], list[tuple[Box, Box, Box]]] = field(default_factory=dict)
    op: str | None = None   # the reduction of partial sources

    @property
    def messages(self) -> int:
        """Point-to-point messages (local copies not counted)."""
        return sum(1 for (s, d) in self.sends if s != d)

    def bytes_sent(self, device: int, itemsize: int = 4) -> int:
        return sum(box_numel(c) * itemsize for (s, d), cells in self.sends.items() if s == device and d != device
                   for c, _, _ in cells)


def pieces(shape: Sequence[int], layout: Any, meshes: dict[str, MeshSpec], strided: bool = False) -> list[Piece]:
    """Every rank's piece of a tensor of ``shape`` laid out ``layout``. ``strided``: a strided
    ``SS(d, k)`` piece is given as its k boxes (several pieces of one rank, each with its
    ``local`` place); otherwise refused."""
    shape = tuple(int(s) for s in shape)
    if isinstance(layout, ShardingAttr):
        return _plain_pieces(shape, layout, meshes[layout.mesh], strided)
    if not isinstance(layout, UnionShardingAttr):
        raise TypeError(f"expected a #shard<...> or #shard.union<...> layout, got {layout!r}")
    out: list[Piece] = []
    rel = layout.relation
    starts = [0] * len(layout.members)
    member_shapes = [shape] * len(layout.members)
    if isinstance(rel, Split):
        sizes = rel.sizes(shape[rel.dim])
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        member_shapes = [shape[:rel.dim] + (s,) + shape[rel.dim + 1:] for s in sizes]
    for i, (m, mshape) in enumerate(zip(layout.members, member_shapes)):
        for p in _plain_pieces(mshape, m, meshes[m.mesh], strided):
            box, local = p.box, p.local
            if isinstance(rel, Split):
                d = rel.dim
                box = box[:d] + ((box[d][0] + starts[i], box[d][1] + starts[i]),) + box[d + 1:]
                if local is not None:
                    local = local[:d] + ((local[d][0] + starts[i], local[d][1] + starts[i]),) + local[d + 1:]
            term, op = p.term, p.op
            if isinstance(rel, CrossPartial):
                if op is not None and op != rel.op:
                    raise ValueError(f"group '@{m.mesh}' is P({op}) inside a partial({rel.op}) union")
                term, op = (i,) + (term or ()), rel.op
            out.append(Piece(p.device, box, term, op, local))
    return out


def _plain_pieces(shape: tuple[int, ...], layout: ShardingAttr, mesh: MeshSpec, strided: bool = False) -> list[Piece]:
    lay = tuple(layout.placements)
    if any(isinstance(p, StridedShard) for p in lay):
        if not strided:
            raise ValueError(f"{layout}: a strided piece is several boxes; BSR moves one box per rank")
        return _strided_pieces(shape, lay, mesh)
    ops = {p.op for p in lay if isinstance(p, Partial)}
    if len(ops) > 1:
        raise ValueError(f"{layout}: partial over several reductions ({', '.join(sorted(ops))})")
    out = []
    for k, coords in enumerate(itertools.product(*(range(n) for n in mesh.shape))):
        off = local_offset(shape, lay, mesh.shape, coords)
        size = local_shape(shape, lay, mesh.shape, coords)
        term = tuple(c for c, p in zip(coords, lay) if isinstance(p, Partial)) if ops else None
        out.append(Piece(mesh.devices[k], tuple((o, o + s) for o, s in zip(off, size)), term,
                         next(iter(ops)) if ops else None))
    return out


def _strided_pieces(shape: tuple[int, ...], lay: tuple, mesh: MeshSpec) -> list[Piece]:
    """A strided layout's pieces: per rank one box per part of its ``SS(d, k)`` dim, each with
    its place in the rank's local tensor (the parts end to end along ``d``)."""
    from spmdc.sharding.mesh import local_blocks

    ops = {p.op for p in lay if isinstance(p, Partial)}
    if ops:
        raise ValueError(f"[{', '.join(map(str, lay))}]: a strided partial layout is not supported here")
    plain = tuple(Replicate() if isinstance(p, StridedShard) else p for p in lay)
    out = []
    for k, coords in enumerate(itertools.product(*(range(n) for n in mesh.shape))):
        off = local_offset(shape, plain, mesh.shape, coords)
        size = local_shape(shape, plain, mesh.shape, coords)
        at = 0
        for d, start, length in local_blocks(shape, lay, mesh.shape, coords):
            box = tuple((o, o + n) if i != d else (start, start + length) for i, (o, n) in enumerate(zip(off, size)))
            local = tuple((o, o + n) if i != d else (start - at, start - at + length)
                          for i, (o, n) in enumerate(zip(off, size)))
            out.append(Piece(mesh.devices[k], box, None, None, local))
            at += length
    return out


def bsr_plan(shape: Sequence[int], src: Any, dst: Any, meshes: dict[str, MeshSpec],
             lost: frozenset[int] = frozenset()) -> BsrPlan:
    """The finest-slice table from ``src`` to ``dst`` (see the module doc). Each destination
    slice takes one source per partial term: the destination rank itself when it holds that
    term, else a holder already sending to that rank (no new message), else the holder that
    has sent the fewest bytes so far (then the lowest rank). ``lost``: ranks whose pieces are gone
    (failed devices): never a source; a slice only they held is an error."""
    shape = tuple(int(s) for s in shape)
    sp, dp = pieces(shape, src, meshes), pieces(shape, dst, meshes)
    if lost:
        sp = [p for p in sp if p.device not in lost]
    if any(p.term is not None for p in dp):
        raise ValueError("BSR delivers whole values: a Partial destination is not supported")
    ops = {p.op for p in sp if p.op is not None}
    if len(ops) > 1:
        raise ValueError(f"partial sources over several reductions ({', '.join(sorted(ops))})")
    if ops - {"sum"}:
        raise NotImplementedError(f"BSR reduces partial sources by sum; these are P({next(iter(ops))})")
    cuts = [sorted({0, n} | {b for p in sp + dp for b in p.box[d]}) for d, n in enumerate(shape)]
    terms = sorted({p.term for p in sp}, key=lambda t: (t is None, t or ()))
    load: dict[int, int] = {}
    plan = BsrPlan(shape, sp, dp, op=next(iter(ops)) if ops else None)
    held: dict[tuple[Any, Box], list[Piece]] = {}   # (term, cell) -> its holders, in source order
    for p in sp:
        for cell in box_cells(p.box, cuts):
            held.setdefault((p.term, cell), []).append(p)
    for want in dp:
        if box_numel(want.box) == 0:
            continue
        for cell in box_cells(want.box, cuts):
            for term in terms:
                holders = held.get((term, cell), [])
                if not holders:
                    if term is None:
                        raise ValueError(f"no rank holds slice {cell} of the source layout"
                                         + (f" (it lived only on lost ranks {sorted(lost)})" if lost else ""))
                    continue   # this term is zero there (no rank of it holds the slice)
                mine = [p for p in holders if p.device == want.device]
                # a holder already sending to this rank adds no message; then the least loaded
                src_piece = mine[0] if mine else min(holders, key=lambda p: (
                    (p.device, want.device) not in plan.sends, load.get(p.device, 0), p.device))
                if src_piece.device != want.device:
                    load[src_piece.device] = load.get(src_piece.device, 0) + box_numel(cell)
                plan.sends.setdefault((src_piece.device, want.device), []).append((cell, src_piece.box, want.box))
    return plan


@dataclass
class SplitAllReduce:
    """``reductions[ranks]``: the slices all-reduced over that set of ranks, in packing order;
    ``zero[(rank, slice)]``: a holder that adds zero there (another rank gives its term)."""

    shape: tuple[int, ...]
    pieces: list[Piece]
    reductions: dict[tuple[int, ...], list[Box]] = field(default_factory=dict)
    silent: set[tuple[int, Box]] = field(default_factory=set)

    @property
    def collectives(self) -> int:
        return len(self.reductions)


def split_all_reduce_plan(shape: Any, layout: Any, meshes: dict[str, MeshSpec]) -> SplitAllReduce:
    """The slices of a partial ``layout`` and who reduces each (see the module doc)."""
    shape = tuple(int(s) for s in shape)
    ps = pieces(shape, layout, meshes, strided=True)
    if any(p.op not in (None, "sum") for p in ps):
        raise NotImplementedError("split all-reduce sums partial terms; other reductions are not supported")
    cuts = [sorted({0, n} | {b for p in ps for b in p.box[d]}) for d, n in enumerate(shape)]
    plan = SplitAllReduce(shape, ps)
    full: Box = tuple((0, n) for n in shape)
    for cell in box_cells(full, cuts):
        holders = sorted((p for p in ps if box_inside(cell, p.box)), key=lambda p: p.device)
        if len(holders) < 2:
            continue   # held once: already the whole sum there (no other term holds it)
        seen: set[Any] = set()
        for p in holders:
            if p.term in seen:
                plan.silent.add((p.device, cell))
            seen.add(p.term)
        plan.reductions.setdefault(tuple(p.device for p in holders), []).append(cell)
    return plan


def box_cells(box: Box, cuts: list[list[int]]) -> list[Box]:
    per_dim = []
    for (s, e), c in zip(box, cuts):
        pts = [x for x in c if s <= x <= e]
        per_dim.append(list(zip(pts[:-1], pts[1:])))
    return [tuple(cell) for cell in itertools.product(*per_dim)]


def box_inside(cell: Box, box: Box) -> bool:
    return all(bs <= cs and ce <= be for (cs, ce), (bs, be) in zip(cell, box))


def box_numel(box: Box) -> int:
    n = 1
    for s, e in box:
        n *= e - s
    return n


def box_view(t: Any, cell: Box, box: Box) -> Any:
    """The part of ``t`` (the piece at ``box``) that is ``cell``."""
    for d, ((cs, ce), (bs, _)) in enumerate(zip(cell, box)):
        t = t.narrow(d, cs - bs, ce - cs)
    return t
