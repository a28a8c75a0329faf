"""Bucketed collectives: several tensors, one collective (SimpleFSDP's bucketing).

Each operand/result pair obeys the single-tensor op's shape rule along its own dim;
the runtime packs each rank's pieces back to back into one flat buffer, padded to the
longest rank's. Ragged members (``RS``) carry explicit per-rank sizes, one array per member
(``sizes``; a torch.chunk member lists its chunk sizes), so a bucket of whole parameters
spread evenly over the ranks moves about one bucket's bytes, not the largest member's times n:

    %w, %b = comm.all_gather_bucket %x, %y {axis = "dp", dims = [0, 0], mesh = @mesh,
                                            sizes = [[16, 0], [0, 16]]}
        : (tensor<16x8xf32>, tensor<0xf32>) -> (tensor<16x8xf32>, tensor<16xf32>)

    %a, %b = comm.all_gather_bucket %x, %y {axis = "dp", dims = [0, 0], mesh = @mesh}
        : (tensor<4x16xf32>, tensor<8xf32>) -> (tensor<8x16xf32>, tensor<16xf32>)
    %g, %h = comm.reduce_scatter_bucket %u, %v {axis = "dp", dims = [0, 1], mesh = @mesh, op = "sum"}
        : (tensor<8x16xf32>, tensor<4x6xf32>) -> (tensor<4x16xf32>, tensor<4x3xf32>)
    %p, %q = comm.all_reduce_bucket %u, %v {axes = ["dp"], mesh = @mesh, op = "sum"}
        : (tensor<8x16xf32>, tensor<4x6xf32>) -> (tensor<8x16xf32>, tensor<4x6xf32>)
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.comm.collectives import CollectiveOp
from spmdc.dialects.pyexpr import literal, shape_literal
from spmdc.ir.attributes import ArrayAttr, IntegerAttr, StringAttr, SymbolRefAttr
from spmdc.ir.types import TensorType


class BucketOp(CollectiveOp):
    """Shared checks: as many results as operands, one dim per pair, local shapes per pair."""

    num_operands = None
    num_results = None
    required_attrs = {"mesh": SymbolRefAttr, "axis": StringAttr, "dims": ArrayAttr}

    @property
    def dims(self) -> list[int]:
        return [d.value for d in self.attributes["dims"]]  # type: ignore[attr-defined]

    def member_sizes(self) -> list[list[int]] | None:
        """Per member its explicit per-rank sizes (``sizes = [[16, 0], [0, 16]]``); None: every
        member in torch.chunk pieces."""
        attr = self.attributes.get("sizes")
        if attr is None:
            return None
        ok = isinstance(attr, ArrayAttr) and len(attr) == len(self.operands) and all(
            isinstance(m, ArrayAttr) and all(isinstance(a, IntegerAttr) and a.value >= 0 for a in m) for m in attr)
        if not ok:
            raise self.emit_error(f"'sizes' must hold one array of non-negative integers per operand "
                                  f"({len(self.operands)})")
        return [[a.value for a in m] for m in attr]  # type: ignore[union-attr, attr-defined]

    def _sizes_arg(self) -> str:
        sizes = self.member_sizes()
        return f", sizes={literal(sizes)}" if sizes is not None else ""

    def _check_pairs(self, gathered_is_result: bool) -> None:
        sizes = self.member_sizes() or [None] * len(self.operands)
        for (src, dst, d), z in zip(self._pairs(), sizes):
            full, part = (dst, src) if gathered_is_result else (src, dst)
            self._expect_split(full, part, d, "operand" if gathered_is_result else "result", z)

    def _pairs(self) -> list[tuple[TensorType, TensorType, int]]:
        if len(self.operands) != len(self.results) or not self.operands:
            raise self.emit_error(f"needs as many results as operands (>= 1), got {len(self.operands)} operands "
                                  f"and {len(self.results)} results")
        dims = self.attributes["dims"]
        if not all(isinstance(d, IntegerAttr) for d in dims) or len(dims) != len(self.operands):  # type: ignore[arg-type]
            raise self.emit_error(f"'dims' must list one integer per operand ({len(self.operands)})")
        mesh = self.mesh()
        if self.axes[0] not in mesh.axis_names:
            raise self.emit_error(f"mesh '@{mesh.sym_name}' has no axis '{self.axes[0]}'")
        out = []
        for i, (v, r, d) in enumerate(zip(self.operands, self.results, self.dims)):
            src, dst = v.type, r.type
            if not isinstance(src, TensorType) or not isinstance(dst, TensorType) or src.rank != dst.rank \
                    or src.element_type != dst.element_type:
                raise self.emit_error(f"operand #{i} {src} and result #{i} {dst} must be tensors of one rank and type")
            if not 0 <= d < src.rank:
                raise self.emit_error(f"dim {d} of pair #{i} is out of range for rank-{src.rank} tensor")
            out.append((src, dst, d))
        return out


class AllGatherBucketOp(BucketOp):
    """``comm.all_gather`` of several tensors in one collective.

    ``%a, %b = comm.all_gather_bucket %x, %y {axis = "dp", dims = [0, 0], mesh = @mesh}
    : (tensor<4x16xf32>, tensor<8xf32>) -> (tensor<8x16xf32>, tensor<16xf32>)``
    """

    name = "comm.all_gather_bucket"

    def torch_expr(self, ins: Sequence[str]) -> str:
        shapes = "[" + ", ".join(shape_literal(r.tensor_type.shape) for r in self.results) + "]"
        return (f"comm.all_gather_bucket([{', '.join(ins)}], {literal(self.axis)}, {literal(self.dims)}, {shapes}"
                f"{self._sizes_arg()})")

    def verify_(self) -> None:
        self._check_pairs(gathered_is_result=True)


class ReduceScatterBucketOp(BucketOp):
    """``comm.reduce_scatter`` of several tensors in one collective.

    ``%g, %h = comm.reduce_scatter_bucket %u, %v {axis = "dp", dims = [0, 1], mesh = @mesh, op = "sum"}
    : (tensor<8x16xf32>, tensor<4x6xf32>) -> (tensor<4x16xf32>, tensor<4x3xf32>)``
    """

    name = "comm.reduce_scatter_bucket"
    required_attrs = {**BucketOp.required_attrs, "op": StringAttr}

    def torch_expr(self, ins: Sequence[str]) -> str:
        return (f"comm.reduce_scatter_bucket([{', '.join(ins)}], {literal(self.axis)}, {literal(self.dims)}, "
                f"{literal(str(self.attr_value('op')))}{self._sizes_arg()})")

    def verify_(self) -> None:
        self._check_reduce_op()
        self._check_pairs(gathered_is_result=False)


class AllReduceBucketOp(CollectiveOp):
    """``comm.all_reduce`` of several tensors in one collective (DDP's gradient buckets); every
    result has its operand's type.

    ``%p, %q = comm.all_reduce_bucket %u, %v {axes = ["dp"], mesh = @mesh, op = "sum"}
    : (tensor<8x16xf32>, tensor<4x6xf32>) -> (tensor<8x16xf32>, tensor<4x6xf32>)``
    """

    name = "comm.all_reduce_bucket"
    num_operands = None
    num_results = None
    required_attrs = {"mesh": SymbolRefAttr, "axes": ArrayAttr, "op": StringAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        return list(operand_types) if operand_types else None

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(a.value for a in self.attributes["axes"])  # type: ignore[attr-defined]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return (f"comm.all_reduce_bucket([{', '.join(ins)}], {literal(list(self.axes))}, "
                f"{literal(str(self.attr_value('op')))})")

    def verify_(self) -> None:
        if len(self.operands) != len(self.results) or not self.operands:
            raise self.emit_error(f"needs as many results as operands (>= 1), got {len(self.operands)} operands "
                                  f"and {len(self.results)} results")
        axes = self.attributes["axes"]
        if not all(isinstance(a, StringAttr) for a in axes) or not len(axes):  # type: ignore[arg-type]
            raise self.emit_error("'axes' must be a non-empty array of axis names")
        mesh = self.mesh()
        for a in self.axes:
            if a not in mesh.axis_names:
                raise self.emit_error(f"mesh '@{mesh.sym_name}' has no axis '{a}'")
        self._check_reduce_op()
        for i, (v, r) in enumerate(zip(self.operands, self.results)):
            if v.type != r.type:
                raise self.emit_error(f"result #{i} {r.type} must have operand #{i}'s type {v.type}")


OPS = [AllGatherBucketOp, ReduceScatterBucketOp, AllReduceBucketOp]
