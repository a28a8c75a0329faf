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


def dtensor_parameter(dt: Any, requires_grad: bool) -> Any:
    """``nn.Parameter(dt, requires_grad)`` for a DTensor ``dt``, without ``nn.Parameter``'s
    ``dt.detach()`` when ``dt`` is a leaf that needs no grad (``from_local`` of a detached
    tensor): that detach goes through DTensor's sharding propagation, about 4 ms a parameter the
    first time in a process (0.15 s of a warm start of gpt2-tiny). The result is what
    ``nn.Parameter`` gives for a tensor subclass: a DTensor with ``requires_grad`` set, marked a
    parameter (``isinstance(p, nn.Parameter)``); here ``dt`` itself.

        p = dtensor_parameter(DTensor.from_local(piece.detach(), mesh, [Shard(0)]), True)
        isinstance(p, nn.Parameter), p.requires_grad, p.is_leaf   # (True, True, True)
    """
    import torch.nn as nn

    if dt.requires_grad or dt.grad_fn is not None:
        return nn.Parameter(dt, requires_grad=requires_grad)   # (another tensor: detach it)
    t = dt.requires_grad_(requires_grad)
    t._is_param = True
    return t
