"""``shard`` dialect: device meshes, layouts of global values, and the factor-rule vocabulary.

    shard.mesh @mesh = <["dp" = 2, "tp" = 4]>          // ranks 0..7, row-major
    %1 = shard.annotate %0 {sharding = #shard<@mesh, [S(0), R]>} : tensor<8x16xf32>
    %2 = shard.redistribute %1 {from = #shard<@mesh, [S(0), R]>,
                                to = #shard<@mesh, [R, R]>} : tensor<8x16xf32>

Modules: :mod:`.placements` (``R``/``S(d)``/``SS(d, k)``/``P(op)`` and ``#shard<...>``), :mod:`.ops`,
:mod:`.syntax` (custom textual forms), :mod:`.rules` (``OpShardingRule``, the factor rules
ops declare). The dialect verifies ``shard.sharding`` wherever it appears (op results,
function arguments and results) through the registry's attribute hooks.
"""

from spmdc.dialects.shard import ops
from spmdc.dialects.shard.ops import (
    SHARDING_ATTR,
    AnnotateOp,
    MeshOp,
    RedistributeOp,
    check_sharding,
    lookup_mesh,
)
from spmdc.dialects.shard.placements import (
    REDUCE_OPS,
    Partial,
    Placement,
    RaggedShard,
    Replicate,
    Shard,
    ShardingAttr,
    StridedShard,
    chunk_offset,
    chunk_size,
    chunk_sizes,
    distinct_chunk_sizes,
    parse_placement,
    shard_dim,
    strided,
    strided_chunk_size,
    strided_problem,
)
from spmdc.dialects.shard.syntax import SYNTAX
from spmdc.dialects.shard.union import CrossPartial, Dup, Split, UnionShardingAttr, parse_relation, union
from spmdc.ir.registry import Dialect

DIALECT = Dialect("shard", [MeshOp, AnnotateOp, RedistributeOp], syntax=SYNTAX,
                  verify_op_attribute=ops.verify_op_attribute,
                  verify_arg_attribute=ops.verify_arg_attribute,
                  verify_result_attribute=ops.verify_result_attribute)

__all__ = ["DIALECT", "SHARDING_ATTR", "AnnotateOp", "MeshOp", "RedistributeOp", "check_sharding", "lookup_mesh",
           "REDUCE_OPS", "Partial", "Placement", "RaggedShard", "Replicate", "Shard", "ShardingAttr", "StridedShard",
           "chunk_offset", "chunk_size", "chunk_sizes", "distinct_chunk_sizes", "parse_placement", "shard_dim",
           "strided", "strided_chunk_size", "strided_problem",
           "CrossPartial", "Dup", "Split", "UnionShardingAttr", "parse_relation", "union"]
