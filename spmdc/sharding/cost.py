"""α-β communication cost model, per mesh axis (DTensor's numbers, in µs).

    all_gather / reduce_scatter:  6.6 + (n-1)·lat + B·(n-1)/n / bw
    all_reduce:                   6.6 + 2(n-1)·lat + 2B·(n-1)/n / bw
    all_to_all:                   6.6 + (n-1)·lat + B·(n-1)/n² / bw
    all_slice (R→S):              0
    to or from SS(d, k):          as S(d), but SS <-> S moves through R (one all_gather)

``B`` is the size in GB of the tensor the collective produces or consumes whole
(global bytes divided by the other axes' sharding). Latency/bandwidth default to
intra-host NVLink-like numbers; :class:`AxisCost` can be set per axis.
"""

from __future__ import annotations

from dataclasses import dataclass

from spmdc.dialects.shard import Partial, Placement, Replicate, shard_dim

INF = float("inf")
BASE_US = 6.6


@dataclass(frozen=True)
class AxisCost:
    latency_us: float = 0.6
    bandwidth_gbps: float = 87.7

    def all_gather(self, nbytes: float, n: int) -> float:
        if n <= 1:
            return 0.0
        return BASE_US + (n - 1) * self.latency_us + (nbytes / 1e9) * (n - 1) / n / self.bandwidth_gbps * 1e6

    reduce_scatter = all_gather

    def all_reduce(self, nbytes: float, n: int) -> float:
        if n <= 1:
            return 0.0
        return BASE_US + 2 * (n - 1) * self.latency_us + 2 * (nbytes / 1e9) * (n - 1) / n / self.bandwidth_gbps * 1e6

    def all_to_all(self, nbytes: float, n: int) -> float:
        if n <= 1:
            return 0.0
        return BASE_US + (n - 1) * self.latency_us + (nbytes / 1e9) * (n - 1) / (n * n) / self.bandwidth_gbps * 1e6


def placement_change_cost(src: Placement, dst: Placement, nbytes: float, n: int, axis: AxisCost) -> float:
    """Cost of changing one axis's placement of a tensor of ``nbytes`` (whole along this axis)."""
    if src == dst or n == 1:
        return 0.0
    if isinstance(dst, Partial):
        return INF  # R/S → P is never chosen by the planner
    sharded_src, sharded_dst = shard_dim(src) is not None, shard_dim(dst) is not None
    if sharded_src and isinstance(dst, Replicate):
        return axis.all_gather(nbytes, n)
    if isinstance(src, Replicate) and sharded_dst:
        return 0.0
    if isinstance(src, Partial) and isinstance(dst, Replicate):
        return axis.all_reduce(nbytes, n)
    if isinstance(src, Partial) and sharded_dst:
        return axis.reduce_scatter(nbytes, n)
    if sharded_src and sharded_dst:
        # S(i) -> S(j) is one all-to-all; to or from a strided shard the planner gathers and re-slices
        strided = src.is_strided() or dst.is_strided()
        return axis.all_gather(nbytes, n) if strided else axis.all_to_all(nbytes, n)
    return INF


@dataclass(frozen=True)
class ComputeCost:
    """Roofline estimate of an op's time in µs: matmuls by FLOPs, everything else by the bytes
    it writes (memory-bound). Defaults: an accelerator of 100 TFLOP/s and 2 TB/s."""

    flops_per_us: float = 1e8
    bytes_per_us: float = 2e6

    def op_time(self, op: object) -> float:
        from spmdc.ir.types import TensorType

        results = [r.type for r in getattr(op, "results", []) if isinstance(r.type, TensorType)]
        if not results:
            return 0.0
        if getattr(op, "name", "") == "tensor.matmul":
            a = op.operand(0).type   # type: ignore[attr-defined]
            k = a.shape[-1] if a.shape else 1
            return 2.0 * results[0].num_elements * k / self.flops_per_us
        return sum(t.num_bytes for t in results) / self.bytes_per_us
