"""Gathers and reductions on gloo as pairwise exchanges (``isend``/``irecv`` between every pair).

gloo's ``all_gather_into_tensor`` and ``all_reduce`` run ring algorithms: ``n - 1`` dependent steps
whose every step needs every rank's process scheduled, which costs most on hosts with fewer cores
than ranks, and the gather receives into a transfer buffer of its own before copying out. A
pairwise exchange posts every transfer at once and lets gloo's I/O threads move the bytes:

* :func:`gather_into` receives every rank's piece straight into its rows of the output (no
  transfer buffer, nothing allocated);
* :class:`ScatterExchange` posts the sends of a packed rank-major buffer when started and, when
  finished, receives the ``n - 1`` pieces for this rank one at a time into one piece's buffer,
  reducing each into this rank's own row in place (the pack is the accumulator, as gloo's
  in-place all-reduce used it);
* all-reduces stay gloo's own (a reduction then a gather pair by pair measured no faster on
  4 ranks sharing 2 cores).

A reduce-scatter moves ``(n - 1) / n`` of the pack per rank, the analytic minimum, where gloo's
in-place all-reduce used before moved twice that.

Each rank reduces its own row in a fixed order (its own piece, then the piece of rank ``me - 1``,
``me - 2``, ...), so a run is deterministic. Every exchange takes a tag of its own
(``Collectives`` counts them per axis, equal on every rank of a group).

    works = gather_into(buf, mine, group, n, me, tag)          # wait every work, then buf is full
    ex = ScatterExchange(pack, "sum", group, n, me, tag)       # sends posted
    row = ex.finish(wait)                                      # this rank's reduced row (a view of pack)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

TAG_BASE = 1 << 24
"""Point-to-point tags of these exchanges start here, clear of the pipeline's and resharding's."""


def uses_pairwise(group: Any) -> bool:
    """Whether the collectives on ``group`` run as pairwise exchanges (gloo's groups)."""
    return dist.get_backend(group) == "gloo"


def _rows(buf: torch.Tensor, n: int) -> list[torch.Tensor]:
    """``buf`` (contiguous) flattened into ``n`` consecutive rows, torch.chunk's sizes."""
    return list(torch.tensor_split(buf.view(-1), n))


def gather_into(buf: torch.Tensor, mine: torch.Tensor, group: Any, n: int, me: int, tag: int) -> list[Any]:
    """Start gathering: ``mine`` (contiguous, one row's numel) goes to every rank's row ``me`` of
    ``buf`` (``n`` equal rows); returns the works (receives and sends) to wait on."""
    rows = buf.view(n, -1)
    rows[me].copy_(mine.reshape(-1))
    if rows.shape[1] == 0:
        return []
    works = []
    for k in range(1, n):
        src, dst = (me - k) % n, (me + k) % n
        works.append(dist.irecv(rows[src], group=group, group_src=src, tag=tag))
        works.append(dist.isend(rows[me], group=group, group_dst=dst, tag=tag))
    return works


_COMBINE: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "sum": lambda acc, x: acc.add_(x),
    "avg": lambda acc, x: acc.add_(x),   # (the caller divides)
    "max": lambda acc, x: torch.maximum(acc, x, out=acc),
    "min": lambda acc, x: torch.minimum(acc, x, out=acc),
}


class ScatterExchange:
    """A reduce-scatter of ``buf`` (contiguous; ``n`` rows, torch.chunk's sizes, row ``r`` for rank
    ``r``) as pairwise exchanges: the sends of the other ranks' rows are posted now, the receives
    when :meth:`finish` is called."""

    def __init__(self, buf: torch.Tensor, op: str, group: Any, n: int, me: int, tag: int):
        if op not in _COMBINE:
            raise ValueError(f"pairwise reduction: unknown reduce op '{op}' (one of {sorted(_COMBINE)})")
        self.buf, self.op, self.group, self.n, self.me, self.tag = buf, op, group, n, me, tag
        self.rows = _rows(buf, n)
        self.sends = [dist.isend(self.rows[(me + k) % n], group=group, group_dst=(me + k) % n, tag=tag)
                      for k in range(1, n) if self.rows[(me + k) % n].numel()]

    def finish(self, wait: Callable[[Any], None]) -> torch.Tensor:
        """Receive and reduce this rank's row (in place in ``buf``; returned as a view), then wait
        the sends."""
        acc = self.rows[self.me]
        if acc.numel():
            tmp = torch.empty_like(acc)
            combine = _COMBINE[self.op]
            for k in range(1, self.n):
                wait(dist.irecv(tmp, group=self.group, group_src=(self.me - k) % self.n, tag=self.tag))
                combine(acc, tmp)
            del tmp
        sends, self.sends = self.sends, []
        for w in sends:
            wait(w)
        return acc


__all__ = ["TAG_BASE", "ScatterExchange", "gather_into", "uses_pairwise"]
