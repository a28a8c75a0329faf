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

from spmdc.dialects.shard import Partial, RaggedShard, Replicate, Shard


def reduction_moves(src: Sequence[Any], dst: Sequence[Any]) -> list[tuple[str, int, int, Any]] | None:
    """Per mesh axis what turns ``src`` into ``dst``: ("all_reduce" | "reduce_scatter", axis,
    dim, explicit sizes or None); None when it is more than reductions of a pending sum (left to
    DTensor)."""
    moves = []
    for a, (s, d) in enumerate(zip(src, dst)):
        if s == d:
            continue
        if not (isinstance(s, Partial) and s.op == "sum"):
            return None
        if isinstance(d, Replicate):
            moves.append(("all_reduce", a, -1, None))
        elif isinstance(d, (Shard, RaggedShard)):
            if any(isinstance(o, (Shard, RaggedShard)) and o.dim == d.dim for b, o in enumerate(dst) if b != a):
                return None   # nested shards of one dim keep DTensor's order: not a plain reduce-scatter
            moves.append(("reduce_scatter", a, d.dim, list(d.units) if isinstance(d, RaggedShard) else None))
        else:
            return None
    return moves


def summed_later(src: Sequence[Any], dst: Sequence[Any]) -> list[int] | None:
    """The mesh axes along which a gradient in layout ``src`` is only a pending sum (``P(sum)``)
    where its storage ``dst`` is replicated — what a caller may sum over micro-batches as it is and
    all-reduce once —, or None when moving it to ``dst`` takes anything else (or nothing)."""
    moves = reduction_moves(src, dst)
    if not moves or any(m[0] != "all_reduce" for m in moves):
        return None
    return [m[1] for m in moves]


def reduce_gradients(grads: dict[str, tuple[Any, Sequence[Any]]], storage: dict[str, Sequence[Any]],
                     comm: Any, to_dtensor: Any, stored: Any = None, relayout: Any = None) -> dict[str, Any]:
    """``{fqn: (local sum, its layout)}`` → ``{fqn: gradient in its storage layout}``, made by
    ``stored(fqn, local, layout)`` (default ``to_dtensor``; a ragged layout has no DTensor):
    all-reduces first (bucketed per axis into one flat buffer), then reduce-scatters (one bucket
    per axis, ragged pieces at their explicit sizes). Any other move: ``relayout(fqn, local,
    src, dst) -> local`` (default: DTensor's redistribute)."""
    stored = stored or to_dtensor
    axes = comm.mesh.mesh_dim_names   # comm: a CountingComm, so the run's table shows these
    locals_ = {fqn: g for fqn, (g, _) in grads.items()}
    plans = {fqn: reduction_moves(lay, storage[fqn]) for fqn, (_, lay) in grads.items()}
    out = {}
    for fqn, moves in plans.items():   # anything but pending sums: DTensor's redistribute
        if moves is None:
            g, lay = grads[fqn]
            if relayout is not None:
                out[fqn] = stored(fqn, relayout(fqn, g, lay, storage[fqn]), storage[fqn])
            else:
                out[fqn] = to_dtensor(fqn, g, lay).redistribute(placements=to_dtensor(fqn, g, storage[fqn]).placements)
    for kind in ("all_reduce", "reduce_scatter"):
        for a in range(len(axes)):
            todo = [(fqn, m[2], m[3]) for fqn, ms in plans.items() if ms for m in ms if m[0] == kind and m[1] == a]
            if not todo:
                continue
            xs = [locals_[f] for f, _, _ in todo]
            if kind == "all_reduce":
                for (f, _, _), y in zip(todo, comm.all_reduce_bucket(xs, [axes[a]], "sum")):
                    locals_[f] = y
            else:
                sizes = [z for _, _, z in todo] if any(z is not None for _, _, z in todo) else None
                for (f, _, _), y in zip(todo, comm.reduce_scatter_bucket(xs, axes[a], [d for _, d, _ in todo], "sum",
                                                                         sizes)):
                    locals_[f] = y
    for fqn, moves in plans.items():
        if moves is not None:
            out[fqn] = stored(fqn, locals_[fqn], storage[fqn])
    return out


def clip_grads_(grads: list[tuple[Any, Sequence[Any]]], max_norm: float, comm: Any, group: Any = None) -> Any:
    """Scale gradients in place so that their global 2-norm is at most ``max_norm`` (as
    ``torch.nn.utils.clip_grad_norm_``); returns the norm before clipping (a 0-d tensor).
    ``grads``: ``(gradient, its spmdc storage layout)``, a gradient a DTensor or (ragged) this
    rank's piece. The squared sums of the local pieces (a replicated gradient counted on one
    coordinate only) are added into one scalar and all-reduced once."""
    import torch.distributed as dist

    if not grads:
        return torch.zeros(())
    locals_ = [g.to_local() if hasattr(g, "to_local") else g for g, _ in grads]
    axes = comm.mesh.mesh_dim_names
    total = torch.zeros((), dtype=torch.float32, device=locals_[0].device)
    for local, (_, layout) in zip(locals_, grads):
        if all(comm.coord(axes[a]) == 0 for a, p in enumerate(layout) if isinstance(p, Replicate)):
            local = local.float()
            total = total + (local * local).sum()
    comm.stats.add("comm.all_reduce", total.numel() * total.element_size())
    dist.all_reduce(total, group=group)   # over the mesh's ranks (None: the whole job)
    norm = total.sqrt()
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for local in locals_:
        local.mul_(coef.to(local.dtype))
    return norm
