"""The user-facing mesh and placement API.

    mesh = spmdc.Mesh({"dp": 2, "tp": 2})
    placements = to_placements(["S(0)", Replicate()], mesh)   # also DTensor placements

Ranks are laid out row-major over the axes, as in torch's DeviceMesh.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spmdc.dialects.shard import (
    Partial,
    Placement,
    RaggedShard,
    Replicate,
    Shard,
    ShardingAttr,
    StridedShard,
    chunk_offset,
    chunk_size,
    parse_placement,
    strided,
    strided_chunk_size,
)
from spmdc.dialects.shard.ops import MAX_MESH_DEVICES


def _is_device_mesh(obj: Any) -> bool:
    """A ``torch.distributed.DeviceMesh`` (duck-typed: the sharding layer does not import torch)."""
    return type(obj).__name__ == "DeviceMesh" and hasattr(obj, "mesh_dim_names")


def _device_mesh_axes(dm: Any) -> list[tuple[str, int]]:
    names = dm.mesh_dim_names
    if not names:
        raise ValueError('a DeviceMesh used as a mesh needs dim names: init_device_mesh(..., mesh_dim_names=("dp",)); '
                         "spmdc plans refer to mesh axes by name")
    return [(str(n), int(s)) for n, s in zip(names, tuple(dm.mesh.shape))]


@dataclass(frozen=True)
class Mesh:
    axes: tuple[tuple[str, int], ...]
    name: str = "mesh"

    def __init__(self, axes: Mapping[str, int] | Iterable[tuple[str, int]], name: str = "mesh"):
        if _is_device_mesh(axes):
            axes = _device_mesh_axes(axes)
        items = tuple(axes.items()) if isinstance(axes, Mapping) else tuple(axes)
        if not all(isinstance(it, tuple) and len(it) == 2 and isinstance(it[0], str) for it in items):
            raise TypeError(f"a mesh is given as {{'dp': 2, 'tp': 2}}, [('dp', 2)], 'dp=2,tp=2' (Mesh.of) or a "
                            f"torch DeviceMesh with dim names, got {axes!r}")
        for axis, size in items:
            _check_axis(axis, size, items)
        devices = 1
        for _, size in items:
            devices *= size
        if devices > MAX_MESH_DEVICES:
            raise ValueError(f"mesh {', '.join(f'{a}={n}' for a, n in items)} has {devices} devices; "
                             f"spmdc supports meshes of at most {MAX_MESH_DEVICES} devices")
        object.__setattr__(self, "axes", items)
        object.__setattr__(self, "name", name)

    @staticmethod
    def of(mesh: Any) -> Mesh:
        """A Mesh from any form users give: a Mesh, ``"dp=2,tp=2"``, ``{"dp": 2}`` or a
        ``torch.distributed.DeviceMesh`` whose dims are named (``init_device_mesh(..., mesh_dim_names=...)``)."""
        if isinstance(mesh, Mesh):
            return mesh
        if isinstance(mesh, str):
            return Mesh.parse(mesh)
        return Mesh(mesh)

    @staticmethod
    def parse(text: str) -> Mesh:
        """``"dp=2,tp=2"`` → Mesh; an empty text, an empty part, a missing name or a size that is
        not a positive integer is refused naming the part."""
        if not text.strip():
            raise ValueError(f"invalid mesh {text!r}: it is empty; expected name=size pairs like dp=2,tp=2")
        axes = []
        for part in text.split(","):
            k, eq, v = part.partition("=")
            if not part.strip():
                raise ValueError(f"invalid mesh '{text}': an empty axis (an extra comma); expected name=size pairs "
                                 "like dp=2,tp=2")
            if not eq:
                raise ValueError(f"invalid mesh '{text}': axis '{part.strip()}' has no size; expected name=size "
                                 "pairs like dp=2,tp=2")
            v = v.strip()
            if not re.fullmatch(r"[+-]?[0-9]+", v):
                raise ValueError(f"invalid mesh '{text}': mesh axis '{k.strip()}' has size '{v}'; sizes must be "
                                 "positive integers (expected name=size pairs like dp=2,tp=2)")
            axes.append((k.strip(), int(v)))
        try:
            return Mesh(axes)
        except ValueError as e:
            raise ValueError(f"invalid mesh '{text}': {e}") from None

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.axes)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def axis_size(self, axis: str) -> int:
        return dict(self.axes)[axis]

    def coords(self, rank: int) -> dict[str, int]:
        """Row-major coordinates of ``rank``."""
        out = {}
        for axis, size in reversed(self.axes):
            out[axis] = rank % size
            rank //= size
        return {a: out[a] for a in self.axis_names}

    def __str__(self) -> str:
        return ",".join(f"{a}={s}" for a, s in self.axes)


AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_axis(axis: str, size: Any, items: tuple[tuple[str, Any], ...]) -> None:
    """One mesh axis: an identifier name (it is spelt in plans and the IR), given once, with a
    positive integer size."""
    if not AXIS_NAME.fullmatch(axis):
        why = "is empty" if not axis.strip() else "is not an identifier (letters, digits, '_'; no spaces)"
        raise ValueError(f"mesh axis name {axis!r} {why}")
    if sum(a == axis for a, _ in items) > 1:
        raise ValueError(f"mesh axis '{axis}' is given twice; axis names must be unique")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"mesh axis '{axis}' has size {size!r}; sizes must be positive integers")


def to_placement(p: Any) -> Placement:
    """Accept spmdc placements, DTensor placements (``_StridedShard(d, split_factor=k)`` is
    ``SS(d, k)``), or text (``"S(0)"``, ``"SS(1, 3)"``, ``"R"``, ``"P(sum)"``)."""
    if isinstance(p, Placement):
        return p
    if isinstance(p, str):
        return parse_placement(p)
    kind = type(p).__name__
    if kind == "Replicate":
        return Replicate()
    if kind == "_StridedShard" and hasattr(p, "dim"):
        return strided(int(p.dim), int(getattr(p, "split_factor", 1)))
    if kind == "Shard" and hasattr(p, "dim"):
        return Shard(int(p.dim))
    if kind in ("Partial", "_Partial", "_NormPartial"):
        op = getattr(p, "reduce_op", "sum")
        return Partial({"sum": "sum", "avg": "avg", "max": "max", "min": "min"}.get(str(op).lower(), "sum"))
    raise TypeError(f"not a placement: {p!r} (expected Replicate(), Shard(d), StridedShard(d, k), Partial(op) "
                    "or text like 'S(0)')")


def to_placements(ps: Any, mesh: Mesh) -> tuple[Placement, ...]:
    """One placement per mesh axis; a dict ``{axis: placement}`` leaves other axes Replicate."""
    if isinstance(ps, ShardingAttr):
        return ps.placements
    if isinstance(ps, Mapping):
        unknown = [a for a in ps if a not in mesh.axis_names]
        if unknown:
            raise ValueError(f"unknown mesh axis '{unknown[0]}' (mesh axes: {', '.join(mesh.axis_names)})")
        return tuple(to_placement(ps.get(a, Replicate())) for a in mesh.axis_names)
    if isinstance(ps, str):
        t = ps.strip()
        ps = _split_placements(t[1:-1] if t.startswith("[") and t.endswith("]") else t)
    if not isinstance(ps, (list, tuple)):
        ps = [ps]
    out = tuple(to_placement(p) for p in ps)
    if len(out) != len(mesh.axes):
        raise ValueError(f"{len(out)} placements given for a mesh with {len(mesh.axes)} axes "
                         f"({', '.join(mesh.axis_names)})")
    return out


def _split_placements(text: str) -> list[str]:
    """``"SS(1, 3), R"`` → ``["SS(1, 3)", "R"]``: commas inside parentheses stay."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "([") - (ch in ")]")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x for x in out if x.strip()]


def local_shape(shape: tuple[int, ...], placements: tuple[Placement, ...], mesh_shape: tuple[int, ...],
                coords: tuple[int, ...]) -> tuple[int, ...]:
    """This rank's piece: each ``S(d)`` chunks dim d like torch.chunk, axes in order; an
    ``SS(d, k)`` holds its chunk of each of the k parts, an ``RS(d, units)`` its units."""
    out = list(shape)
    for p, n, c in zip(placements, mesh_shape, coords):
        if isinstance(p, Shard):
            out[p.dim] = chunk_size(out[p.dim], n, c)
        elif isinstance(p, StridedShard):
            out[p.dim] = strided_chunk_size(out[p.dim], p.parts, n, c)
        elif isinstance(p, RaggedShard):
            out[p.dim] = p.units[c]
    return tuple(out)


def local_offset(shape: tuple[int, ...], placements: tuple[Placement, ...], mesh_shape: tuple[int, ...],
                 coords: tuple[int, ...]) -> tuple[int, ...]:
    """Global index of this rank's piece's first element, per dim (``S`` layouts: an ``SS``
    piece is not one block; :func:`local_blocks` gives its parts)."""
    if any(isinstance(p, StridedShard) for p in placements):
        raise ValueError(f"a strided layout [{', '.join(map(str, placements))}] has no single offset")
    off = [0] * len(shape)
    size = list(shape)
    for p, n, c in zip(placements, mesh_shape, coords):
        if isinstance(p, Shard):
            off[p.dim] += chunk_offset(size[p.dim], n, c)
            size[p.dim] = chunk_size(size[p.dim], n, c)
        elif isinstance(p, RaggedShard):
            off[p.dim] += p.offset(c)
            size[p.dim] = p.units[c]
    return tuple(off)


def local_blocks(shape: tuple[int, ...], placements: tuple[Placement, ...], mesh_shape: tuple[int, ...],
                 coords: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """Where this rank's piece comes from along its strided dim: ``[(dim, start, length), ...]``
    in local order (one block per part of an ``SS(d, k)``), after the ``S`` placements;
    ``[]`` when no axis is strided. The piece is ``cat([full.narrow(d, s, l) ...], d)``
    narrowed further by the ``S`` placements (:func:`local_offset` of the others)."""
    for p, n, c in zip(placements, mesh_shape, coords):
        if isinstance(p, StridedShard):
            part = shape[p.dim] // p.parts
            off, size = chunk_offset(part, n, c), chunk_size(part, n, c)
            return [(p.dim, j * part + off, size) for j in range(p.parts)]
    return []
