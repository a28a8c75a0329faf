"""``comm.split_all_reduce``: reduce cross-group partial values per finest slice (Hetu v2).

Device groups lay a value out each their own way (``tp=4`` rows on ranks 0-3, ``tp=2`` rows on
ranks 4-5) and each group holds one term of a pending sum across the groups (the gradients of
replicas that took different shares of the batch). No single process group fits: the value is
cut at every group's piece boundary and each finest slice is all-reduced over exactly the ranks
that hold it, in every group, one term per group. The op lists, per operand, its union layout
(the groups' layouts and the ``partial`` relation) and the holder sets it reduces over; the
runtime packs every operand's slices for one holder set into one buffer, so the op issues one
all-reduce per holder set::

    shard.mesh @g0 = <["tp" = 4]> devices = [0, 1, 2, 3]
    shard.mesh @g1 = <["tp" = 2]> devices = [4, 5]
    %w, %b = comm.split_all_reduce %gw, %gb {groups = [[0, 1, 2, 3, 4, 5], [0, 4], [1, 4], [2, 5], [3, 5]],
        op = "sum", seq = 3, shapes = [[8, 32], [32]],
        unions = [#shard.union<partial(sum), [#shard<@g0, [S(0)]>, #shard<@g1, [S(0)]>]>,
                  #shard.union<partial(sum), [#shard<@g0, [R]>, #shard<@g1, [R]>]>]}
        : (tensor<2x32xf32>, tensor<32xf32>) -> (tensor<2x32xf32>, tensor<32xf32>)

``shapes`` are the operands' global shapes. Every result has its operand's (local) type:
each rank keeps its own piece, now summed over the groups. ``seq`` numbers the op among the
program's cross-group collectives: every group issues them in that order (the runtime checks
it), so subgroups never see two ops interleaved.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.comm.collectives import CollectiveOp
from spmdc.dialects.pyexpr import literal
from spmdc.ir.attributes import ArrayAttr, Attribute, IntegerAttr, StringAttr
from spmdc.ir.types import TensorType


class CrossGroupOp(CollectiveOp):
    """Shared by the collectives across device groups: no mesh axis (they run over explicit job
    ranks), ``seq`` (their order in every group's program)."""

    required_attrs = {"seq": IntegerAttr}

    @property
    def axes(self) -> tuple[str, ...]:
        return ()

    @property
    def seq(self) -> int:
        return int(self.attributes["seq"].value)  # type: ignore[attr-defined]

    def is_global(self) -> bool:
        return "shard.sharding" in self.attributes


class SplitAllReduceOp(CrossGroupOp):
    """Cross-group all-reduce of union-laid-out partial values (see the module doc).

    ``%r:2 = comm.split_all_reduce %w, %b {groups = [[0, 4], [1, 4]], op = "sum", seq = 0,
    shapes = [[8, 6], [6]], unions = [...]} : (tensor<2x6xf32>, tensor<6xf32>) -> (...)``
    """

    name = "comm.split_all_reduce"
    num_operands = None
    num_results = None
    required_attrs = {"op": StringAttr, "unions": ArrayAttr, "seq": IntegerAttr, "groups": ArrayAttr,
                      "shapes": ArrayAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        return list(operand_types) if operand_types else None

    @property
    def unions(self) -> list:
        return list(self.attributes["unions"])  # type: ignore[arg-type]

    @property
    def global_shapes(self) -> list[tuple[int, ...]]:
        """Each operand's global shape (its type is the rank's piece after partition)."""
        return [tuple(d.value for d in s) for s in self.attributes["shapes"]]  # type: ignore[attr-defined]

    @property
    def holder_sets(self) -> list[tuple[int, ...]]:
        """The rank sets it all-reduces over (one collective each), as job ranks."""
        return [tuple(r.value for r in g) for g in self.attributes["groups"]]  # type: ignore[attr-defined]

    def group_size(self) -> int:
        return max((len(g) for g in self.holder_sets), default=1)

    def torch_expr(self, ins: Sequence[str]) -> str:
        call = f"comm.split_all_reduce([{', '.join(ins)}], {self.seq}, {literal(str(self.attr_value('op')))})"
        return call + "[0]" if len(self.results) == 1 else call   # one result binds a tensor, not a list

    def verify_(self) -> None:
        from spmdc.dialects.shard import CrossPartial, UnionShardingAttr

        if not self.operands or len(self.operands) != len(self.results):
            raise self.emit_error(f"needs as many results as operands (>= 1), got {len(self.operands)} operands "
                                  f"and {len(self.results)} results")
        if str(self.attr_value("op")) != "sum":
            raise self.emit_error(f"reduces with 'sum' only, got '{self.attr_value('op')}'")
        unions = self.unions
        if len(unions) != len(self.operands) or not all(isinstance(u, UnionShardingAttr) for u in unions):
            raise self.emit_error(f"'unions' must hold one #shard.union layout per operand ({len(self.operands)})")
        for i, u in enumerate(unions):
            if not isinstance(u.relation, CrossPartial):
                raise self.emit_error(f"operand #{i}: union {u} is not a cross-group partial")
        groups = self.attributes["groups"]
        if not all(isinstance(g, ArrayAttr) and len(g) and all(isinstance(r, IntegerAttr) for r in g)
                   for g in groups):  # type: ignore[union-attr]
            raise self.emit_error("'groups' must be a list of non-empty rank lists")
        shapes = self.attributes["shapes"]
        if len(shapes) != len(self.operands) or not all(  # type: ignore[arg-type]
                isinstance(sh, ArrayAttr) and all(isinstance(d, IntegerAttr) for d in sh) for sh in shapes):  # type: ignore[union-attr]
            raise self.emit_error(f"'shapes' must hold one global shape per operand ({len(self.operands)})")
        for i, (v, r) in enumerate(zip(self.operands, self.results)):
            if not isinstance(v.type, TensorType) or v.type != r.type:
                raise self.emit_error(f"result #{i} type {r.type} must equal operand #{i} type {v.type}")



class BsrOp(CrossGroupOp):
    """Batched send/recv between two union layouts (Hetu v2's BSR, Partial sources summed on
    arrival): every finest slice a rank needs comes from one holder per partial term, each
    (sender, receiver) pair's slices packed into one message, all messages in one
    ``batch_isend_irecv``. ``messages`` lists the pairs (job ranks) with data; ``shape`` is the
    global shape; ``seq`` as for ``comm.split_all_reduce``::

        %y = comm.bsr %x {from = #shard.union<split(0, [4, 2]), [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>,
                          to = #shard.union<dup, [#shard<@g0, [S(1)]>, #shard<@g1, [R]>]>,
                          messages = [[0, 4], [4, 0], ...], seq = 0, shape = [6, 8]}
            : (tensor<4x2xf32>) -> tensor<6x2xf32>
    """

    name = "comm.bsr"
    required_attrs = {"from": Attribute, "to": Attribute, "seq": IntegerAttr, "shape": ArrayAttr,
                      "messages": ArrayAttr}

    @property
    def global_shape(self) -> tuple[int, ...]:
        return tuple(d.value for d in self.attributes["shape"])  # type: ignore[attr-defined]

    @property
    def message_pairs(self) -> list[tuple[int, int]]:
        return [(m[0].value, m[1].value) for m in self.attributes["messages"]]  # type: ignore[index]

    def group_size(self) -> int:
        return 2

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"comm.bsr({ins[0]}, {self.seq})"

    def verify_(self) -> None:
        from spmdc.dialects.shard import ShardingAttr, UnionShardingAttr

        for key in ("from", "to"):
            if not isinstance(self.attributes[key], (ShardingAttr, UnionShardingAttr)):
                raise self.emit_error(f"'{key}' must be a #shard<...> or #shard.union<...> layout")
        if not all(isinstance(m, ArrayAttr) and len(m) == 2 and all(isinstance(r, IntegerAttr) for r in m)
                   for m in self.attributes["messages"]):  # type: ignore[union-attr]
            raise self.emit_error("'messages' must list [sender, receiver] rank pairs")
        if not all(isinstance(d, IntegerAttr) for d in self.attributes["shape"]):  # type: ignore[union-attr]
            raise self.emit_error("'shape' must be the global shape (integers)")


OPS = [SplitAllReduceOp, BsrOp]
