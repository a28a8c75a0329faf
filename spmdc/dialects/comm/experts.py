"""Expert dispatch collectives: ``all_to_all`` with split sizes known only at run time.

``partition`` makes them from ``tensor.expert_dispatch`` / ``tensor.expert_combine`` whose slot
factor is sharded over an expert-parallel axis (``spmdc.dialects.tensor.experts``). Operands are
the payloads (one result each), then this rank's ``dest`` (each of its assignments' row in the
global slot buffer) and the whole ``counts`` (``[sources, experts]``, what the all-gather of the
size exchange gave every rank): from these alone both sides know every split, so each op is one
``all_to_all_single`` whose payloads travel packed side by side (tokens and routing weights in
one exchange)::

    %rows, %w = comm.expert_dispatch %x, %p, %dest, %counts
                  {axis = "ep", mesh = @mesh, slot_rows = 64, top_k = [2, 1]}
        : (tensor<16x32xf32>, tensor<32xf32>, tensor<32xi64>, tensor<2x4xi64>) -> (tensor<64x32xf32>, tensor<64xf32>)
    %y = comm.expert_combine %buf, %dest, %counts {axis = "ep", mesh = @mesh, top_k = [1]}
        : (tensor<64x32xf32>, tensor<32xi64>, tensor<2x4xi64>) -> tensor<32x32xf32>

``expert_dispatch`` returns this rank's slot (``slot_rows`` rows; zeros after its rows);
``expert_combine`` returns each assignment's row back in this rank's order (``top_k > 1``: summed
over a token's assignments). The bytes each moves are the routed rows' only.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.comm.collectives import CollectiveOp
from spmdc.dialects.pyexpr import literal
from spmdc.ir.attributes import ArrayAttr, BoolAttr, IntegerAttr, StringAttr, SymbolRefAttr
from spmdc.ir.types import TensorType


class _ExpertMoveOp(CollectiveOp):
    """Shared checks: payloads, then ``dest`` (i64 rank 1) and ``counts`` (i64 rank 2)."""

    num_operands = None
    num_results = None
    required_attrs = {"mesh": SymbolRefAttr, "axis": StringAttr, "top_k": ArrayAttr}

    @property
    def top_ks(self) -> list[int]:
        return [int(a.value) for a in self.attributes["top_k"]]  # type: ignore[attr-defined]

    @property
    def payloads(self) -> int:
        return len(self.operands) - 2

    def _check(self) -> tuple[list[TensorType], list[TensorType]]:
        mesh = self.mesh()
        if self.axis not in mesh.axis_names:
            raise self.emit_error(f"mesh '@{mesh.sym_name}' has no axis '{self.axis}'")
        if self.payloads < 1 or len(self.results) != self.payloads:
            raise self.emit_error(f"needs payloads, dest and counts, and one result per payload; got "
                                  f"{len(self.operands)} operands and {len(self.results)} results")
        top = self.attributes["top_k"]
        if not all(isinstance(a, IntegerAttr) and a.value >= 1 for a in top) or len(top) != self.payloads:  # type: ignore[arg-type]
            raise self.emit_error(f"'top_k' must list one positive integer per payload ({self.payloads})")
        dest, counts = self.operand(self.payloads).type, self.operand(self.payloads + 1).type
        if not (isinstance(dest, TensorType) and dest.rank == 1 and dest.element_type == "i64"):
            raise self.emit_error(f"dest must be a rank-1 i64 tensor, got {dest}")
        if not (isinstance(counts, TensorType) and counts.rank == 2 and counts.element_type == "i64"):
            raise self.emit_error(f"counts must be a rank-2 i64 tensor, got {counts}")
        ins = [v.type for v in self.operands[:self.payloads]]
        outs = [r.type for r in self.results]
        for i, (a, b) in enumerate(zip(ins, outs)):
            if not isinstance(a, TensorType) or not isinstance(b, TensorType) or a.element_type != b.element_type \
                    or a.shape[1:] != b.shape[1:]:
                raise self.emit_error(f"payload #{i} {a} and result #{i} {b} must differ only in their rows")
        return ins, outs  # type: ignore[return-value]

    def _call(self, method: str, ins: Sequence[str], extra: str) -> str:
        k = self.payloads
        expr = (f"comm.{method}([{', '.join(ins[:k])}], {ins[k]}, {ins[k + 1]}, {literal(self.axis)}, "
                f"{literal(self.top_ks)}{extra})")
        return expr + "[0]" if k == 1 else expr


class ExpertDispatchOp(_ExpertMoveOp):
    """Rows of this rank's routed assignments to the ranks holding their experts' slots.

    ``%r = comm.expert_dispatch %x, %dest, %counts {axis = "ep", mesh = @mesh, slot_rows = 64, top_k = [2]}
    : (tensor<16x32xf32>, tensor<32xi64>, tensor<2x4xi64>) -> tensor<64x32xf32>``
    """

    name = "comm.expert_dispatch"
    required_attrs = {**_ExpertMoveOp.required_attrs, "slot_rows": IntegerAttr}
    optional_attrs = {"count_load": BoolAttr}   # a forward dispatch: its rows per expert feed the load table

    def torch_expr(self, ins: Sequence[str]) -> str:
        load = ", count_load=True" if self.attr_value("count_load") else ""
        return self._call("expert_dispatch", ins, f", {int(self.attr_value('slot_rows'))}{load}")  # type: ignore[arg-type]

    def verify_(self) -> None:
        ins, outs = self._check()
        rows = int(self.attr_value("slot_rows"))  # type: ignore[arg-type]
        dest = self.operand(self.payloads).tensor_type
        for i, (a, b, k) in enumerate(zip(ins, outs, self.top_ks)):
            if a.shape[0] * k != dest.shape[0] or b.shape[0] != rows:
                raise self.emit_error(f"payload #{i} {a} (top_k {k}) must give one row per {k} of the "
                                      f"{dest.shape[0]} assignments, result #{i} {b} the slot's {rows} rows")


class ExpertCombineOp(_ExpertMoveOp):
    """This rank's slot rows back to the ranks that routed them, in their assignment order.

    ``%y = comm.expert_combine %buf, %dest, %counts {axis = "ep", mesh = @mesh, top_k = [1]}
    : (tensor<64x32xf32>, tensor<32xi64>, tensor<2x4xi64>) -> tensor<32x32xf32>``
    """

    name = "comm.expert_combine"

    def torch_expr(self, ins: Sequence[str]) -> str:
        return self._call("expert_combine", ins, "")

    def verify_(self) -> None:
        _, outs = self._check()
        dest = self.operand(self.payloads).tensor_type
        for i, (b, k) in enumerate(zip(outs, self.top_ks)):
            if b.shape[0] * k != dest.shape[0]:
                raise self.emit_error(f"result #{i} {b} must hold one row per {k} of the {dest.shape[0]} assignments")


OPS = [ExpertDispatchOp, ExpertCombineOp]
