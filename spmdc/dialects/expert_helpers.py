"""Torch forms of the expert-dispatch ops (``tensor.expert_*``, ``comm.expert_*``): the routing
arithmetic shared by the single-device ops and by each rank's all_to_all, so both place every row
at the same position.

The dispatch buffer has ``slots`` slots of ``slot_rows`` (``C``) rows; slot ``q`` holds experts
``[q*E/slots, (q+1)*E/slots)``, each expert's rows in order of source (the chunk of assignments a
rank routed), then of assignment — exactly the order a *stable* sort by expert gives. Rows past a
slot's ``C`` are dropped (only with a capacity below the worst case, ``C < S``).

``counts[s, e]``: how many assignments of source chunk ``s`` go to expert ``e``. From it alone every
rank computes the block of each ``(source, expert)`` pair: where it starts in the buffer and how many
of its rows are kept (:func:`blocks`).
"""

from __future__ import annotations

from typing import Any


def expert_counts(ids: Any, experts: int, sources: int) -> Any:
    """``[sources, experts]`` i64: assignments of each source chunk per expert (ids outside
    ``[0, experts)`` are routed nowhere)."""
    import torch

    per = ids.reshape(sources, -1, 1)
    return (per == torch.arange(experts, device=ids.device)).sum(dim=1, dtype=torch.int64)


def blocks(counts: Any, slots: int, slot_rows: int) -> tuple[Any, Any]:
    """``(start, kept)``, both ``[sources, experts]`` i64: the buffer row where block
    ``(s, e)`` starts and how many of its ``counts[s, e]`` rows fit in expert ``e``'s slot."""
    import torch

    sources, experts = counts.shape
    per_slot = experts // slots
    total = counts.sum(dim=0).reshape(slots, per_slot)
    slot_base = torch.arange(slots, device=counts.device).unsqueeze(1) * slot_rows
    base = (slot_base + total.cumsum(dim=1) - total).reshape(experts)        # expert e's first row
    start = base.unsqueeze(0) + counts.cumsum(dim=0) - counts                 # then earlier sources'
    limit = (torch.arange(experts, device=counts.device) // per_slot + 1) * slot_rows
    kept = (torch.minimum(start + counts, limit.unsqueeze(0)) - start).clamp(min=0)
    return start, kept


def expert_route(ids: Any, counts: Any, slots: int, slot_rows: int, per_source: int,
                 first_source: int) -> tuple[Any, Any, Any]:
    """``(dest, starts, ends)``: each assignment's buffer row (-1: dropped or routed nowhere), and
    each expert's rows ``[starts[e], ends[e])`` in the buffer (i32). ``ids`` hold the sources
    ``first_source, ...`` (``per_source`` assignments each)."""
    import torch

    sources, experts = counts.shape
    start, kept = blocks(counts, slots, slot_rows)
    ids_s = ids.reshape(-1, per_source)
    dest = torch.full_like(ids_s, -1)
    for j in range(ids_s.shape[0]):
        s, row = first_source + j, ids_s[j]
        ok = (row >= 0) & (row < experts)
        e = row.clamp(0, experts - 1)
        onehot = torch.nn.functional.one_hot(e, experts) * ok.unsqueeze(1)
        rank_in_block = (onehot.cumsum(dim=0) * onehot).sum(dim=1) - 1        # stable: order of assignment
        pos = start[s][e] + rank_in_block
        dest[j] = torch.where(ok & (rank_in_block < kept[s][e]), pos, torch.full_like(pos, -1))
    total_start = start[0]
    ends = total_start + kept.sum(dim=0)
    return dest.reshape(-1), total_start.to(torch.int32), ends.to(torch.int32)


def expert_dispatch(x: Any, dest: Any, rows: int, top_k: int) -> Any:
    """``out[dest[a]] = x[a // top_k]`` into a zero buffer of ``rows`` rows (dropped rows skipped)."""
    out = x.new_zeros((rows,) + tuple(x.shape[1:]))
    keep = dest >= 0
    src = keep.nonzero().reshape(-1)
    out[dest[src]] = x[src // top_k]
    return out


def expert_combine(buf: Any, dest: Any, top_k: int) -> Any:
    """``out[a] = buf[dest[a]]`` (zero for a dropped row), summed over each token's ``top_k``
    assignments when ``top_k > 1``."""
    import torch

    keep = (dest >= 0).reshape((-1,) + (1,) * (buf.dim() - 1))
    got = torch.where(keep, buf[dest.clamp(min=0)], buf.new_zeros(()))
    if top_k == 1:
        return got
    return got.reshape((-1, top_k) + tuple(buf.shape[1:])).sum(dim=1)


def _slot_groups(starts: Any, ends: Any, slot_rows: int) -> list[tuple[int, int, int]]:
    """``(expert, first row, end row)`` of each expert in a slot buffer whose first row is the
    slot of ``starts[0]`` (the whole buffer, or one rank's slots of it)."""
    s, e = starts.tolist(), ends.tolist()
    base = s[0] // slot_rows * slot_rows if s else 0
    return [(g, a - base, b - base) for g, (a, b) in enumerate(zip(s, e))]


def grouped_matmul_slots(x: Any, w: Any, starts: Any, ends: Any, slot_rows: int, transpose_w: bool) -> Any:
    """``tensor.grouped_matmul {slot_rows}``: expert ``g``'s rows ``x[a:b] @ w[g]``, zeros elsewhere."""
    n = w.shape[1] if transpose_w else w.shape[2]
    out = x.new_zeros((x.shape[0], n))
    for g, a, b in _slot_groups(starts, ends, slot_rows):
        if b > a:
            out[a:b] = x[a:b] @ (w[g].mT if transpose_w else w[g])
    return out


def grouped_matmul_wgrad_slots(x: Any, dy: Any, starts: Any, ends: Any, slot_rows: int) -> Any:
    """``tensor.grouped_matmul_wgrad {slot_rows}``: ``x[a:b]^T @ dy[a:b]`` per expert."""
    import torch

    return torch.stack([x[a:b].mT @ dy[a:b] for _, a, b in _slot_groups(starts, ends, slot_rows)])
