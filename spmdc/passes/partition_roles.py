"""Rank roles: which ranks of a mesh ``partition`` (and the per-rank passes) give the same program.

A per-rank program reads its mesh coordinates in two ways. Most of it reads them at run time:
collectives name mesh axes and the runtime knows the rank's place on them (``comm.all_slice``
takes this rank's slice, ``comm.keep_at_origin`` keeps a value on the ranks at coordinate 0).
What ``partition`` writes into the program as constants is the rest:

* **local shapes**: every laid-out value's type (``torch.chunk`` pieces: an uneven or ragged
  layout gives the ranks along the axes that cut it different shapes);
* **random pieces**: a sharded ``tensor.random`` draws the piece at this rank's ``offset`` of the
  global tensor, so the coordinates on the axes that shard it are written in;
* **expert routes**: a ``tensor.expert_route`` whose ids are sharded numbers its first source
  chunk from this rank's offset.

Ranks that agree on all of these get the same program text but for ``spmdc.rank``, and one
compiled program serves them all (:func:`program_roles`); :func:`shape_roles` groups by local
shapes only (what memory, bytes and time depend on: ``spmdc plan`` predicts one rank per such
role). Both read the *global* program, before partition: no rank's program is compiled to find
them. For ``dp=512,tp=8`` fsdp+tp on even shapes and no dropout every rank has one role::

    program_roles(parse_module(step.global_ir), step.mesh, range(4096))   # [[0, 1, ..., 4095]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from spmdc.dialects.shard.placements import RaggedShard, Shard, StridedShard
from spmdc.ir.core import Operation
from spmdc.ir.types import TensorType
from spmdc.sharding.layouts import layout_of
from spmdc.sharding.mesh import local_shape

__all__ = ["coordinates", "coordinate_axes", "program_roles", "shape_roles"]


def coordinates(rank: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Rank ``rank``'s coordinates on a mesh of ``shape`` (row-major, the last axis fastest)."""
    out = []
    for n in reversed(tuple(shape)):
        rank, c = divmod(rank, n)
        out.append(c)
    return tuple(reversed(out))


def _uneven(shape: tuple[int, ...], placements: tuple[Any, ...], mesh_shape: tuple[int, ...]) -> bool:
    """Whether ranks of the mesh hold different local shapes of a tensor so laid out (the pieces
    cut axis after axis, as :func:`~spmdc.sharding.mesh.local_shape` does)."""
    size = list(shape)
    for p, n in zip(placements, mesh_shape):
        if isinstance(p, RaggedShard):
            if len(set(p.units)) > 1:
                return True
            size[p.dim] = p.units[0]
        elif isinstance(p, StridedShard):
            if size[p.dim] % (p.parts * n):
                return True
            size[p.dim] //= n
        elif isinstance(p, Shard):
            if size[p.dim] % n:
                return True
            size[p.dim] //= n
    return False


def _main(module: Operation) -> Any:
    from spmdc.dialects.func import FuncOp

    funcs = [op for op in module.body.ops if isinstance(op, FuncOp)]
    return next((f for f in funcs if f.sym_name == "main"), funcs[0])


def _uneven_values(func: Any, mesh_shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[Any, ...]]]:
    values = list(func.args) + [r for op in func.walk() for r in op.results]
    pairs = set()
    for v in values:
        lay = layout_of(v)
        if lay is not None and isinstance(v.type, TensorType) and _uneven(v.type.shape, tuple(lay), mesh_shape):
            pairs.add((tuple(v.type.shape), tuple(lay)))
    return sorted(pairs, key=str)


def _group(ranks: Iterable[int], key: Any) -> list[list[int]]:
    groups: dict[Any, list[int]] = {}
    for r in ranks:
        groups.setdefault(key(r), []).append(r)
    return sorted(groups.values(), key=lambda g: g[0])


def shape_roles(module: Operation, mesh: Any, ranks: Iterable[int]) -> list[list[int]]:
    """``ranks`` (indices on ``mesh``) grouped by the local shapes of every laid-out value of the
    global program ``module``: each group one role, in order of its lowest rank."""
    ranks = list(ranks)
    pairs = _uneven_values(_main(module), mesh.shape)
    if not pairs:
        return [ranks]

    def key(r: int) -> tuple:
        c = coordinates(r, mesh.shape)
        return tuple(local_shape(s, lay, mesh.shape, c) for s, lay in pairs)
    return _group(ranks, key)


def coordinate_axes(module: Operation, mesh: Any) -> dict[str, list[str]]:
    """The mesh axes whose coordinate ``partition`` writes into a per-rank program, each with the
    first ops (up to three, by location) that make it do so: sharded ``tensor.random`` draws
    and sharded ``tensor.expert_route`` ids (see the module doc)."""
    from spmdc.dialects.tensor import ExpertRouteOp, RandomOp

    out: dict[str, list[str]] = {}
    for op in _main(module).walk():
        if isinstance(op, RandomOp):
            lay, dims = layout_of(op.result), None
        elif isinstance(op, ExpertRouteOp):
            lay, dims = layout_of(op.operand(0)), (0,)
        else:
            continue
        for axis, n, p in zip(mesh.axis_names, mesh.shape, lay or ()):
            if n > 1 and isinstance(p, (Shard, RaggedShard)) and (dims is None or p.dim in dims):
                where = out.setdefault(axis, [])
                if len(where) < 3:
                    where.append(f"'{op.name}' at {op.location}")
    return out


def program_roles(module: Operation, mesh: Any, ranks: Iterable[int]) -> list[list[int]]:
    """``ranks`` grouped so that ranks of a group get the same per-rank program (but for
    ``spmdc.rank``): the same local shapes and the same coordinates on every
    :func:`coordinate_axes` axis. In order of each group's lowest rank."""
    ranks = list(ranks)
    pairs = _uneven_values(_main(module), mesh.shape)
    fixed = [mesh.axis_names.index(a) for a in coordinate_axes(module, mesh)]
    if not pairs and not fixed:
        return [ranks]

    def key(r: int) -> tuple:
        c = coordinates(r, mesh.shape)
        return (tuple(local_shape(s, lay, mesh.shape, c) for s, lay in pairs), tuple(c[i] for i in fixed))
    return _group(ranks, key)

