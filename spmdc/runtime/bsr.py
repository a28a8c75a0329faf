"""Batched send/recv (BSR) between any two layouts, union layouts and Partial sources included:
the run-time half. :mod:`spmdc.sharding.slices` computes the table (which rank sends which
finest slice to whom, one piece per partial term); :func:`run_bsr` executes it on this rank
with one ``batch_isend_irecv``, summing partial terms on arrival.

    plan = bsr_plan((12, 5), src, dst, meshes)
    out = run_bsr(plan, my_piece, rank)      # this rank's destination piece
"""

from __future__ import annotations

from typing import Any

from spmdc.sharding.slices import BsrPlan, MeshSpec, Piece, box_numel, box_view, bsr_plan, pieces


def run_bsr(plan: BsrPlan, local: Any, rank: int, group: Any = None) -> Any:
    """Execute ``plan`` on this rank: ``local`` is its source piece (None when it holds none);
    returns its destination piece (None when it gets none). One ``batch_isend_irecv``."""
    import torch
    import torch.distributed as dist

    mine = next((p for p in plan.dst if p.device == rank), None)
    out = None
    if mine is not None:
        ref = local if local is not None else torch.zeros(())
        out = torch.zeros(tuple(e - s for s, e in mine.box), dtype=ref.dtype, device=ref.device)
    ops, recvs, keep = [], [], []
    for (s, d), cells in sorted(plan.sends.items()):
        if s == rank and d == rank:
            for cell, sbox, dbox in cells:
                box_view(out, cell, dbox).add_(box_view(local, cell, sbox))
        elif s == rank:
            buf = torch.cat([box_view(local, cell, sbox).reshape(-1) for cell, sbox, _ in cells]).contiguous()
            keep.append(buf)
            ops.append(dist.P2POp(dist.isend, buf, d, group))
        elif d == rank:
            buf = torch.empty(sum(box_numel(c) for c, _, _ in cells), dtype=out.dtype, device=out.device)
            recvs.append((buf, cells))
            ops.append(dist.P2POp(dist.irecv, buf, s, group))
    if ops:
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    for buf, cells in recvs:
        unpack_add(buf, cells, out)
    return out


def unpack_add(buf: Any, cells: list[tuple[Any, Any, Any]], out: Any) -> None:
    """Add a received buffer's slices (packed in ``cells`` order) into their boxes of ``out``."""
    at = 0
    for cell, _, dbox in cells:
        n = box_numel(cell)
        view = box_view(out, cell, dbox)
        view.add_(buf[at:at + n].view(view.shape))
        at += n


__all__ = ["BsrPlan", "MeshSpec", "Piece", "bsr_plan", "pieces", "run_bsr", "unpack_add"]
