"""Gradients outside the program: the one reduction after accumulation, and clipping.

With ``grad_accum=N`` the step runs N micro-batches through a program that returns gradients
before their reduction (``P(sum)`` on the axes that split the batch); the sums are added
locally and reduced once per step, bucketed: one reduce-scatter per mesh axis for gradients
stored sharded there, one ``all_reduce_bucket`` per axis for the replicated ones::

    grads   [P(sum)] x 6        micro-batch 1..4: no collective
            -> comm.reduce_scatter_bucket(dp)    (once per step)
            -> [S(0)] x 6

Clipping by global norm sums each gradient's squared local shard (counted once where the
gradient is replicated) and takes one all-reduce of that scalar over the whole mesh.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from spmdc.dialects.shard import Partial, Replicate, Shard


def _moves(src: Sequence[Any], dst: Sequence[Any]) -> list[tuple[int, str, int]] | None:
    """Per mesh axis what turns ``src`` into ``dst``: ("all_reduce" | "reduce_scatter", axis,
    dim); None when it is more than reductions of a pending sum (left to DTensor)."""
    moves = []
    for a, (s, d) in enumerate(zip(src, dst)):
        if s == d:
            continue
        if not (isinstance(s, Partial) and s.op == "sum"):
            return None
        if isinstance(d, Replicate):
            moves.append(("all_reduce", a, -1))
        elif isinstance(d, Shard):
            if any(isinstance(o, Shard) and o.dim == d.dim for b, o in enumerate(dst) if b != a):
                return None   # nested shards of one dim keep DTensor's order: not a plain reduce-scatter
            moves.append(("reduce_scatter", a, d.dim))
        else:
            return None
    return moves


def reduce_gradients(grads: dict[str, tuple[Any, Sequence[Any]]], storage: dict[str, Sequence[Any]],
                     comm: Any, to_dtensor: Any) -> dict[str, Any]:
    """``{fqn: (local sum, its layout)}`` → ``{fqn: DTensor in its storage layout}``: all-reduces
    first (bucketed per axis into one flat buffer), then reduce-scatters (one bucket per axis)."""
    axes = comm.mesh.mesh_dim_names   # comm: a CountingComm, so the run's table shows these
    locals_ = {fqn: g for fqn, (g, _) in grads.items()}
    plans = {fqn: _moves(lay, storage[fqn]) for fqn, (_, lay) in grads.items()}
    out = {}
    for fqn, moves in plans.items():   # anything but pending sums: DTensor's redistribute
        if moves is None:
            g, lay = grads[fqn]
            out[fqn] = to_dtensor(fqn, g, lay).redistribute(placements=to_dtensor(fqn, g, storage[fqn]).placements)
    for kind in ("all_reduce", "reduce_scatter"):
        for a in range(len(axes)):
            todo = [(fqn, m[2]) for fqn, ms in plans.items() if ms for m in ms if m[0] == kind and m[1] == a]
            if not todo:
                continue
            xs = [locals_[f] for f, _ in todo]
            if kind == "all_reduce":
                for (f, _), y in zip(todo, comm.all_reduce_bucket(xs, [axes[a]], "sum")):
                    locals_[f] = y
            else:
                for (f, _), y in zip(todo, comm.reduce_scatter_bucket(xs, axes[a], [d for _, d in todo], "sum")):
                    locals_[f] = y
    for fqn, moves in plans.items():
        if moves is not None:
            out[fqn] = to_dtensor(fqn, locals_[fqn], storage[fqn])
    return out


def clip_grads_(grads: list[Any], max_norm: float, comm: Any | None = None) -> Any:
    """Scale DTensor gradients in place so that their global 2-norm is at most ``max_norm`` (as
    ``torch.nn.utils.clip_grad_norm_``); returns the norm before clipping (a 0-d tensor). The
    squared sums of the local shards (a replicated gradient counted on one coordinate only) are
    added into one scalar and all-reduced once."""
    import torch.distributed as dist

    if not grads:
        return torch.zeros(())
    total = torch.zeros((), dtype=torch.float32, device=grads[0].to_local().device)
    for g in grads:
        mesh = g.device_mesh
        counted = all(mesh.get_local_rank(a) == 0 for a, p in enumerate(g.placements) if p.is_replicate())
        if counted:
            local = g.to_local().float()
            total = total + (local * local).sum()
    if comm is not None:
        comm.stats.add("comm.all_reduce", total.numel() * total.element_size())
    dist.all_reduce(total)   # the mesh spans the job's ranks
    norm = total.sqrt()
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.to_local().mul_(coef.to(g.dtype))
    return norm
