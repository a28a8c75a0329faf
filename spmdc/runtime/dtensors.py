"""spmdc layouts as DTensor placements (the Python API takes and returns DTensors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdc.dialects.shard import Partial, Replicate, Shard, StridedShard


def dtensor_placements(layout: Sequence[Any]) -> tuple[Any, ...]:
    from torch.distributed.tensor import Partial as TPartial
    from torch.distributed.tensor import Replicate as TReplicate
    from torch.distributed.tensor import Shard as TShard

    out = []
    for p in layout:
        if isinstance(p, Shard):
            out.append(TShard(p.dim))
        elif isinstance(p, StridedShard):
            from torch.distributed.tensor.placement_types import _StridedShard

            out.append(_StridedShard(p.dim, split_factor=p.parts))
        elif isinstance(p, Partial):
            out.append(TPartial(p.op))
        elif isinstance(p, Replicate):
            out.append(TReplicate())
        else:
            raise TypeError(f"placement {p} has no DTensor equivalent")
    return tuple(out)


def contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    stride, acc = [], 1
    for s in reversed(tuple(shape)):
        stride.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(stride))


def mesh_of(mesh: Any, device_mesh: Any = None) -> tuple[Any, Any]:
    """``(spmdc Mesh, DeviceMesh or None)`` from what a user passes as ``mesh`` (see
    :meth:`spmdc.sharding.mesh.Mesh.of`); a DeviceMesh given as ``mesh`` is also the device mesh."""
    from torch.distributed.device_mesh import DeviceMesh

    from spmdc.sharding.mesh import Mesh

    if isinstance(mesh, DeviceMesh):
        if device_mesh is not None and device_mesh is not mesh:
            raise ValueError("pass the DeviceMesh once, as mesh= (device_mesh= goes with an spmdc Mesh)")
        return Mesh.of(mesh), mesh
    return Mesh.of(mesh), device_mesh
