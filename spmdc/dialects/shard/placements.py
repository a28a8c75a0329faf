"""Placements and the ``shard`` dialect's attribute ``#shard<@mesh, [R, S(1), P(sum)]>``.

One placement per mesh axis, in the mesh's axis order (PyTorch DTensor convention):

* ``R`` — :class:`Replicate`: every rank of the axis holds the whole tensor;
* ``S(d)`` — :class:`Shard`: tensor dim ``d`` is split over the axis like
  ``torch.chunk`` (earlier ranks get the larger pieces);
* ``P(sum|avg|max|min)`` — :class:`Partial`: each rank holds a term of a pending
  reduction.

Two ``S`` on the same tensor dim shard it by the first axis, then the second.
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
    """Read ``R``, ``S(1)`` or ``P(sum)``; raises ValueError on anything else."""
    t = text.strip()
    if t == "R":
        return Replicate()
    if t.startswith("S(") and t.endswith(")"):
        return Shard(int(t[2:-1]))
    if t.startswith("P(") and t.endswith(")"):
        return Partial(t[2:-1].strip())
    raise ValueError(f"invalid placement '{text}' (expected R, S(d) or P(sum|avg|max|min))")


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

    def verify_for(self, ty: TensorType, mesh_axes: tuple[str, ...] | None) -> str | None:
        """Why this sharding cannot lay out ``ty`` on a mesh with ``mesh_axes``; None if it can."""
        if mesh_axes is None:
            return f"sharding refers to unknown mesh '@{self.mesh}'"
        if len(self.placements) != len(mesh_axes):
            return (f"sharding {self} has {len(self.placements)} placements but mesh "
                    f"'@{self.mesh}' has {len(mesh_axes)} axes")
        for axis, p in zip(mesh_axes, self.placements):
            if isinstance(p, Shard) and not 0 <= p.dim < ty.rank:
                return (f"placement {p} on mesh axis '{axis}' is out of range for "
                        f"rank-{ty.rank} tensor {ty}")
        return None
