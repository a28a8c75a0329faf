"""Union layouts (Hetu v2's HSPMD): one tensor laid out differently on disjoint device groups.

    shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
    shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
    #shard.union<split(0, [2, 1]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>

A union lists one ordinary layout per device group (a mesh over explicit ranks) and the
*relation* across the groups:

* ``split(d, [r0, r1, ...])``: dim ``d`` is cut into consecutive pieces in the ratios ``r_i``
  (``[2, 1]``: the first group holds two thirds), group ``i`` laying out its piece with its own
  layout — a batch split unevenly across faster and slower replicas;
* ``dup``: every group holds the whole value (replicas with different tensor-parallel degrees);
* ``partial(op)``: every group holds a piece of a pending ``op`` reduction across the groups (a
  contraction over a dim split across groups).

A one-group union is the group's ordinary layout: :func:`union` returns the plain
:class:`ShardingAttr`, and it prints as ``#shard<...>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spmdc.dialects.shard.placements import REDUCE_OPS, ShardingAttr
from spmdc.ir.attributes import Attribute
from spmdc.ir.types import TensorType


@dataclass(frozen=True)
class Split:
    """``split(d, [r0, r1, ...])``: dim ``d`` in consecutive pieces, in these ratios."""

    dim: int
    ratios: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratios", tuple(int(r) for r in self.ratios))
        if any(r <= 0 for r in self.ratios):
            raise ValueError(f"split ratios must be positive, got {list(self.ratios)}")
        if self.dim < 0:
            raise ValueError(f"split dim must be >= 0, got {self.dim}")

    def sizes(self, size: int) -> list[int]:
        """Each group's piece of a dim of ``size`` (exact: the ratios must divide it)."""
        total = sum(self.ratios)
        if size % total:
            raise ValueError(f"dim {self.dim} of size {size} does not split in the ratios "
                             f"{':'.join(map(str, self.ratios))} (their sum {total} must divide it)")
        return [size // total * r for r in self.ratios]

    def __str__(self) -> str:
        return f"split({self.dim}, [{', '.join(map(str, self.ratios))}])"


@dataclass(frozen=True)
class Dup:
    """``dup``: every group holds the whole value."""

    def __str__(self) -> str:
        return "dup"


@dataclass(frozen=True)
class CrossPartial:
    """``partial(op)``: the groups' values are pieces of a pending ``op`` reduction."""

    op: str = "sum"

    def __post_init__(self) -> None:
        if self.op not in REDUCE_OPS:
            raise ValueError(f"unknown reduction '{self.op}' (choices: {', '.join(REDUCE_OPS)})")

    def __str__(self) -> str:
        return f"partial({self.op})"


Relation = Split | Dup | CrossPartial


@dataclass(frozen=True)
class UnionShardingAttr(Attribute):
    """``#shard.union<relation, [#shard<@g0, ...>, #shard<@g1, ...>]>`` (see the module doc)."""

    description = "a #shard.union<...> attribute"

    relation: Relation
    members: tuple[ShardingAttr, ...]

    def __str__(self) -> str:
        return f"#shard.union<{self.relation}, [{', '.join(map(str, self.members))}]>"

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(m.mesh for m in self.members)

    def member_types(self, ty: TensorType) -> list[TensorType]:
        """The global type each group lays out with its own layout (its piece of a split)."""
        if not isinstance(self.relation, Split):
            return [ty for _ in self.members]
        d = self.relation.dim
        return [ty.with_shape(ty.shape[:d] + (s,) + ty.shape[d + 1:]) for s in self.relation.sizes(ty.shape[d])]

    def verify_for(self, ty: TensorType, meshes: dict[str, object | None]) -> str | None:
        """Why this union cannot lay out ``ty``; ``meshes``: group name → its MeshOp (None: unknown)."""
        if len(self.members) < 2:
            return "a union needs at least two groups (one group is its plain #shard<...> layout)"
        if len(set(self.groups)) != len(self.groups):
            dup = next(g for g in self.groups if self.groups.count(g) > 1)
            return f"group '@{dup}' appears twice in the union"
        seen: dict[int, str] = {}
        for g in self.groups:
            mesh = meshes.get(g)
            if mesh is None:
                return f"union refers to unknown mesh '@{g}'"
            for d in mesh.devices:  # type: ignore[attr-defined]
                if d in seen:
                    return f"groups '@{seen[d]}' and '@{g}' share device {d}; the groups of a union must be disjoint"
                seen[d] = g
        rel = self.relation
        if isinstance(rel, Split):
            if len(rel.ratios) != len(self.members):
                return f"{rel} gives {len(rel.ratios)} ratios for {len(self.members)} groups"
            if not 0 <= rel.dim < ty.rank:
                return f"{rel} is out of range for rank-{ty.rank} tensor {ty}"
            try:
                parts = self.member_types(ty)
            except ValueError as e:
                return str(e)
        else:
            parts = [ty for _ in self.members]
        for m, part in zip(self.members, parts):
            mesh = meshes[m.mesh]
            reason = m.verify_for(part, mesh.axis_names, mesh.shape)  # type: ignore[attr-defined]
            if reason:
                return f"group '@{m.mesh}': {reason}"
        return None


def union(relation: Relation, members: Sequence[ShardingAttr]) -> ShardingAttr | UnionShardingAttr:
    """The union of ``members`` under ``relation``; one member is just its plain layout."""
    members = tuple(members)
    if len(members) == 1:
        return members[0]
    return UnionShardingAttr(relation, members)


def parse_relation(text: str) -> Relation:
    """``"split(0, [2, 1])"``, ``"dup"`` or ``"partial(sum)"`` (plans and the Python API)."""
    t = text.replace(" ", "")
    if t == "dup":
        return Dup()
    if t.startswith("partial(") and t.endswith(")"):
        return CrossPartial(t[8:-1])
    if t.startswith("split(") and t.endswith(")") and ",[" in t:
        dim, _, ratios = t[6:-1].partition(",[")
        try:
            return Split(int(dim), tuple(int(r) for r in ratios.rstrip("]").split(",")))
        except ValueError as e:
            raise ValueError(f"invalid relation '{text}': {e}") from None
    raise ValueError(f"invalid relation '{text}' (expected split(d, [r0, r1, ...]), dup or partial(op))")
