"""The user-facing mesh and placement API.

    mesh = spmdc.Mesh({"dp": 2, "tp": 2})
    placements = to_placements(["S(0)", Replicate()], mesh)   # also DTensor placements

Ranks are laid out row-major over the axes, as in torch's DeviceMesh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spmdc.dialects.shard import (
    Partial,
    Placement,
    Replicate,
    Shard,
    ShardingAttr,
    chunk_offset,
    chunk_size,
    parse_placement,
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
            if not isinstance(size, int) or size <= 0:
                raise ValueError(f"mesh axis '{axis}' has size {size}; sizes must be positive integers")
        names = [a for a, _ in items]
        if len(set(names)) != len(names):
            raise ValueError(f"mesh axis names must be unique, got {names}")
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
        """``"dp=2,tp=2"`` → Mesh."""
        axes = []
        for part in text.split(","):
            if not part.strip():
                continue
            k, _, v = part.partition("=")
            if not v.strip().isdigit():
                raise ValueError(f"invalid mesh '{text}': expected name=size pairs like dp=2,tp=2")
            axes.append((k.strip(), int(v)))
        return Mesh(axes)

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


def to_placement(p: Any) -> Placement:
    """Accept spmdc placements, DTensor placements, or text (``"S(0)"``, ``"R"``, ``"P(sum)"``)."""
    if isinstance(p, Placement):
        return p
    if isinstance(p, str):
        return parse_placement(p)
    kind = type(p).__name__
    if kind == "Replicate":
        return Replicate()
    if kind in ("Shard", "_StridedShard") and hasattr(p, "dim"):
        return Shard(int(p.dim))
    if kind in ("Partial", "_Partial", "_NormPartial"):
        op = getattr(p, "reduce_op", "sum")
        return Partial({"sum": "sum", "avg": "avg", "max": "max", "min": "min"}.get(str(op).lower(), "sum"))
    raise TypeError(f"not a placement: {p!r} (expected Replicate(), Shard(d), Partial(op) or text like 'S(0)')")


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
        ps = [x for x in ps.replace("[", "").replace("]", "").split(",") if x.strip()]
    if not isinstance(ps, (list, tuple)):
        ps = [ps]
    out = tuple(to_placement(p) for p in ps)
    if len(out) != len(mesh.axes):
        raise ValueError(f"{len(out)} placements given for a mesh with {len(mesh.axes)} axes "
                         f"({', '.join(mesh.axis_names)})")
    return out


def local_shape(shape: tuple[int, ...], placements: tuple[Placement, ...], mesh_shape: tuple[int, ...],
                coords: tuple[int, ...]) -> tuple[int, ...]:
    """This rank's piece: each ``S(d)`` chunks dim d like torch.chunk, axes in order."""
    out = list(shape)
    for p, n, c in zip(placements, mesh_shape, coords):
        if isinstance(p, Shard):
            out[p.dim] = chunk_size(out[p.dim], n, c)
    return tuple(out)


def local_offset(shape: tuple[int, ...], placements: tuple[Placement, ...], mesh_shape: tuple[int, ...],
                 coords: tuple[int, ...]) -> tuple[int, ...]:
    """Global index of this rank's piece's first element, per dim."""
    off = [0] * len(shape)
    size = list(shape)
    for p, n, c in zip(placements, mesh_shape, coords):
        if isinstance(p, Shard):
            off[p.dim] += chunk_offset(size[p.dim], n, c)
            size[p.dim] = chunk_size(size[p.dim], n, c)
    return tuple(off)
