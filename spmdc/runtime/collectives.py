"""``comm`` ops on torch.distributed process groups, one group per mesh axis.

Uneven shards follow ``torch.chunk``: gathers pad every piece to the largest one,
exchange, and cut the padding off again, so any size works on any backend.

    comm = Collectives(device_mesh)          # torch.distributed.device_mesh.DeviceMesh
    y = comm.all_gather(x, "tp", 0, (8, 16)) # what a comm.all_gather op's torch expression calls

Programs call these methods through :class:`CountingComm`, which records what they issue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from spmdc.dialects.shard import chunk_sizes

_REDUCE = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.SUM}


@dataclass
class CommStats:
    """Collectives this rank issued: op name → (count, bytes sent+received locally)."""

    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, nbytes: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        self.bytes[name] = self.bytes.get(name, 0) + nbytes


class Collectives:
    """The collectives of one rank: one method per ``comm`` op, named after it."""

    def __init__(self, device_mesh: Any):
        self.mesh = device_mesh
        self.stats = CommStats()

    def group(self, axis: str) -> Any:
        return self.mesh.get_group(axis)

    def size(self, axis: str) -> int:
        return self.mesh.size(self.mesh.mesh_dim_names.index(axis))

    def coord(self, axis: str) -> int:
        return self.mesh.get_local_rank(axis)

    def all_gather_bucket(self, xs: list[torch.Tensor], axis: str, dims: list[int],
                          out_shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
        """Pack every piece (padded to its largest torch.chunk piece) into one flat buffer,
        all-gather it once, unpack."""
        n = self.size(axis)
        pads, parts = [], []
        for x, d, shape in zip(xs, dims, out_shapes):
            sizes = chunk_sizes(shape[d], n)
            pad = max(sizes)
            xt = x.movedim(d, 0)
            if xt.shape[0] < pad:
                xt = torch.cat([xt, xt.new_zeros((pad - xt.shape[0],) + tuple(xt.shape[1:]))])
            pads.append((pad, tuple(xt.shape[1:]), sizes))
            parts.append(xt.reshape(-1))
        flat = torch.cat(parts)
        buf = flat.new_empty((n * flat.numel(),))
        dist.all_gather_into_tensor(buf, flat, group=self.group(axis))
        per_rank = buf.view(n, flat.numel())
        out, offset = [], 0
        for (pad, rest, sizes), d in zip(pads, dims):
            numel = pad * int(torch.Size(rest).numel())
            pieces = [per_rank[r, offset:offset + numel].view((pad,) + rest)[:sizes[r]] for r in range(n)]
            out.append(torch.cat(pieces).movedim(0, d).contiguous())
            offset += numel
        return out

    def reduce_scatter_bucket(self, xs: list[torch.Tensor], axis: str, dims: list[int],
                              op: str) -> list[torch.Tensor]:
        """Lay every tensor's padded per-rank chunks out rank-major in one buffer, reduce-scatter
        it once, unpack this rank's chunks."""
        n = self.size(axis)
        me = self.coord(axis)
        metas, per_rank = [], [[] for _ in range(n)]
        for x, d in zip(xs, dims):
            sizes = chunk_sizes(x.shape[d], n)
            pad = max(sizes)
            xt = x.movedim(d, 0)
            start = 0
            for r, s in enumerate(sizes):
                p = xt[start:start + s]
                start += s
                if s < pad:
                    p = torch.cat([p, p.new_zeros((pad - s,) + tuple(p.shape[1:]))])
                per_rank[r].append(p.reshape(-1))
            metas.append((pad, tuple(xt.shape[1:]), sizes[me], d))
        buf = torch.cat([t for r in range(n) for t in per_rank[r]]).contiguous()
        out_flat = buf.new_empty((buf.numel() // n,))
        dist.reduce_scatter_tensor(out_flat, buf, op=_REDUCE[op], group=self.group(axis))
        if op == "avg":
            out_flat = out_flat / n
        out, offset = [], 0
        for pad, rest, mine, d in metas:
            numel = pad * int(torch.Size(rest).numel())
            out.append(out_flat[offset:offset + numel].view((pad,) + rest)[:mine].movedim(0, d).contiguous())
            offset += numel
        return out

    def all_reduce_bucket(self, xs: list[torch.Tensor], axes: list[str], op: str) -> list[torch.Tensor]:
        """Concatenate every tensor (flattened) into one buffer, all-reduce it once per axis, split."""
        flat = torch.cat([x.reshape(-1) for x in xs])
        out = self.all_reduce(flat, axes, op)
        return [piece.view_as(x) for piece, x in zip(out.split([x.numel() for x in xs]), xs)]

    # -- primitives ----------------------------------------------------------------------
    def all_reduce(self, x: torch.Tensor, axes: list[str], op: str) -> torch.Tensor:
        y = x.clone()
        n = 1
        for axis in axes:
            dist.all_reduce(y, op=_REDUCE[op], group=self.group(axis))
            n *= self.size(axis)
        return y / n if op == "avg" else y

    def all_slice(self, x: torch.Tensor, axis: str, dim: int) -> torch.Tensor:
        sizes = chunk_sizes(x.shape[dim], self.size(axis))
        i = self.coord(axis)
        return x.narrow(dim, sum(sizes[:i]), sizes[i]).contiguous()

    def all_gather(self, x: torch.Tensor, axis: str, dim: int, out_shape: tuple[int, ...]) -> torch.Tensor:
        n = self.size(axis)
        sizes = chunk_sizes(out_shape[dim], n)
        pad = max(sizes)
        xt = x.movedim(dim, 0)
        if xt.shape[0] < pad:
            xt = torch.cat([xt, xt.new_zeros((pad - xt.shape[0],) + tuple(xt.shape[1:]))])
        buf = xt.new_empty((n * pad,) + tuple(xt.shape[1:]))
        dist.all_gather_into_tensor(buf, xt.contiguous(), group=self.group(axis))
        pieces = [buf[i * pad:i * pad + s] for i, s in enumerate(sizes)]
        return torch.cat(pieces).movedim(0, dim).contiguous()

    def reduce_scatter(self, x: torch.Tensor, axis: str, dim: int, op: str) -> torch.Tensor:
        n = self.size(axis)
        sizes = chunk_sizes(x.shape[dim], n)
        pad = max(sizes)
        xt = x.movedim(dim, 0)
        pieces = []
        start = 0
        for s in sizes:
            p = xt[start:start + s]
            start += s
            if s < pad:
                p = torch.cat([p, p.new_zeros((pad - s,) + tuple(p.shape[1:]))])
            pieces.append(p)
        buf = torch.cat(pieces).contiguous()
        out = buf.new_empty((pad,) + tuple(buf.shape[1:]))
        dist.reduce_scatter_tensor(out, buf, op=_REDUCE[op], group=self.group(axis))
        mine = out[:sizes[self.coord(axis)]]
        if op == "avg":
            mine = mine / n
        return mine.movedim(0, dim).contiguous()

    def all_to_all(self, x: torch.Tensor, axis: str, split_dim: int, concat_dim: int,
                   out_shape: tuple[int, ...]) -> torch.Tensor:
        n = self.size(axis)
        send_sizes = chunk_sizes(x.shape[split_dim], n)
        send = list(torch.split(x, send_sizes, dim=split_dim))
        recv_cd = chunk_sizes(out_shape[concat_dim], n)
        recv_shapes = []
        for i in range(n):
            s = list(out_shape)
            s[concat_dim] = recv_cd[i]
            recv_shapes.append(s)
        flat_in = torch.cat([p.contiguous().reshape(-1) for p in send])
        out_splits = [int(torch.Size(s).numel()) for s in recv_shapes]
        flat_out = flat_in.new_empty(sum(out_splits))
        dist.all_to_all_single(flat_out, flat_in, output_split_sizes=out_splits,
                               input_split_sizes=[p.numel() for p in send], group=self.group(axis))
        parts = [t.reshape(s) for t, s in zip(torch.split(flat_out, out_splits), recv_shapes)]
        return torch.cat(parts, dim=concat_dim).contiguous()


COLLECTIVES = ("all_reduce", "all_gather", "all_slice", "reduce_scatter", "all_to_all", "all_gather_bucket",
               "reduce_scatter_bucket", "all_reduce_bucket")


class CountingComm:
    """What a program runs with: forwards to ``comm``, each collective also recorded into ``comm.stats``.

        outs = fn(args, CountingComm(comm))     # comm.stats then holds the program's collectives
    """

    def __init__(self, comm: Any):
        self._comm = comm

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._comm, name)
        if name not in COLLECTIVES:
            return target
        stats = self._comm.stats

        def call(x: Any, *args: Any) -> Any:
            xs = x if isinstance(x, list) else [x]  # bucketed collectives take a list
            stats.add("comm." + name, sum(t.numel() * t.element_size() for t in xs))
            return target(x, *args)
        return call
