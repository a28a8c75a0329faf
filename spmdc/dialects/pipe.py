"""``pipe`` dialect: pipeline stages over device groups, and each rank's schedule.

A pipeline module declares, at top level, the stage meshes (``shard.mesh`` with ``devices``) and
one ``pipe.boundary`` per value crossing stages: its producer and consumer stage, global shape and
the layouts on both sides (the producer's result layout, the consumer's argument layout) and, for
a floating value, the layouts its gradient travels back with::

    shard.mesh @stage0 = <["tp" = 2]> devices = [0, 1]
    shard.mesh @stage1 = <["tp" = 2]> devices = [2, 3]
    pipe.boundary {id = 0, from = #shard<@stage0, [P(sum)]>, to = #shard<@stage1, [R]>, shape = [2, 8, 32],
                   grad_from = #shard<@stage1, [P(sum)]>, grad_to = #shard<@stage0, [R]>}

A value several later stages read (a skip connection, an attention mask) has one ``pipe.boundary``
per consumer, all with its ``id`` and the same ``from``, ``shape`` and ``grad_to``; its gradient
is the sum of the consumers'.

``pipeline-schedule`` (:mod:`spmdc.passes.pipeline_schedule`) adds each rank's program: a
``func.func @rank<r>`` whose body is the rank's schedule in order — compute on micro-batch ``mb``
(``pipe.forward``, ``pipe.backward``; the last stage's ``pipe.forward_backward``) and the
point-to-point messages of each boundary value, with the ranks at the other end (from the
finest-slice table between the two layouts: batched send/recv)::

    func.func @rank0() attributes {spmdc.rank = 0, spmdc.stage = 0, spmdc.schedule = "1f1b"} {
      pipe.forward {mb = 0, stage = 0}
      pipe.send {mb = 0, to = [2], value = 0}
      pipe.forward {mb = 1, stage = 0}
      pipe.send {mb = 1, to = [2], value = 0}
      pipe.recv {from = [2], grad, mb = 0, value = 0}
      pipe.backward {mb = 0, stage = 0}
      ...
      pipe.step
      func.return
    }

The runtime (:mod:`spmdc.api.pipeline_executor`) runs that function op by op: the IR is the schedule.
"""

from __future__ import annotations

from spmdc.ir.attributes import ArrayAttr, Attribute, IntegerAttr, UnitAttr
from spmdc.ir.core import Operation
from spmdc.ir.registry import Dialect


class BoundaryOp(Operation):
    """A value one stage computes and a later one reads: its global shape, the producer's result
    layout ``from``, the consumer's argument layout ``to`` and, for a differentiable value, the
    layouts its gradient leaves the consumer with and reaches the producer in (a value read by
    several stages: one op per consumer, with the same ``id``)::

        pipe.boundary {from = #shard<@stage0, [P(sum)]>, grad_from = #shard<@stage1, [R]>,
                       grad_to = #shard<@stage0, [R]>, id = 0, shape = [2, 8, 32], to = #shard<@stage1, [R]>}
    """

    name = "pipe.boundary"
    num_operands = 0
    num_results = 0
    required_attrs = {"id": IntegerAttr, "from": Attribute, "to": Attribute, "shape": ArrayAttr}
    optional_attrs = {"grad_from": Attribute, "grad_to": Attribute}

    @property
    def id(self) -> int:
        return int(self.attributes["id"].value)  # type: ignore[attr-defined]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.value for d in self.attributes["shape"])  # type: ignore[attr-defined]

    @property
    def differentiable(self) -> bool:
        return "grad_from" in self.attributes

    def verify_(self) -> None:
        from spmdc.dialects.shard import ShardingAttr

        for key in ("from", "to", "grad_from", "grad_to"):
            a = self.attributes.get(key)
            if a is not None and not isinstance(a, ShardingAttr):
                raise self.emit_error(f"'{key}' must be a #shard<@mesh, [...]> layout, got {a}")
        if ("grad_from" in self.attributes) != ("grad_to" in self.attributes):
            raise self.emit_error("'grad_from' and 'grad_to' come together (a value with a gradient)")
        if self.attributes["from"].mesh == self.attributes["to"].mesh:  # type: ignore[attr-defined]
            raise self.emit_error(f"a boundary joins two stages: 'from' and 'to' are both on "
                                  f"@{self.attributes['from'].mesh}")  # type: ignore[attr-defined]


class _Compute(Operation):
    num_operands = 0
    num_results = 0
    required_attrs = {"stage": IntegerAttr, "mb": IntegerAttr}

    @property
    def stage(self) -> int:
        return int(self.attributes["stage"].value)  # type: ignore[attr-defined]

    @property
    def mb(self) -> int:
        return int(self.attributes["mb"].value)  # type: ignore[attr-defined]

    def verify_(self) -> None:
        if self.mb < 0 or self.stage < 0:
            raise self.emit_error("'stage' and 'mb' must be >= 0")


class ForwardOp(_Compute):
    """``pipe.forward {mb = 1, stage = 0}``: the stage's forward program on micro-batch ``mb``."""

    name = "pipe.forward"


class BackwardOp(_Compute):
    """``pipe.backward {mb = 1, stage = 0}``: the stage's backward (forward recomputed from the
    stashed inputs, then the gradients of the parameters and of the inputs) on micro-batch ``mb``."""

    name = "pipe.backward"


class ForwardBackwardOp(_Compute):
    """``pipe.forward_backward {mb = 1, stage = 1}``: the last stage's loss, parameter gradients
    and input gradients for micro-batch ``mb`` in one program."""

    name = "pipe.forward_backward"


class _Message(Operation):
    num_operands = 0
    num_results = 0
    required_attrs = {"value": IntegerAttr, "mb": IntegerAttr}
    optional_attrs = {"grad": UnitAttr, "stage": IntegerAttr}   # stage: the rank's stage it serves (interleaved)
    peer_key = ""

    @property
    def stage(self) -> int | None:
        a = self.attributes.get("stage")
        return None if a is None else int(a.value)  # type: ignore[attr-defined]

    @property
    def value(self) -> int:
        return int(self.attributes["value"].value)  # type: ignore[attr-defined]

    @property
    def mb(self) -> int:
        return int(self.attributes["mb"].value)  # type: ignore[attr-defined]

    @property
    def grad(self) -> bool:
        return "grad" in self.attributes

    @property
    def peers(self) -> tuple[int, ...]:
        return tuple(r.value for r in self.attributes[self.peer_key])  # type: ignore[attr-defined]

    def verify_(self) -> None:
        peers = self.attributes[self.peer_key]
        if not isinstance(peers, ArrayAttr) or not all(isinstance(r, IntegerAttr) for r in peers):
            raise self.emit_error(f"'{self.peer_key}' must be a list of job ranks")


class SendOp(_Message):
    """``pipe.send {mb = 0, to = [2, 3], value = 0}``: this rank's pieces of boundary value 0 (or
    with ``grad``, of its gradient) for micro-batch ``mb``, one message per listed rank."""

    name = "pipe.send"
    required_attrs = {**_Message.required_attrs, "to": ArrayAttr}
    peer_key = "to"


class RecvOp(_Message):
    """``pipe.recv {from = [0], mb = 0, value = 0}``: this rank's piece of a boundary value (or
    its gradient), one message from each listed rank (pieces summed when the source is partial)."""

    name = "pipe.recv"
    required_attrs = {**_Message.required_attrs, "from": ArrayAttr}
    peer_key = "from"


class StepOp(Operation):
    """``pipe.step``: the gradients accumulated over the micro-batches (shared parameters summed
    across the stages that hold them) go to the optimizer, once."""

    name = "pipe.step"
    num_operands = 0
    num_results = 0


OPS = [BoundaryOp, ForwardOp, BackwardOp, ForwardBackwardOp, SendOp, RecvOp, StepOp]
DIALECT = Dialect("pipe", OPS)

__all__ = ["DIALECT", "BackwardOp", "BoundaryOp", "ForwardBackwardOp", "ForwardOp", "RecvOp", "SendOp", "StepOp"]
