"""``tensor`` dialect: compute on global (before partition) or local (after) shapes.

Every op has shape/dtype inference (``infer_result_types``), a verifier and a
torch reference implementation (``reference``). The ops live in small modules:
:mod:`.elementwise`, :mod:`.reduction`, :mod:`.shape`, :mod:`.linalg`.

    %0 = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = tensor.add %0, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    %2 = tensor.relu %1 : tensor<8x32xf32>
"""

from spmdc.dialects.tensor import (
    activation,
    attention,
    compare,
    conv,
    distance,
    elementwise,
    experts,
    grid,
    grouped,
    index,
    linalg,
    nn,
    pool,
    random,
    reduction,
    shape,
    sort,
)
from spmdc.dialects.tensor.activation import *  # noqa: F401,F403
from spmdc.dialects.tensor.attention import AttentionGradOp, AttentionOp  # noqa: F401
from spmdc.dialects.tensor.base import TensorOp
from spmdc.dialects.tensor.compare import *  # noqa: F401,F403
from spmdc.dialects.tensor.conv import ConvInputGradOp, ConvOp, ConvWeightGradOp  # noqa: F401
from spmdc.dialects.tensor.distance import *  # noqa: F401,F403
from spmdc.dialects.tensor.elementwise import *  # noqa: F401,F403
from spmdc.dialects.tensor.experts import ExpertCombineOp, ExpertCountsOp, ExpertDispatchOp, ExpertRouteOp  # noqa: F401
from spmdc.dialects.tensor.grid import *  # noqa: F401,F403
from spmdc.dialects.tensor.grouped import GroupedMatmulOp, GroupedMatmulWgradOp  # noqa: F401
from spmdc.dialects.tensor.index import *  # noqa: F401,F403
from spmdc.dialects.tensor.linalg import LinearOp, MatmulOp  # noqa: F401
from spmdc.dialects.tensor.nn import *  # noqa: F401,F403
from spmdc.dialects.tensor.pool import *  # noqa: F401,F403
from spmdc.dialects.tensor.random import RandomOp, RandpermOp, RngSeedOp  # noqa: F401
from spmdc.dialects.tensor.reduction import (  # noqa: F401
    AllOp,
    AnyOp,
    ArgMaxOp,
    ArgMinOp,
    HistcOp,
    MaxOp,
    MeanOp,
    MinOp,
    ProdOp,
    SumOp,
)
from spmdc.dialects.tensor.shape import (  # noqa: F401
    BroadcastOp,
    ConstantOp,
    DiagonalOp,
    DiagonalScatterOp,
    IotaOp,
    PermuteOp,
    ReshapeOp,
)
from spmdc.dialects.tensor.sort import CumprodOp, SortOp, TopkOp  # noqa: F401
from spmdc.ir.registry import Dialect

DIALECT = Dialect("tensor", [*elementwise.OPS, *reduction.OPS, *shape.OPS, *linalg.OPS,
                             *activation.OPS, *compare.OPS, *index.OPS, *nn.OPS, *attention.OPS, *random.OPS,
                             *conv.OPS, *sort.OPS, *pool.OPS, *grid.OPS, *distance.OPS,
                             *grouped.OPS, *experts.OPS])

__all__ = ["DIALECT", "TensorOp"] + [op.__name__ for op in DIALECT.ops]
