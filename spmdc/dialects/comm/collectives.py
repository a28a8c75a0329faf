"""``comm`` dialect: collectives on per-rank (local) values, after lowering.

Each op names a mesh and the mesh axis (or axes) whose process group it runs on.
Shapes are local: a sharded dim holds this rank's ``torch.chunk`` piece, so the
verifier accepts any chunk size of the global dim (uneven shards)::

    %1 = comm.all_gather %0 {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>
    %2 = comm.all_slice %1 {axis = "tp", dim = 1, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<8x4xf32>
    %3 = comm.all_reduce %2 {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x4xf32>
    %4 = comm.reduce_scatter %3 {axis = "tp", dim = 0, mesh = @mesh, op = "sum"} : (tensor<8x4xf32>) -> tensor<2x4xf32>
    %5 = comm.all_to_all %4 {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1}
        : (tensor<2x4xf32>) -> tensor<8x1xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdc.dialects.pyexpr import TorchImpl, literal, shape_literal
from spmdc.dialects.shard import REDUCE_OPS, MeshOp, distinct_chunk_sizes, lookup_mesh
from spmdc.ir.attributes import ArrayAttr, IntegerAttr, StringAttr, SymbolRefAttr
from spmdc.ir.core import Operation
from spmdc.ir.types import TensorType


class CollectiveOp(TorchImpl, Operation):
    """Shared base: ``mesh`` symbol, one operand, one result.

    The torch implementation is a call of the rank's collectives object ``comm``
    (:class:`spmdc.runtime.collectives.Collectives`), every argument a literal:
    ``comm.all_gather(x, 'tp', 0, (8, 16))``.
    """

    num_operands = 1
    num_results = 1
    required_attrs = {"mesh": SymbolRefAttr, "axis": StringAttr}

    @property
    def mesh_name(self) -> str:
        return self.attributes["mesh"].name  # type: ignore[attr-defined]

    @property
    def axes(self) -> tuple[str, ...]:
        return (self.attributes["axis"].value,)  # type: ignore[attr-defined]

    def reference(self, *args: Any, comm: Any = None) -> Any:
        if comm is None:
            raise self.emit_error("is a per-rank collective; the single-device interpreter cannot run it")
        return super().reference(*args, comm=comm)

    @property
    def axis(self) -> str:
        return str(self.attr_value("axis"))

    def mesh(self) -> MeshOp:
        m = lookup_mesh(self, self.mesh_name)
        if m is None:
            raise self.emit_error(f"refers to unknown mesh '@{self.mesh_name}'")
        return m

    def group_size(self) -> int:
        m = self.mesh()
        n = 1
        for a in self.axes:
            n *= m.axis_size(a)
        return n

    def _dim(self, key: str) -> int:
        return self.attributes[key].value  # type: ignore[attr-defined]

    def is_global(self) -> bool:
        """Before ``partition``, collectives act on global values and record the layout they
        produce in ``shard.sharding``; operand and result types are then equal."""
        return "shard.sharding" in self.attributes

    def _check_common(self) -> tuple[TensorType, TensorType, int]:
        mesh = self.mesh()
        for a in self.axes:
            if a not in mesh.axis_names:
                raise self.emit_error(f"mesh '@{mesh.sym_name}' has no axis '{a}' "
                                      f"(axes: {', '.join(mesh.axis_names)})")
        src, dst = self.operand(0).type, self.result.type
        if not isinstance(src, TensorType) or not isinstance(dst, TensorType):
            raise self.emit_error("operates on tensors only")
        if src.element_type != dst.element_type:
            raise self.emit_error(f"element types differ: {src.element_type} vs {dst.element_type}")
        if src.rank != dst.rank:
            raise self.emit_error(f"operand rank {src.rank} differs from result rank {dst.rank}")
        for key in ("dim", "split_dim", "concat_dim"):
            if key in self.attributes:
                d = self._dim(key)
                if not 0 <= d < src.rank:
                    raise self.emit_error(f"{key} {d} is out of range for rank-{src.rank} tensor")
        return src, dst, self.group_size()

    def _global_ok(self, src: TensorType, dst: TensorType) -> bool:
        if not self.is_global():
            return False
        if src != dst:
            raise self.emit_error(f"on global values (with 'shard.sharding') the result type {dst} must "
                                  f"equal the operand type {src}")
        if "op" in self.attributes:
            self._check_reduce_op()
        return True

    def _check_reduce_op(self) -> None:
        op = self.attributes.get("op")
        if not isinstance(op, StringAttr) or op.value not in REDUCE_OPS:
            raise self.emit_error(f"'op' must be one of {', '.join(REDUCE_OPS)}")

    def sizes(self) -> list[int] | None:
        """Explicit per-rank sizes along ``dim`` (a ragged shard, ``sizes = [3, 0, 5, 0]``);
        None: torch.chunk's pieces."""
        attr = self.attributes.get("sizes")
        if attr is None:
            return None
        if not isinstance(attr, ArrayAttr) or not all(isinstance(a, IntegerAttr) and a.value >= 0 for a in attr):
            raise self.emit_error("'sizes' must be an array of non-negative integers")
        return [a.value for a in attr]  # type: ignore[attr-defined]

    def _sizes_arg(self) -> str:
        sizes = self.sizes()
        return f", sizes={literal(sizes)}" if sizes is not None else ""

    def _expect_split(self, full: TensorType, part: TensorType, dim: int, what: str,
                      explicit: list[int] | None = None) -> None:
        """``part`` must equal ``full`` except dim ``dim``, which is one torch.chunk piece (or
        one of the explicit ``sizes`` — the op's, or ``explicit`` —, which must cover the dim,
        one per rank)."""
        n = self.group_size()
        explicit = explicit if explicit is not None else self.sizes()
        if explicit is not None and (len(explicit) != n or sum(explicit) != full.shape[dim]):
            raise self.emit_error(f"'sizes' {explicit} must give {n} sizes adding up to {full.shape[dim]} "
                                  f"(dim {dim} of {full})")
        sizes = sorted(set(explicit)) if explicit is not None else distinct_chunk_sizes(full.shape[dim], n)
        others_equal = all(a == b for i, (a, b) in enumerate(zip(full.shape, part.shape)) if i != dim)
        if not others_equal or part.shape[dim] not in sizes:
            expect = " or ".join(str(full.with_shape(full.shape[:dim] + (s,) + full.shape[dim + 1:])) for s in sizes)
            raise self.emit_error(f"{what} type {part} is not a chunk of {full} along dim {dim} over "
                                  f"{n} ranks (expected {expect})")


class AllGatherOp(CollectiveOp):
    """Concatenate every rank's chunk along ``dim``: result is the gathered shape.

    ``%r = comm.all_gather %x {axis = "tp", dim = 0, mesh = @mesh} : (tensor<2x16xf32>) -> tensor<8x16xf32>``
    """

    name = "comm.all_gather"
    required_attrs = {**CollectiveOp.required_attrs, "dim": IntegerAttr}

    def torch_expr(self, ins: Sequence[str]) -> str:
        return (f"comm.all_gather({ins[0]}, {literal(self.axis)}, {self._dim('dim')}, "
                f"{shape_literal(self.result.tensor_type.shape)}{self._sizes_arg()})")

    def verify_(self) -> None:
        src, dst, _ = self._check_common()
        if self._global_ok(src, dst):
            return
        self._expect_split(dst, src, self._dim("dim"), "operand")


class AllSliceOp(CollectiveOp):
    """Keep this rank's ``torch.chunk`` piece along ``dim`` (no traffic).

    ``%r = comm.all_slice %x {axis = "tp", dim = 1, mesh = @mesh} : (tensor<8x16xf32>) -> tensor<8x4xf32>``
    """

    name = "comm.all_slice"
    required_attrs = {**CollectiveOp.required_attrs, "dim": IntegerAttr}
    traits = frozenset({"Pure"})

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"comm.all_slice({ins[0]}, {literal(self.axis)}, {self._dim('dim')}{self._sizes_arg()})"

    def verify_(self) -> None:
        src, dst, _ = self._check_common()
        if self._global_ok(src, dst):
            return
        self._expect_split(src, dst, self._dim("dim"), "result")


class AllReduceOp(CollectiveOp):
    """Reduce over the process group of one or more mesh axes; shape unchanged.

    ``%r = comm.all_reduce %x {axes = ["tp"], mesh = @mesh, op = "sum"} : tensor<8x4xf32>``
    """

    name = "comm.all_reduce"
    required_attrs = {"mesh": SymbolRefAttr, "axes": ArrayAttr, "op": StringAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        return [operand_types[0]] if operand_types else None

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(a.value for a in self.attributes["axes"])  # type: ignore[attr-defined]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"comm.all_reduce({ins[0]}, {literal(list(self.axes))}, {literal(str(self.attr_value('op')))})"

    def verify_(self) -> None:
        axes = self.attributes["axes"]
        if not all(isinstance(a, StringAttr) for a in axes) or not len(axes):  # type: ignore[arg-type]
            raise self.emit_error("'axes' must be a non-empty array of axis names")
        if len(set(self.axes)) != len(self.axes):
            raise self.emit_error("'axes' names an axis twice")
        src, dst, _ = self._check_common()
        if self._global_ok(src, dst):
            return
        self._check_reduce_op()
        if src != dst:
            raise self.emit_error(f"result type {dst} must equal operand type {src}")


class ReduceScatterOp(CollectiveOp):
    """Reduce over the group, then keep this rank's chunk along ``dim``.

    ``%r = comm.reduce_scatter %x {axis = "tp", dim = 0, mesh = @mesh, op = "sum"}
    : (tensor<8x4xf32>) -> tensor<2x4xf32>``
    """

    name = "comm.reduce_scatter"
    required_attrs = {**CollectiveOp.required_attrs, "dim": IntegerAttr, "op": StringAttr}

    def torch_expr(self, ins: Sequence[str]) -> str:
        return (f"comm.reduce_scatter({ins[0]}, {literal(self.axis)}, {self._dim('dim')}, "
                f"{literal(str(self.attr_value('op')))}{self._sizes_arg()})")

    def verify_(self) -> None:
        src, dst, _ = self._check_common()
        if self._global_ok(src, dst):
            return
        self._check_reduce_op()
        self._expect_split(src, dst, self._dim("dim"), "result")


class AllToAllOp(CollectiveOp):
    """Split along ``split_dim``, exchange, concatenate along ``concat_dim``.

    ``%r = comm.all_to_all %x {axis = "tp", concat_dim = 0, mesh = @mesh, split_dim = 1}
    : (tensor<2x4xf32>) -> tensor<8x1xf32>``
    """

    name = "comm.all_to_all"
    required_attrs = {**CollectiveOp.required_attrs, "split_dim": IntegerAttr, "concat_dim": IntegerAttr}

    def torch_expr(self, ins: Sequence[str]) -> str:
        return (f"comm.all_to_all({ins[0]}, {literal(self.axis)}, {self._dim('split_dim')}, "
                f"{self._dim('concat_dim')}, {shape_literal(self.result.tensor_type.shape)})")

    def verify_(self) -> None:
        src, dst, n = self._check_common()
        if self._global_ok(src, dst):
            return
        sd, cd = self._dim("split_dim"), self._dim("concat_dim")
        if sd == cd:
            if src != dst:
                raise self.emit_error(f"with split_dim == concat_dim the result type must equal {src}")
            return
        ok = (dst.shape[sd] in distinct_chunk_sizes(src.shape[sd], n)
              and src.shape[cd] in distinct_chunk_sizes(dst.shape[cd], n)
              and all(a == b for i, (a, b) in enumerate(zip(src.shape, dst.shape)) if i not in (sd, cd)))
        if not ok:
            raise self.emit_error(f"result type {dst} is not operand {src} split along dim {sd} and "
                                  f"gathered along dim {cd} over {n} ranks")


class KeepAtOriginOp(TorchImpl, Operation):
    """Its operand on the ranks at coordinate 0 of every axis in ``axes``, zeros elsewhere (no
    traffic): a replicated value made a partial sum over those axes, read from the rank's
    coordinates at run time (the per-rank program stays the same on every rank).

    ``%r = comm.keep_at_origin %b {axes = ["tp"], mesh = @mesh} : tensor<8x4xf32>``
    """

    name = "comm.keep_at_origin"
    num_operands = 1
    num_results = 1
    required_attrs = {"mesh": SymbolRefAttr, "axes": ArrayAttr}
    traits = frozenset({"Pure"})

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        return [operand_types[0]] if operand_types else None

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(a.value for a in self.attributes["axes"])  # type: ignore[attr-defined]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"comm.keep_at_origin({ins[0]}, {literal(list(self.axes))})"

    def reference(self, *args: Any, comm: Any = None) -> Any:
        if comm is None:
            raise self.emit_error("reads the rank's mesh coordinates; the single-device interpreter cannot run it")
        return super().reference(*args, comm=comm)

    def verify_(self) -> None:
        axes = self.attributes["axes"]
        if not len(axes) or not all(isinstance(a, StringAttr) for a in axes):  # type: ignore[arg-type]
            raise self.emit_error("'axes' must be a non-empty array of axis names")
        mesh = lookup_mesh(self, self.attributes["mesh"].name)  # type: ignore[attr-defined]
        if mesh is None:
            raise self.emit_error(f"refers to unknown mesh '@{self.attributes['mesh'].name}'")  # type: ignore[attr-defined]
        for a in self.axes:
            if a not in mesh.axis_names:
                raise self.emit_error(f"mesh '@{mesh.sym_name}' has no axis '{a}' (axes: {', '.join(mesh.axis_names)})")


OPS = [AllGatherOp, AllSliceOp, AllReduceOp, ReduceScatterOp, AllToAllOp, KeepAtOriginOp]
