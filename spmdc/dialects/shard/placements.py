"""Placements and the ``shard`` dialect's attribute ``#shard<@mesh, [R, S(1), P(sum)]>``.

One placement per mesh axis, in the mesh's axis order (PyTorch DTensor convention):

* ``R`` — :class:`Replicate`: every rank of the axis holds the whole tensor;
* ``S(d)`` — :class:`Shard`: tensor dim ``d`` is split over the axis like
  ``torch.chunk`` (earlier ranks get the larger pieces);
* ``SS(d, k)`` — :class:`StridedShard` (DTensor's ``_StridedShard(d, split_factor=k)``):
  dim ``d`` seen as ``k`` equal parts laid end to end (a fused ``q|k|v``), each part split
  over the axis like ``S``; a rank holds its piece of every part, parts in order. A fused QKV
  weight ``[32, 96]`` at ``[SS(1, 3)]`` on 4 ranks: rank 1 holds columns 8–15, 40–47, 72–79;
* ``RS(d, [u0, u1, ...])`` — :class:`RaggedShard` (veScale's RaggedShard): dim ``d`` cut into
  consecutive pieces of ``u_i`` units on mesh coordinate ``i`` (0 allowed: that rank holds
  nothing); a unit is one index of dim ``d`` with everything after it (a row of a matrix at
  ``d = 0``, a whole matrix of a ``[L, m, n]`` stack). ``RS(0, [0, 8, 0, 0])`` keeps a whole
  8-row matrix on rank 1 — what a whole-matrix optimizer (Muon) needs;
* ``P(sum|avg|max|min)`` — :class:`Partial`: each rank holds a term of a pending
  reduction.

Two ``S`` on the same tensor dim shard it by the first axis, then the second; a dim that an
``SS`` or ``RS`` shards is sharded by that axis alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from spmdc.ir.attributes import Attribute, format_symbol
from spmdc.ir.types import TensorType

REDUCE_OPS: tuple[str, ...] = ("sum", "avg", "max", "min")


class Placement:
    """Base of the three placement kinds; instances are small frozen values."""

    def is_replicate(self) -> bool:
        return isinstance(self, Replicate)

    def is_shard(self, dim: int | None = None) -> bool:
        return isinstance(self, Shard) and (dim is None or self.dim == dim)

    def is_strided(self) -> bool:
        return isinstance(self, StridedShard)

    def is_partial(self) -> bool:
        return isinstance(self, Partial)


@dataclass(frozen=True)
class Replicate(Placement):
    def __str__(self) -> str:
        return "R"

    def __repr__(self) -> str:
        return "Replicate()"


@dataclass(frozen=True)
class Shard(Placement):
    dim: int

    def __str__(self) -> str:
        return f"S({self.dim})"

    def __repr__(self) -> str:
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class StridedShard(Placement):
    """``SS(dim, parts)``: ``dim`` is ``parts`` equal parts, each split over the axis like ``S``.

    The local piece on coordinate ``c`` of an ``n``-rank axis is the concatenation, part by
    part, of ``torch.chunk(part, n)[c]`` — so slicing part ``j`` out of it locally gives
    ``S(dim)`` of part ``j``, and ``SS(d, 1)`` is ``S(d)`` (written ``S(d)``: see
    :func:`strided`).
    """

    dim: int
    parts: int

    def __post_init__(self) -> None:
        if self.parts < 2:
            raise ValueError(f"a strided shard needs at least 2 parts, got SS({self.dim}, {self.parts}) "
                             f"(one part is S({self.dim}))")

    def __str__(self) -> str:
        return f"SS({self.dim}, {self.parts})"

    def __repr__(self) -> str:
        return f"StridedShard({self.dim}, {self.parts})"


@dataclass(frozen=True)
class RaggedShard(Placement):
    """``RS(dim, [u0, u1, ...])``: coordinate ``i`` holds the next ``u_i`` indices of ``dim``."""

    dim: int
    units: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "units", tuple(int(u) for u in self.units))
        if not self.units or any(u < 0 for u in self.units):
            raise ValueError(f"a ragged shard needs one non-negative unit count per rank, got {list(self.units)}")

    def __str__(self) -> str:
        return f"RS({self.dim}, [{', '.join(map(str, self.units))}])"

    def __repr__(self) -> str:
        return f"RaggedShard({self.dim}, {list(self.units)})"

    def offset(self, index: int) -> int:
        return sum(self.units[:index])


def strided(dim: int, parts: int) -> Placement:
    """``SS(dim, parts)``, or ``S(dim)`` when there is one part."""
    return Shard(dim) if parts == 1 else StridedShard(dim, parts)


def shard_dim(p: Placement) -> int | None:
    """The tensor dim a ``S``, ``SS`` or ``RS`` placement splits; None for ``R`` and ``P``."""
    return p.dim if isinstance(p, (Shard, StridedShard, RaggedShard)) else None


def strided_chunk_size(size: int, parts: int, n: int, index: int) -> int:
    """Local size of a dim of ``size`` at ``SS(., parts)`` on coordinate ``index`` of ``n`` ranks."""
    return parts * chunk_size(size // parts, n, index)


@dataclass(frozen=True)
class Partial(Placement):
    op: str = "sum"

    def __post_init__(self) -> None:
        if self.op not in REDUCE_OPS:
            raise ValueError(f"unknown partial reduction '{self.op}' (expected one of {', '.join(REDUCE_OPS)})")

    def __str__(self) -> str:
        return f"P({self.op})"

    def __repr__(self) -> str:
        return f"Partial({self.op!r})"


def parse_placement(text: str) -> Placement:
    """Read ``R``, ``S(1)``, ``SS(1, 3)``, ``RS(0, [2, 0, 1])`` or ``P(sum)``; raises ValueError
    on anything else."""
    t = text.strip()
    if t == "R":
        return Replicate()
    if t.startswith("S(") and t.endswith(")"):
        return Shard(int(t[2:-1]))
    if t.startswith("RS(") and t.endswith("])") and "[" in t:
        dim, _, units = t[3:-2].partition("[")
        return RaggedShard(int(dim.strip().rstrip(",")), tuple(int(u) for u in units.split(",") if u.strip()))
    if t.startswith("SS(") and t.endswith(")"):
        dim, _, parts = t[3:-1].partition(",")
        if parts.strip():
            return StridedShard(int(dim), int(parts))
    if t.startswith("P(") and t.endswith(")"):
        return Partial(t[2:-1].strip())
    raise ValueError(f"invalid placement '{text}' (expected R, S(d), SS(d, parts), RS(d, [units, ...]) "
                     "or P(sum|avg|max|min))")


def chunk_size(size: int, parts: int, index: int) -> int:
    """Size of piece ``index`` of ``torch.chunk`` over ``parts`` (zero past the data), in O(1)."""
    if parts <= 0:
        raise ValueError("parts must be positive")
    step = -(-size // parts) if size else 0
    return max(0, min(step, size - step * index))


def chunk_offset(size: int, parts: int, index: int) -> int:
    """Where piece ``index`` starts, in O(1)."""
    step = -(-size // parts) if size else 0
    return min(step * index, size)


def distinct_chunk_sizes(size: int, parts: int) -> list[int]:
    """The sizes pieces can have (at most three: full, the remainder, empty), sorted, in O(1)."""
    step = -(-size // parts) if size else 0
    full = size // step if step else 0
    sizes = {chunk_size(size, parts, 0)}
    if full < parts:
        sizes.add(chunk_size(size, parts, full))
        if full + 1 < parts:
            sizes.add(0)
    return sorted(sizes)


def chunk_sizes(size: int, parts: int) -> list[int]:
    """Sizes of ``torch.chunk(t, parts)`` along a dim of ``size``, padded with zeros to ``parts``."""
    if parts <= 0:
        raise ValueError("parts must be positive")
    step = -(-size // parts) if size else 0
    sizes = []
    left = size
    for _ in range(parts):
        take = min(step, left)
        sizes.append(take)
        left -= take
    return sizes


@dataclass(frozen=True)
class ShardingAttr(Attribute):
    """``#shard<@mesh, [S(0), R]>``: the layout of one tensor over mesh ``@mesh``."""

    description = "a #shard<...> attribute"

    mesh: str
    placements: tuple[Placement, ...]

    def __str__(self) -> str:
        inner = ", ".join(str(p) for p in self.placements)
        return f"#shard<@{format_symbol(self.mesh)}, [{inner}]>"

    def is_replicated(self) -> bool:
        return all(p.is_replicate() for p in self.placements)

    def verify_for(self, ty: TensorType, mesh_axes: tuple[str, ...] | None,
                   mesh_shape: tuple[int, ...] | None = None, local: bool = False) -> str | None:
        """``local``: ``ty`` is one rank's piece (after ``partition``), not the global type."""
        """Why this sharding cannot lay out ``ty`` on a mesh with ``mesh_axes``; None if it can."""
        if mesh_axes is None:
            return f"sharding refers to unknown mesh '@{self.mesh}'"
        if len(self.placements) != len(mesh_axes):
            return (f"sharding {self} has {len(self.placements)} placements but mesh "
                    f"'@{self.mesh}' has {len(mesh_axes)} axes")
        for axis, p in zip(mesh_axes, self.placements):
            d = shard_dim(p)
            if d is not None and not 0 <= d < ty.rank:
                return (f"placement {p} on mesh axis '{axis}' is out of range for "
                        f"rank-{ty.rank} tensor {ty}")
        return strided_problem(self.placements, ty.shape, mesh_axes, mesh_shape, local)


def strided_problem(placements: tuple[Placement, ...], shape: tuple[int, ...], mesh_axes: tuple[str, ...],
                    mesh_shape: tuple[int, ...] | None = None, local: bool = False) -> str | None:
    """Why the ``SS``/``RS`` placements of a layout cannot lay out ``shape`` (on a mesh of
    ``mesh_shape``, when known); None if they can."""
    for k, (axis, p) in enumerate(zip(mesh_axes, placements)):
        if not isinstance(p, (StridedShard, RaggedShard)) or not 0 <= p.dim < len(shape):
            continue
        if isinstance(p, RaggedShard):
            if mesh_shape is not None and len(p.units) != mesh_shape[k]:
                return (f"placement {p} on mesh axis '{axis}' gives {len(p.units)} unit counts for "
                        f"{mesh_shape[k]} ranks")
            if not local and sum(p.units) != shape[p.dim]:
                return (f"placement {p} on mesh axis '{axis}': its units add up to {sum(p.units)}, "
                        f"not dim {p.dim}'s size {shape[p.dim]}")
        elif not local and shape[p.dim] % p.parts:
            return (f"placement {p} on mesh axis '{axis}': dim {p.dim} of size {shape[p.dim]} does not "
                    f"split into {p.parts} equal parts")
        others = [a for j, (a, q) in enumerate(zip(mesh_axes, placements)) if a != axis and shard_dim(q) == p.dim
                  # a ragged piece may be chunked again by later axes (torch.chunk of the piece)
                  and not (isinstance(p, RaggedShard) and j > k and isinstance(q, Shard))]
        if others:
            kind = "ragged" if isinstance(p, RaggedShard) else "strided"
            return (f"placement {p} on mesh axis '{axis}': dim {p.dim} is also sharded on mesh axis "
                    f"'{others[0]}'; a {kind} dim is sharded by one axis only")
    return None
