"""Rank code of test_pairwise.py: spmdc's gloo gathers and reduce-scatters (pairwise exchanges)
against what every rank's inputs say the result is, with the memory each one allocates."""

from __future__ import annotations

import torch
import torch.distributed as dist

from spmdc.runtime.memory import measure_peak


def _data(rank: int, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 100 + rank)
    return torch.randn(shape, generator=g)


def exchanges() -> dict:
    """Each rank checks its own results against its inputs and returns what failed, the peak bytes
    of a gather and of a reduce-scatter, and which of gloo's own collectives were called."""
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.dialects.shard import chunk_sizes
    from spmdc.runtime.collectives import Collectives

    dist.init_process_group("gloo")
    me, n = dist.get_rank(), dist.get_world_size()
    comm = Collectives(init_device_mesh("cpu", (n,), mesh_dim_names=("dp",)))
    used: list[str] = []   # gloo's own gather/reduce collectives, which these must not call
    for name in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"):
        setattr(dist, name, lambda *a, _name=name, **k: used.append(_name))
    every = lambda shape, seed: [_data(r, shape, seed) for r in range(n)]   # noqa: E731
    bad: list[str] = []

    # a plain gather of uneven torch.chunk pieces along dim 1 (7 columns over the ranks)
    full = torch.cat([_data(0, (3, 7), 1)] * 1)
    piece = full.narrow(1, sum(chunk_sizes(7, n)[:me]), chunk_sizes(7, n)[me]).contiguous()
    got = comm.all_gather(piece, "dp", 1, (3, 7))
    if not torch.equal(got, full):
        bad.append("all_gather: not the full tensor")

    # reduce-scatters: sum / avg / max / min of every rank's (10, 3) along dim 0 (uneven pieces)
    xs = every((10, 3), 2)
    rows = chunk_sizes(10, n)
    lo = sum(rows[:me])
    for op, want in (("sum", sum(xs)), ("avg", sum(xs) / n), ("max", torch.stack(xs).amax(0)),
                     ("min", torch.stack(xs).amin(0))):
        got = comm.reduce_scatter(xs[me], "dp", 0, op)
        if not torch.allclose(got, want[lo:lo + rows[me]], rtol=1e-6, atol=1e-6):
            bad.append(f"reduce_scatter {op}: wrong piece")

    # buckets: two members, one ragged, gathered and reduce-scattered
    a, b = every((6, 4), 3), every((5,), 4)
    sizes_b = [2, 1, 1, 1][:n] if n == 4 else None
    per_a = chunk_sizes(6, n)
    mine_a = a[0].narrow(0, sum(per_a[:me]), per_a[me])
    zb = sizes_b if sizes_b is not None else chunk_sizes(5, n)
    mine_b = b[0].narrow(0, sum(zb[:me]), zb[me])
    ga, gb = comm.all_gather_bucket([mine_a, mine_b], "dp", [0, 0], [(6, 4), (5,)], [None, sizes_b])
    if not (torch.equal(ga, a[0]) and torch.equal(gb, b[0])):
        bad.append("all_gather_bucket: not the full members")
    ra, rb = comm.reduce_scatter_bucket([a[me], b[me]], "dp", [0, 0], "sum", [None, sizes_b])
    if not (torch.allclose(ra, sum(a).narrow(0, sum(per_a[:me]), per_a[me]), atol=1e-6)
            and torch.allclose(rb, sum(b).narrow(0, sum(zb[:me]), zb[me]), atol=1e-6)):
        bad.append("reduce_scatter_bucket: wrong pieces")

    # overlapping started exchanges, waited out of order: each gets its own tag
    p1 = comm.all_gather_start(piece, "dp", 1, (3, 7))
    p2 = comm.reduce_scatter_start(xs[me], "dp", 0, "sum")
    p3 = comm.all_gather_start(piece * 2, "dp", 1, (3, 7))
    r3, r2, r1 = comm.wait(p3), comm.wait(p2), comm.wait(p1)
    if not (torch.equal(r1, full) and torch.equal(r3, full * 2)
            and torch.allclose(r2, sum(xs)[lo:lo + rows[me]], atol=1e-6)):
        bad.append("started exchanges waited out of order: wrong results")

    # determinism: the same reduction twice gives the same bits
    if not torch.equal(comm.reduce_scatter(xs[me], "dp", 0, "sum"), comm.reduce_scatter(xs[me], "dp", 0, "sum")):
        bad.append("reduce_scatter: two runs differ")

    # memory: a gather allocates its output and nothing else (no transfer buffer); a
    # reduce-scatter of a packed buffer its one-piece receive buffer and its result
    big = torch.randn(n * 4096)
    mine = big[:4096].clone()

    def gather() -> torch.Tensor:
        return comm.all_gather(mine, "dp", 0, (n * 4096,))
    _, gather_peak = measure_peak(gather)

    def scatter() -> torch.Tensor:
        return comm.reduce_scatter(big, "dp", 0, "sum")
    _, scatter_peak = measure_peak(scatter)
    dist.destroy_process_group()
    return {"bad": bad, "gather_peak": gather_peak, "scatter_peak": scatter_peak, "used": used}
