"""``func`` dialect: functions, returns and calls (:mod:`.ops`), and ``func.func``'s form (:mod:`.syntax`).

    func.func @main(%x: tensor<8x16xf32> {shard.sharding = #shard<@mesh, [S(0), R]>},
                    %w: tensor<16x32xf32> {spmdc.param = "fc.weight"})
        -> (tensor<8x32xf32> {spmdc.loss}) {
      %0 = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
      func.return %0 : tensor<8x32xf32>
    }
"""

from spmdc.dialects.func.ops import CallOp, FuncOp, ReturnOp, SuspendOp
from spmdc.dialects.func.syntax import SYNTAX
from spmdc.ir.registry import Dialect

DIALECT = Dialect("func", [FuncOp, ReturnOp, CallOp, SuspendOp], syntax=SYNTAX)

__all__ = ["DIALECT", "CallOp", "FuncOp", "ReturnOp", "SuspendOp"]
