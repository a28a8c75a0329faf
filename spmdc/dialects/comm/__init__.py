"""``comm`` dialect: collectives on per-rank values (:mod:`.collectives`) and their bucketed
forms (:mod:`.bucket`, SimpleFSDP's one-collective-for-several-tensors) and their asynchronous split into
``comm.*_start`` / ``comm.wait`` (:mod:`.async_ops`).

    %1 = comm.all_gather %0 {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
    %a, %b = comm.all_gather_bucket %x, %y {axis = "dp", dims = [0, 0], mesh = @mesh}
        : (tensor<4x16xf32>, tensor<8xf32>) -> (tensor<8x16xf32>, tensor<16xf32>)
"""

from spmdc.dialects.comm import async_ops, bucket, collectives, experts, split
from spmdc.dialects.comm.async_ops import START_OPS, StartOp, WaitOp, collective_kind
from spmdc.dialects.comm.bucket import AllGatherBucketOp, AllReduceBucketOp, BucketOp, ReduceScatterBucketOp
from spmdc.dialects.comm.collectives import (
    AllGatherOp,
    AllReduceOp,
    AllSliceOp,
    AllToAllOp,
    CollectiveOp,
    KeepAtOriginOp,
    ReduceScatterOp,
)
from spmdc.dialects.comm.split import BsrOp, SplitAllReduceOp
from spmdc.ir.registry import Dialect

DIALECT = Dialect("comm", [*collectives.OPS, *bucket.OPS, *async_ops.OPS, *split.OPS, *experts.OPS])

__all__ = ["DIALECT", "AllGatherBucketOp", "BsrOp", "AllGatherOp", "AllReduceBucketOp", "AllReduceOp", "AllSliceOp",
           "AllToAllOp", "BucketOp", "CollectiveOp", "KeepAtOriginOp", "ReduceScatterBucketOp", "ReduceScatterOp",
           "START_OPS", "SplitAllReduceOp", "StartOp", "WaitOp", "collective_kind"]
