"""Asynchronous collectives: a ``_start`` op issues the collective and returns a handle,
``comm.wait`` blocks on it and yields the tensors (``async_op=True`` and ``work.wait()`` in
torch.distributed). ``schedule-collectives`` makes them, so that communication overlaps the
compute placed between the two::

    %h = comm.all_gather_bucket_start %w1, %w2 {axis = "dp", dims = [0, 0], mesh = @m}
        : (tensor<4x16xf32>, tensor<8xf32>) -> !comm.handle<tensor<8x16xf32>, tensor<16xf32>>
    %y = tensor.matmul %x, %v : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>   // overlaps
    %a, %b = comm.wait %h : (!comm.handle<tensor<8x16xf32>, tensor<16xf32>>) -> (tensor<8x16xf32>, tensor<16xf32>)

Every ``_start`` op takes its synchronous op's operands and attributes; the handle lists the
synchronous op's result types, and the verifier checks them by the synchronous op's rules.
The runtime holds the operands and the receive buffers from start to wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdc.dialects.comm.bucket import AllGatherBucketOp, AllReduceBucketOp, ReduceScatterBucketOp
from spmdc.dialects.comm.collectives import AllGatherOp, AllReduceOp, CollectiveOp, ReduceScatterOp
from spmdc.dialects.pyexpr import TorchImpl
from spmdc.ir.core import Operation
from spmdc.ir.diagnostics import DiagnosticError
from spmdc.ir.types import HandleType


class StartOp(CollectiveOp):
    """Base of the ``comm.*_start`` ops; ``SYNC`` is the synchronous op it splits."""

    SYNC: type[CollectiveOp] = CollectiveOp
    num_operands = None
    num_results = 1

    @property
    def handle_type(self) -> HandleType:
        t = self.result.type
        if not isinstance(t, HandleType):
            raise self.emit_error(f"result must be a !comm.handle<...>, got {t}")
        return t

    @property
    def axes(self) -> tuple[str, ...]:
        return self.SYNC.axes.fget(self)  # type: ignore[attr-defined]

    def as_sync(self) -> CollectiveOp:
        """The synchronous op this one starts, unattached (its operands are not used by it):
        for checks and for the torch expression."""
        sync = self.SYNC.__new__(self.SYNC)
        Operation.__init__(sync, (), list(self.handle_type.results), dict(self.attributes), (), self.location)
        sync._operands = list(self.operands)   # read-only view: no uses are recorded
        sync.parent = self.parent               # the mesh is looked up through the parents
        return sync

    def verify_(self) -> None:
        if self.SYNC.num_operands is not None and len(self.operands) != self.SYNC.num_operands:
            raise self.emit_error(f"expects {self.SYNC.num_operands} operand(s), got {len(self.operands)}")
        n = len(self.handle_type.results)
        if self.SYNC.num_results is not None and n != self.SYNC.num_results:
            raise self.emit_error(f"handle must hold {self.SYNC.num_results} tensor(s), got {n}")
        try:
            self.as_sync().verify_()
        except DiagnosticError as e:  # the synchronous op's diagnostic, under this op's name
            raise self.emit_error(e.diagnostic.message.removeprefix(f"'{self.SYNC.name}' op ")) from None

    def torch_expr(self, ins: Sequence[str]) -> str:
        expr = self.as_sync().torch_expr(ins)
        call = self.SYNC.name.removeprefix("comm.")
        return expr.replace(f"comm.{call}(", f"comm.{call}_start(", 1)


def _start_op(sync: type[CollectiveOp]) -> type[StartOp]:
    cls = type(sync.__name__.removesuffix("Op") + "StartOp", (StartOp,), {
        "name": sync.name + "_start", "SYNC": sync, "required_attrs": dict(sync.required_attrs),
        "__doc__": f"Starts ``{sync.name}`` and returns its handle; ``comm.wait`` yields the result(s).\n\n"
                   f"``%h = {sync.name}_start <{sync.name}'s operands and attributes> : (<operand types>) "
                   f"-> !comm.handle<<{sync.name}'s result types>>``",
    })
    return cls


AllGatherStartOp = _start_op(AllGatherOp)
ReduceScatterStartOp = _start_op(ReduceScatterOp)
AllReduceStartOp = _start_op(AllReduceOp)
AllGatherBucketStartOp = _start_op(AllGatherBucketOp)
ReduceScatterBucketStartOp = _start_op(ReduceScatterBucketOp)
AllReduceBucketStartOp = _start_op(AllReduceBucketOp)
START_OPS: dict[str, type[StartOp]] = {c.SYNC.name: c for c in (
    AllGatherStartOp, ReduceScatterStartOp, AllReduceStartOp, AllGatherBucketStartOp, ReduceScatterBucketStartOp,
    AllReduceBucketStartOp)}
"""synchronous op name → its ``_start`` op class"""


class WaitOp(TorchImpl, Operation):
    """Wait for a started collective; the results are the handle's tensors, in order.

    ``%a = comm.wait %h : (!comm.handle<tensor<8x16xf32>>) -> tensor<8x16xf32>``
    """

    name = "comm.wait"
    num_operands = 1
    num_results = None

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        t = operand_types[0] if operand_types else None
        return list(t.results) if isinstance(t, HandleType) else None

    def verify_(self) -> None:
        t = self.operand(0).type
        if not isinstance(t, HandleType):
            raise self.emit_error(f"operand must be a !comm.handle<...>, got {t}")
        got = tuple(r.type for r in self.results)
        if got != t.results:
            raise self.emit_error(f"results ({', '.join(map(str, got))}) must be the handle's tensors "
                                  f"({', '.join(map(str, t.results))})")
        if not isinstance(self.operand(0).defining_op(), StartOp):
            raise self.emit_error("operand must be the handle of a comm.*_start op")
        if len(self.operand(0).uses) != 1:
            raise self.emit_error("a handle is waited exactly once")

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"comm.wait({ins[0]})"

    def reference(self, *args: Any, comm: Any = None) -> Any:
        if comm is None:
            raise self.emit_error("is a per-rank collective; the single-device interpreter cannot run it")
        return super().reference(*args, comm=comm)


def collective_kind(op: Operation) -> str | None:
    """The collective an op issues, by its synchronous name (``comm.all_gather_start`` →
    ``comm.all_gather``); None for ``comm.wait`` and for ops that are not collectives."""
    if isinstance(op, StartOp):
        return op.SYNC.name
    if isinstance(op, CollectiveOp):
        return op.name
    return None


OPS = [*START_OPS.values(), WaitOp]
