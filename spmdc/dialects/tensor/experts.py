"""Expert dispatch for mixtures of experts: tokens into a buffer of expert slots and back.

The ``expert-dispatch`` pass writes a router's ``sort`` / ``index`` / inverse-permutation form
(HuggingFace's ``grouped_mm`` experts, torchtitan's token permutation) with these ops. Their
global meaning is a static-shaped buffer of ``slots`` slots of ``slot_rows`` (``C``) rows: slot
``q`` holds the rows of experts ``[q*E/slots, (q+1)*E/slots)``, each expert's rows in the order a
stable sort by expert gives, zeros after them. With ``C`` = all assignments nothing is ever dropped
(the default); a smaller ``C`` (the capacity-factor option) drops what does not fit.

    %c = tensor.expert_counts %ids {experts = 4, sources = 2} : (tensor<64xi64>) -> tensor<2x4xi64>
    %dest, %starts, %ends = tensor.expert_route %ids, %c {per_source = 32, slot_rows = 64, slots = 2}
        : (tensor<64xi64>, tensor<2x4xi64>) -> (tensor<64xi64>, tensor<4xi32>, tensor<4xi32>)
    %rows = tensor.expert_dispatch %x, %dest, %c {per_source = 32, slot_rows = 64, top_k = 2}
        : (tensor<32x16xf32>, tensor<64xi64>, tensor<2x4xi64>) -> tensor<128x16xf32>
    %y = tensor.expert_combine %rows, %dest, %c {per_source = 32, top_k = 1}
        : (tensor<128x16xf32>, tensor<64xi64>, tensor<2x4xi64>) -> tensor<64x16xf32>

Sharding: one factor ``q`` — the sources, which are also the slots — runs through every op: the
ids' and ``dest``'s chunk of ``per_source`` assignments, the tokens' chunk, the buffer's slot. On
an expert-parallel axis of ``slots`` ranks each rank routes its own tokens and holds one slot:
``expert_counts`` and ``expert_route`` then run locally (``counts`` replicated: the size
exchange is the all-gather of the ``[sources, E]`` counts), and ``partition`` turns
``expert_dispatch`` / ``expert_combine`` into ``comm.expert_dispatch`` / ``comm.expert_combine``
(one ``all_to_all`` with run-time splits each). Replicated, each is the single-device computation.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TensorOp, tensor_types
from spmdc.dialects.tensor.helpers import int_attr
from spmdc.ir.attributes import BoolAttr, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


def _ids(t: TensorType, what: str = "ids") -> None:
    if t.rank != 1 or t.element_type != "i64":
        raise InferError(f"{what} must be a rank-1 i64 tensor, got {t}")


def _counts(t: TensorType) -> None:
    if t.rank != 2 or t.element_type != "i64":
        raise InferError(f"counts must be a rank-2 i64 tensor [sources, experts], got {t}")


def _positive(attrs, *keys: str) -> list[int]:
    out = []
    for k in keys:
        v = int_attr(attrs, k)
        if v < 1:
            raise InferError(f"attribute '{k}' must be positive, got {v}")
        out.append(v)
    return out


class ExpertCountsOp(TensorOp):
    """``counts[s, e]``: assignments of source chunk ``s`` (``ids`` cut into ``sources`` equal
    chunks) routed to expert ``e``; ids outside ``[0, experts)`` count nowhere.

    ``%c = tensor.expert_counts %ids {experts = 4, sources = 2} : (tensor<64xi64>) -> tensor<2x4xi64>``

    Sharding: ``([q*]) -> ([q, e])`` — a rank counts its own chunk; ``e`` needs replication.
    """

    name = "tensor.expert_counts"
    num_operands = 1
    num_results = 1
    required_attrs = {"experts": IntegerAttr, "sources": IntegerAttr}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (ids,) = tensor_types(operand_types, cls.name)
        _ids(ids)
        experts, sources = _positive(attrs, "experts", "sources")
        if ids.shape[0] % sources:
            raise InferError(f"{ids.shape[0]} assignments do not split into {sources} equal source chunks")
        return [TensorType((sources, experts), "i64")]

    def torch_expr(self, ins: Sequence[str]) -> str:
        sources, experts = self.result.tensor_type.shape   # local: this rank's chunks
        return f"spmdc_ops.expert_counts({ins[0]}, {experts}, {sources})"

    def sharding_rule(self) -> OpShardingRule:
        ids, (sources, experts) = self.operand(0).tensor_type, self.result.tensor_type.shape
        b = RuleBuilder()
        q, e = b.factor(sources), b.factor(experts)
        return b.build([[q]], [[q, e]], blocked=frozenset({e}), even_only=frozenset({q}),
                       scales=((False, 0, 0, ids.shape[0] // sources),))


class ExpertRouteOp(TensorOp):
    """Each assignment's row in the slot buffer, ``dest`` (-1: dropped, or an id outside the
    experts), and each expert's rows ``[starts[e], ends[e])`` (i32, as ``grouped_matmul`` takes
    them). ``ids`` hold the source chunks ``first_source, ...`` of ``per_source`` assignments;
    ``counts`` every source's (the whole ``[sources, E]``).

    ``%d, %s, %e = tensor.expert_route %ids, %c {per_source = 32, slot_rows = 64, slots = 2}
    : (tensor<64xi64>, tensor<2x4xi64>) -> (tensor<64xi64>, tensor<4xi32>, tensor<4xi32>)``

    Sharding: ``([q*], [1, 1]) -> ([q*], [e], [e])``: a rank routes its own chunk (``partition``
    sets ``first_source``); the counts, starts and ends are whole.
    """

    name = "tensor.expert_route"
    num_operands = 2
    num_results = 3
    required_attrs = {"slots": IntegerAttr, "slot_rows": IntegerAttr, "per_source": IntegerAttr}
    optional_attrs = {"first_source": IntegerAttr}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ids, counts = tensor_types(operand_types, cls.name)
        _ids(ids)
        _counts(counts)
        slots, _, per_source = _positive(attrs, "slots", "slot_rows", "per_source")
        if counts.shape[1] % slots:
            raise InferError(f"{counts.shape[1]} experts do not split into {slots} slots")
        if ids.shape[0] % per_source:
            raise InferError(f"{ids.shape[0]} assignments are not whole chunks of {per_source}")
        e = counts.shape[1]
        return [ids, TensorType((e,), "i32"), TensorType((e,), "i32")]

    def localize(self, first_source: int) -> None:
        """``partition``: this rank's ids are the chunk(s) from ``first_source`` on."""
        if first_source:
            self.attributes["first_source"] = IntegerAttr(first_source)

    def torch_expr(self, ins: Sequence[str]) -> str:
        a = self.attributes
        first = int_attr(a, "first_source") if "first_source" in a else 0
        return (f"spmdc_ops.expert_route({ins[0]}, {ins[1]}, {int_attr(a, 'slots')}, {int_attr(a, 'slot_rows')}, "
                f"{int_attr(a, 'per_source')}, {literal(first)})")

    def sharding_rule(self) -> OpShardingRule:
        ids, counts = self.operand(0).tensor_type, self.operand(1).tensor_type
        per = int_attr(self.attributes, "per_source")
        b = RuleBuilder()
        q, cs, ce, e = b.factor(ids.shape[0] // per), b.factor(counts.shape[0]), b.factor(counts.shape[1]), \
            b.factor(counts.shape[1])
        return b.build([[q], [cs, ce]], [[q], [e], [e]], blocked=frozenset({cs, ce, e}), even_only=frozenset({q}),
                       scales=((False, 0, 0, per), (True, 0, 0, per)))


class _MoveOp(TensorOp):
    """Base of dispatch and combine: ``(payload, dest, counts)`` and their shared factor rule."""

    num_operands = 3
    num_results = 1
    kernel = "none"

    @staticmethod
    def _check(x: TensorType, dest: TensorType, counts: TensorType, attrs) -> tuple[int, int]:
        _ids(dest, "dest")
        _counts(counts)
        top_k, per_source = _positive(attrs, "top_k", "per_source")
        if x.rank < 1:
            raise InferError(f"the payload must have a row dim, got {x}")
        if per_source % top_k:
            raise InferError(f"per_source {per_source} is not a multiple of top_k {top_k}")
        return top_k, per_source

    def _rule(self, payload_rows_per_q: int, result_rows_per_q: int, payload: TensorType) -> OpShardingRule:
        dest, counts = self.operand(1).tensor_type, self.operand(2).tensor_type
        per = int_attr(self.attributes, "per_source")
        b = RuleBuilder()
        q = b.factor(dest.shape[0] // per)
        rest = [b.factor(s) for s in payload.shape[1:]]
        cs, ce = b.factor(counts.shape[0]), b.factor(counts.shape[1])
        scales = ((False, 0, 0, payload_rows_per_q), (False, 1, 0, per), (True, 0, 0, result_rows_per_q))
        return b.build([[q, *rest], [q], [cs, ce]], [[q, *rest]], blocked=frozenset({cs, ce}),
                       even_only=frozenset({q}), scales=scales, partial_one=(0,))

    @property
    def top_k(self) -> int:
        return int_attr(self.attributes, "top_k")

    def sources(self) -> int:
        return self.operand(1).tensor_type.shape[0] // int_attr(self.attributes, "per_source")


class ExpertDispatchOp(_MoveOp):
    """``out[dest[a]] = x[a // top_k]``: token (or assignment) rows into the slot buffer of
    ``sources * slot_rows`` rows, zeros where no row lands.

    ``%r = tensor.expert_dispatch %x, %dest, %c {per_source = 32, slot_rows = 64, top_k = 2}
    : (tensor<32x16xf32>, tensor<64xi64>, tensor<2x4xi64>) -> tensor<128x16xf32>``

    Sharding: ``([q*, d], [q*], [1, 1]) -> ([q*, d])``: ``q`` sharded is the all_to_all
    (``partition`` makes it ``comm.expert_dispatch``); linear in ``x``.
    """

    name = "tensor.expert_dispatch"
    required_attrs = {"top_k": IntegerAttr, "per_source": IntegerAttr, "slot_rows": IntegerAttr}
    optional_attrs = {"count_load": BoolAttr}   # the forward's token dispatch: counted in the load table

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        x, dest, counts = tensor_types(operand_types, cls.name)
        top_k, per_source = cls._check(x, dest, counts, attrs)
        (slot_rows,) = _positive(attrs, "slot_rows")
        if x.shape[0] * top_k != dest.shape[0]:
            raise InferError(f"{x.shape[0]} rows with top_k {top_k} make {x.shape[0] * top_k} assignments, "
                             f"dest has {dest.shape[0]}")
        slots = dest.shape[0] // per_source
        return [x.with_shape((slots * slot_rows,) + x.shape[1:])]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"spmdc_ops.expert_dispatch({ins[0]}, {ins[1]}, {self.result.tensor_type.shape[0]}, {self.top_k})"

    def sharding_rule(self) -> OpShardingRule:
        x, per = self.operand(0).tensor_type, int_attr(self.attributes, "per_source")
        return self._rule(per // self.top_k, int_attr(self.attributes, "slot_rows"), x)


class ExpertCombineOp(_MoveOp):
    """``out[a] = buf[dest[a]]`` (zero for a dropped assignment), summed over each token's
    ``top_k`` assignments when ``top_k > 1`` — the inverse of ``tensor.expert_dispatch``, and its
    gradient.

    ``%y = tensor.expert_combine %buf, %dest, %c {per_source = 32, top_k = 1}
    : (tensor<128x16xf32>, tensor<64xi64>, tensor<2x4xi64>) -> tensor<64x16xf32>``

    Sharding: ``([q*, d], [q*], [1, 1]) -> ([q*, d])``: ``q`` sharded is the all_to_all back
    (``comm.expert_combine``); linear in ``buf``.
    """

    name = "tensor.expert_combine"
    required_attrs = {"top_k": IntegerAttr, "per_source": IntegerAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        buf, dest, counts = tensor_types(operand_types, cls.name)
        top_k, per_source = cls._check(buf, dest, counts, attrs)
        slots = dest.shape[0] // per_source
        if buf.shape[0] % slots:
            raise InferError(f"the buffer's {buf.shape[0]} rows do not split into {slots} slots")
        return [buf.with_shape((dest.shape[0] // top_k,) + buf.shape[1:])]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"spmdc_ops.expert_combine({ins[0]}, {ins[1]}, {self.top_k})"

    def slot_rows(self) -> int:
        return self.operand(0).tensor_type.shape[0] // self.sources()

    def sharding_rule(self) -> OpShardingRule:
        buf, per = self.operand(0).tensor_type, int_attr(self.attributes, "per_source")
        return self._rule(self.slot_rows(), per // self.top_k, buf)


OPS = [ExpertCountsOp, ExpertRouteOp, ExpertDispatchOp, ExpertCombineOp]
