"""Slicing, concatenation, padding and indexed reads/writes.

    %0 = tensor.slice %x {dim = 1, end = 8, start = 4, step = 1} : (tensor<2x8xf32>) -> tensor<2x4xf32>
    %1 = tensor.concat %0, %0 {dim = 1} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
    %r = tensor.reverse %1 {dims = [1]} : tensor<2x8xf32>
    %2 = tensor.insert_slice %x, %0 {dim = 1, end = 8, start = 4, step = 1}
           : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
    %3 = tensor.embedding %w, %ids : (tensor<64x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
    %4 = tensor.gather %logits, %t {dim = 1} : (tensor<16x64xf32>, tensor<16x1xi64>) -> tensor<16x1xf32>
    %5 = tensor.index_put %z, %ids, %g {accumulate = true}
           : (tensor<64x32xf32>, tensor<2x8xi64>, tensor<2x8x32xf32>) -> tensor<64x32xf32>
    %6 = tensor.index_select %x, %rows {dim = 0} : (tensor<64x32xf32>, tensor<16xi64>) -> tensor<16x32xf32>
    %7 = tensor.scatter_reduce %x, %i, %s {dim = 1, include_self = true, reduce = "amax"}
           : (tensor<16x64xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x64xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder, aligned_rule, dim_blocked_rule
from spmdc.dialects.tensor.base import (
    TensorOp,
    broadcast_shapes,
    check_dims,
    int_list,
    replicated_rule,
    same_element_type,
    tensor_types,
)
from spmdc.dialects.tensor.helpers import bool_attr, check_dim, int_attr, number_attr, require_int, str_attr
from spmdc.ir.attributes import ArrayAttr, BoolAttr, FloatAttr, IntegerAttr, StringAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType

_SLICE_ATTRS = {"dim": IntegerAttr, "start": IntegerAttr, "end": IntegerAttr, "step": IntegerAttr}


def _slice_len(attrs, t: TensorType) -> tuple[int, int, int, int, int]:
    dim, start, end = int_attr(attrs, "dim"), int_attr(attrs, "start"), int_attr(attrs, "end")
    step = int_attr(attrs, "step")
    check_dim(dim, t.rank)
    if step < 1:
        raise InferError(f"step must be positive, got {step}")
    if not 0 <= start <= end <= t.shape[dim]:
        raise InferError(f"slice [{start}, {end}) is out of bounds for dim {dim} of size {t.shape[dim]}")
    return dim, start, end, step, (end - start + step - 1) // step


class AlignedOp(TensorOp):
    """Base of ops whose operands line up dim for dim with the result except along the dims
    they index (``blocked_dims``): those need replication; every other dim is free."""

    kernel = "none"

    def blocked_dims(self) -> set[int]:
        return {int(self.attr_value("dim"))}  # type: ignore[arg-type]

    def sharding_rule(self) -> OpShardingRule:
        return aligned_rule([v.type for v in self.operands], self.result.tensor_type,  # type: ignore[misc]
                            self.blocked_dims())

    def slice_attrs(self) -> tuple[int, int, int, int]:
        return tuple(int(self.attr_value(k)) for k in ("dim", "start", "end", "step"))  # type: ignore[return-value]


class PartSlicingOp(AlignedOp):
    """Base of the ops that read or write a slice ``{dim, start, end, step}`` of operand 0: a
    slice that is one of ``k`` equal parts of the dim may be sharded strided (``SS(dim, k)``)."""

    def part(self) -> tuple[int, int] | None:
        """``(j, k)`` when the slice is part ``j`` of ``k`` equal parts of its dim (a fused
        q|k|v split, or its backward); None otherwise. Read on global types."""
        dim, start, end, step = self.slice_attrs()
        size, length = self.operand(0).tensor_type.shape[dim], end - start
        if step != 1 or length <= 0 or size % length or start % length or size == length:
            return None
        return start // length, size // length

    def localize(self, local_operand: TensorType, part: tuple[int, int]) -> None:
        """On an ``SS(dim, k)`` operand 0, part ``j`` (of :meth:`part`) is the ``j``-th of its k
        local parts: ``partition`` calls this with the local type."""
        j, k = part
        dim = int(self.attr_value("dim"))  # type: ignore[arg-type]
        n = local_operand.shape[dim] // k
        self.attributes["start"], self.attributes["end"] = IntegerAttr(j * n), IntegerAttr((j + 1) * n)


class SliceOp(PartSlicingOp):
    """Elements ``start, start+step, ... < end`` of dim ``dim`` (0 <= start <= end <= size).

    ``%r = tensor.slice %x {dim = 0, end = 6, start = 0, step = 2} : (tensor<8xf32>) -> tensor<3xf32>``
    """

    name = "tensor.slice"
    num_operands = 1
    num_results = 1
    required_attrs = _SLICE_ATTRS
    traits = TensorOp.traits | {"View", "StridedView"}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        dim, _, _, _, n = _slice_len(attrs, a)
        return [a.with_shape(a.shape[:dim] + (n,) + a.shape[dim + 1:])]

    def torch_expr(self, ins: Sequence[str]) -> str:
        dim, start, end, step = self.slice_attrs()
        idx = [":"] * dim + [f"{start}:{end}" + (f":{step}" if step != 1 else "")]
        return f"{ins[0]}[{', '.join(idx)}]"

    def sharding_rule(self) -> OpShardingRule:
        """Aligned, the sliced dim whole — except a slice of one of ``k`` equal parts, which may be
        sharded: the operand then holds every part split (``SS(dim, k)``), the result ``S(dim)``."""
        rule = super().sharding_rule()
        part = self.part()
        if part is None:
            return rule
        dim = int(self.attr_value("dim"))  # type: ignore[arg-type]
        f = rule.results[0][dim]
        assert f is not None
        return replace(rule, blocked=rule.blocked - {f}, views=((False, 0, dim, f, part[1]),))


class InsertSliceOp(PartSlicingOp):
    """``dest`` with the slice ``{dim, start, end, step}`` replaced by ``src`` (``slice_scatter``).

    ``%r = tensor.insert_slice %d, %s {dim = 1, end = 4, start = 0, step = 1}
           : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>``
    """

    name = "tensor.insert_slice"
    num_operands = 2
    num_results = 1
    required_attrs = _SLICE_ATTRS

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        d, s = tensor_types(operand_types, cls.name)
        same_element_type([d, s])
        dim, _, _, _, n = _slice_len(attrs, d)
        want = d.shape[:dim] + (n,) + d.shape[dim + 1:]
        if s.shape != want:
            raise InferError(f"source {s} does not match the slice shape {list(want)}")
        return [d]

    def torch_expr(self, ins: Sequence[str]) -> str:
        dim, start, end, step = self.slice_attrs()
        return f"torch.slice_scatter({ins[0]}, {ins[1]}, {dim}, {start}, {end}, {step})"

    def sharding_rule(self) -> OpShardingRule:
        """Aligned, the written dim whole — except writing one of ``k`` equal parts, which may be
        sharded: destination and result ``SS(dim, k)``, the written part ``S(dim)``."""
        rule = super().sharding_rule()
        part = self.part()
        if part is None:
            return rule
        dim = int(self.attr_value("dim"))  # type: ignore[arg-type]
        f = rule.operands[1][dim]
        if f is None:   # a part of size 1 broadcasts: nothing to shard
            return rule
        views = ((False, 0, dim, f, part[1]), (True, 0, dim, f, part[1]))
        return replace(rule, blocked=rule.blocked - {f}, views=views)


class ReverseOp(AlignedOp):
    """Reverse the order of elements along ``dims`` (``torch.flip``).

    ``%r = tensor.reverse %x {dims = [1]} : tensor<2x8xf32>``
    """

    name = "tensor.reverse"
    num_operands = 1
    num_results = 1
    required_attrs = {"dims": ArrayAttr}
    traits = TensorOp.traits | {"SameOperandsAndResultType"}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        check_dims(int_list(attrs, "dims"), a.rank, "reversed dim")
        return [a]

    def blocked_dims(self) -> set[int]:
        return set(self.attr_value("dims"))  # type: ignore[arg-type]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.flip({ins[0]}, {literal(list(self.attr_value('dims')))})"  # type: ignore[arg-type]


class ConcatOp(TensorOp):
    """Join operands along ``dim``; other dims must agree.

    ``%r = tensor.concat %a, %b {dim = 1} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>``
    """

    name = "tensor.concat"
    num_results = 1
    required_attrs = {"dim": IntegerAttr}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ts = tensor_types(operand_types, cls.name)
        if not ts:
            raise InferError("needs at least one operand")
        elt = same_element_type(ts)
        dim = int_attr(attrs, "dim")
        check_dim(dim, ts[0].rank)
        for t in ts[1:]:
            if t.rank != ts[0].rank or any(x != y for i, (x, y) in enumerate(zip(t.shape, ts[0].shape)) if i != dim):
                raise InferError(f"operand {t} does not match {ts[0]} outside dim {dim}")
        shape = list(ts[0].shape)
        shape[dim] = sum(t.shape[dim] for t in ts)
        return [TensorType(tuple(shape), elt)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.cat([{', '.join(ins)}], dim={literal(self.attr_value('dim'))})"

    def sharding_rule(self) -> OpShardingRule:
        """Elementwise off ``dim``, ``dim`` whole — except joining ``k`` equal parts, which may be
        sharded: operands ``S(dim)`` give the result every part split, ``SS(dim, k)``."""
        dim = int(self.attr_value("dim"))  # type: ignore[arg-type]
        types = [v.tensor_type for v in self.operands]
        rule = dim_blocked_rule(types, [self.result.tensor_type], dim)
        k, length = len(types), types[0].shape[dim] if types else 0
        if k < 2 or length == 0 or any(t.shape[dim] != length for t in types) or \
                len(rule.operands) != k or any(len(o) != types[0].rank for o in rule.operands):
            return rule
        f = rule.num_factors
        operands = tuple(tuple(f if i == dim else x for i, x in enumerate(o)) for o in rule.operands)
        return replace(rule, operands=operands, factor_sizes=rule.factor_sizes + (length,),
                       views=((True, 0, dim, f, k),))


class PadOp(AlignedOp):
    """Pad (or, with negative amounts, crop) each dim by ``low``/``high`` elements of ``value``.

    ``%r = tensor.pad %x {high = [0, 1], low = [0, 0], value = -100} : (tensor<2x8xi64>) -> tensor<2x9xi64>``
    """

    name = "tensor.pad"
    num_operands = 1
    num_results = 1
    required_attrs = {"low": ArrayAttr, "high": ArrayAttr, "value": (IntegerAttr, FloatAttr)}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        low, high = int_list(attrs, "low"), int_list(attrs, "high")
        if len(low) != a.rank or len(high) != a.rank:
            raise InferError(f"'low' and 'high' need {a.rank} entries each")
        number_attr(attrs, "value")
        if not a.is_float and isinstance(attrs.get("value"), FloatAttr):
            raise InferError(f"float padding value for an integer tensor {a}")
        shape = tuple(s + lo + hi for s, lo, hi in zip(a.shape, low, high))
        if any(s < 0 for s in shape):
            raise InferError(f"padding gives a negative size {list(shape)}")
        return [a.with_shape(shape)]

    def blocked_dims(self) -> set[int]:
        low, high = self.attr_value("low"), self.attr_value("high")
        return {d for d, (lo, hi) in enumerate(zip(low, high)) if lo or hi}  # type: ignore[arg-type]

    def torch_expr(self, ins: Sequence[str]) -> str:
        pad: list[int] = []
        for lo, hi in reversed(list(zip(self.attr_value("low"), self.attr_value("high")))):  # type: ignore[arg-type]
            pad += [int(lo), int(hi)]
        return f"torch.nn.functional.pad({ins[0]}, {literal(pad)}, value={literal(self.attr_value('value'))})"


class EmbeddingOp(TensorOp):
    """Rows of ``weight`` (``[V, D]``) picked by integer ``indices``; result ``indices.shape + [D]``.

    ``%r = tensor.embedding %w, %ids : (tensor<64x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>``
    """

    name = "tensor.embedding"
    num_operands = 2
    num_results = 1
    torch = "torch.nn.functional.embedding({1}, {0})"
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        w, ids = tensor_types(operand_types, cls.name)
        if w.rank != 2:
            raise InferError(f"weight must have rank 2, got {w}")
        require_int(ids, "indices")
        return [TensorType(ids.shape + w.shape[1:], w.element_type)]

    def sharding_rule(self) -> OpShardingRule:
        """``table[V, D]``, ``ids[...]`` -> ``[..., D]``: ids dims and D are parallel; V stays whole."""
        table, ids = self.operand(0).tensor_type, self.operand(1).tensor_type
        b = RuleBuilder()
        fid = [b.factor(s) for s in ids.shape]
        v, d = b.factor(table.shape[0]), b.factor(table.shape[1])
        return b.build([[v, d], fid], [fid + [d]], blocked=frozenset({v}))


class GatherOp(AlignedOp):
    """``torch.gather``: ``r[i][j] = x[i][index[i][j]]`` for ``dim = 1``; result has the index's shape.

    ``%r = tensor.gather %x, %i {dim = 1} : (tensor<16x64xf32>, tensor<16x1xi64>) -> tensor<16x1xf32>``
    """

    name = "tensor.gather"
    num_operands = 2
    num_results = 1
    required_attrs = {"dim": IntegerAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        x, idx = tensor_types(operand_types, cls.name)
        require_int(idx, "index")
        dim = int_attr(attrs, "dim")
        check_dim(dim, x.rank)
        if idx.rank != x.rank or any(i > s for d, (i, s) in enumerate(zip(idx.shape, x.shape)) if d != dim):
            raise InferError(f"index {idx} does not fit {x} outside dim {dim}")
        return [TensorType(idx.shape, x.element_type)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.gather({ins[0]}, {literal(self.attr_value('dim'))}, {ins[1]})"


class ScatterOp(AlignedOp):
    """``torch.scatter``: ``x`` with ``x[i][index[i][j]] = src[i][j]`` (``dim = 1``); ``src`` has the
    index's shape. ``reduce = "add"`` accumulates instead of overwriting.

    ``%r = tensor.scatter %x, %i, %s {dim = 1}
           : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf32>) -> tensor<16x64xf32>``
    """

    name = "tensor.scatter"
    num_operands = 3
    num_results = 1
    required_attrs = {"dim": IntegerAttr}
    optional_attrs = {"reduce": StringAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        x, idx, src = tensor_types(operand_types, cls.name)
        require_int(idx, "index")
        same_element_type([x, src])
        dim = int_attr(attrs, "dim")
        check_dim(dim, x.rank)
        str_attr(attrs, "reduce", ("add",), default="add")
        if src.shape != idx.shape:
            raise InferError(f"source {src} must have the index's shape {list(idx.shape)}")
        if idx.rank != x.rank or any(i > s for d, (i, s) in enumerate(zip(idx.shape, x.shape)) if d != dim):
            raise InferError(f"index {idx} does not fit {x} outside dim {dim}")
        return [x]

    def verify_(self) -> None:
        from spmdc.dialects.tensor.elementwise import inplace_operand

        inplace_operand(self)

    def torch_expr(self, ins: Sequence[str]) -> str:
        return self._call(ins, "")

    def inplace_expr(self, ins: Sequence[str], k: int) -> str | None:
        """Written into ``x`` (``inplace = 0``, :mod:`spmdc.passes.in_place`): ``x.scatter_(...)``
        (a cross-entropy's backward scatters into zeros that die there)."""
        return self._call(ins, "_") if k == 0 else None

    def _call(self, ins: Sequence[str], suffix: str) -> str:
        fn = "scatter_add" if self.attr_value("reduce") == "add" else "scatter"
        return f"{ins[0]}.{fn}{suffix}({literal(self.attr_value('dim'))}, {ins[1]}, {ins[2]})"


def index_shape(x: TensorType, idx: list[TensorType]) -> tuple[int, ...]:
    """Shape of ``x[i0, i1, ...]`` (index tensors broadcast; they index the leading dims)."""
    if not idx:
        raise InferError("needs at least one index tensor")
    if len(idx) > x.rank:
        raise InferError(f"{len(idx)} index tensors for a rank-{x.rank} tensor")
    shape: tuple[int, ...] = ()
    for t in idx:
        require_int(t, "index")
        shape = broadcast_shapes(shape, t.shape)
    return shape + x.shape[len(idx):]


_SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


class ScatterReduceOp(AlignedOp):
    """``torch.scatter_reduce``: ``x`` with ``src[i][j]`` combined into ``x[i][index[i][j]]``
    (``dim = 1``) by ``reduce`` (``sum``, ``prod``, ``mean``, ``amax``, ``amin``); with
    ``include_self = false`` the written elements of ``x`` do not take part. ``src`` has the
    index's shape. Sharding as ``tensor.scatter``: ``dim`` whole, the other dims parallel where
    the index covers them.

    ``%r = tensor.scatter_reduce %x, %i, %s {dim = 1, include_self = true, reduce = "amax"}
           : (tensor<16x64xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x64xf32>``
    """

    name = "tensor.scatter_reduce"
    num_operands = 3
    num_results = 1
    required_attrs = {"dim": IntegerAttr, "reduce": StringAttr}
    optional_attrs = {"include_self": BoolAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        str_attr(attrs, "reduce", _SCATTER_REDUCTIONS)
        return ScatterOp.infer_result_types(operand_types, {"dim": attrs["dim"]})

    def torch_expr(self, ins: Sequence[str]) -> str:
        include_self = literal(bool_attr(self.attributes, "include_self", True))
        return (f"torch.scatter_reduce({ins[0]}, {literal(self.attr_value('dim'))}, {ins[1]}, {ins[2]}, "
                f"{literal(self.attr_value('reduce'))}, include_self={include_self})")


class IndexSelectOp(TensorOp):
    """``torch.index_select``: the entries ``index[0], index[1], ...`` of ``x`` along ``dim``
    (``index``: rank 0 or 1); the result's ``dim`` has the index's length.

    ``%r = tensor.index_select %x, %rows {dim = 0} : (tensor<64x32xf32>, tensor<16xi64>) -> tensor<16x32xf32>``
    """

    name = "tensor.index_select"
    num_operands = 2
    num_results = 1
    required_attrs = {"dim": IntegerAttr}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        x, idx = tensor_types(operand_types, cls.name)
        require_int(idx, "index")
        if idx.rank > 1:
            raise InferError(f"index must have rank 0 or 1, got {idx}")
        dim = int_attr(attrs, "dim")
        check_dim(dim, max(x.rank, 1))
        if x.rank == 0:
            return [x]
        return [x.with_shape(x.shape[:dim] + (idx.num_elements,) + x.shape[dim + 1:])]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.index_select({ins[0]}, {literal(self.attr_value('dim'))}, {ins[1]})"

    def sharding_rule(self) -> OpShardingRule:
        """``x[.., n, ..]``, ``index[m]`` -> ``[.., m, ..]``: x's ``dim`` stays whole; the index's dim
        is parallel with the result's ``dim`` (each piece of the index picks its rows); every
        other dim is parallel. Linear in ``x``."""
        x, idx = self.operand(0).tensor_type, self.operand(1).tensor_type
        if x.rank == 0:
            return replicated_rule(self)
        dim = int(self.attr_value("dim"))  # type: ignore[arg-type]
        b = RuleBuilder()
        fx = [b.factor(s) for s in x.shape]
        m = b.factor(idx.shape[0]) if idx.rank == 1 else None
        res = [m if d == dim else f for d, f in enumerate(fx)]
        return b.build([fx, [] if m is None else [m]], [res], blocked=frozenset({fx[dim]}), partial_one=(0,))


class IndexOp(TensorOp):
    """Advanced indexing ``x[i0, i1, ...]`` of the leading dims by broadcast integer tensors.

    ``%r = tensor.index %x, %i, %j : (tensor<2x8xi64>, tensor<2x1xi64>, tensor<1x8xi64>) -> tensor<2x8xi64>``
    """

    name = "tensor.index"
    num_results = 1
    kernel = "none"

    def sharding_rule(self) -> OpShardingRule:
        """``x[n0, .., nk-1, t..]``, ``i0.., ik-1`` broadcast to ``[b..]`` -> ``[b.., t..]``: the indexed
        dims of ``x`` stay whole; the broadcast index dims are parallel with the result's leading
        dims (each piece of the indices reads its elements), the trailing dims ``t`` parallel with
        ``x``'s. Linear in ``x``."""
        x = self.operand(0).tensor_type
        idx = [v.tensor_type for v in self.operands[1:]]
        k = len(idx)
        b = RuleBuilder()
        fx = [b.factor(s) for s in x.shape]
        bshape = self.result.tensor_type.shape[:self.result.tensor_type.rank - (x.rank - k)]
        g = [b.factor(s) for s in bshape]

        def align(shape: tuple[int, ...]) -> list[int | None]:
            off = len(g) - len(shape)
            return [None if (s == 1 and bshape[off + i] != 1) else g[off + i] for i, s in enumerate(shape)]

        return b.build([fx] + [align(t.shape) for t in idx], [g + fx[k:]], blocked=frozenset(fx[:k]),
                       partial_one=(0,))

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ts = tensor_types(operand_types, cls.name)
        if len(ts) < 2:
            raise InferError("needs a tensor and at least one index tensor")
        return [TensorType(index_shape(ts[0], ts[1:]), ts[0].element_type)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"{ins[0]}[{', '.join(ins[1:])}]"


class IndexPutOp(TensorOp):
    """``x`` with ``x[i0, ...] = values`` (``+=`` when ``accumulate``, duplicates summed).

    Operands: ``x``, the index tensors, ``values`` (broadcast to the indexed shape).

    ``%r = tensor.index_put %x, %i, %v {accumulate = true}
           : (tensor<64x32xf32>, tensor<16xi64>, tensor<16x32xf32>) -> tensor<64x32xf32>``
    """

    name = "tensor.index_put"
    num_results = 1
    optional_attrs = {"accumulate": BoolAttr}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ts = tensor_types(operand_types, cls.name)
        if len(ts) < 3:
            raise InferError("needs a tensor, at least one index tensor and the values")
        x, idx, v = ts[0], ts[1:-1], ts[-1]
        same_element_type([x, v])
        target = index_shape(x, idx)
        try:
            ok = broadcast_shapes(v.shape, target) == target
        except InferError:
            ok = False
        if not ok:
            raise InferError(f"values {v} do not broadcast to the indexed shape {list(target)}")
        return [x]

    @property
    def accumulate(self) -> bool:
        return bool_attr(self.attributes, "accumulate")

    def torch_expr(self, ins: Sequence[str]) -> str:
        idx = ins[1:-1]
        tup = f"({idx[0]},)" if len(idx) == 1 else f"({', '.join(idx)})"
        return f"{ins[0]}.index_put({tup}, {ins[-1]}, accumulate={literal(self.accumulate)})"

    def sharding_rule(self) -> OpShardingRule:
        """``index_put(x, i0.., values)`` over the first k dims of x: those stay whole; trailing
        dims are parallel. With ``accumulate`` the index (batch) dims are a sum: sharding them
        scatters each rank's part and leaves the result ``P(sum)`` (x must then be ``P(sum)``,
        e.g. zeros); it is linear in (x, values) together."""
        x = self.operand(0).tensor_type
        idx = [v.tensor_type for v in self.operands[1:-1]]
        vals = self.operands[-1].tensor_type
        k = len(idx)
        b = RuleBuilder()
        fx = [b.factor(s) for s in x.shape]
        blocked = set(fx[:k])
        bshape: tuple[int, ...] = ()
        for t in idx:
            bshape = broadcast_shapes(bshape, t.shape)
        g = [b.factor(s) for s in bshape]
        if not self.accumulate:
            blocked.update(g)

        def align(shape: tuple[int, ...], full: list[int], sizes: tuple[int, ...]) -> list[int | None]:
            off = len(full) - len(shape)
            return [None if (s == 1 and sizes[off + i] != 1) else full[off + i] for i, s in enumerate(shape)]

        target, tsizes = g + fx[k:], bshape + tuple(x.shape[k:])
        operands = [fx] + [align(t.shape, g, bshape) for t in idx] + [align(vals.shape, target, tsizes)]
        return b.build(operands, [fx], blocked=frozenset(blocked),
                       reductions=tuple((f, "sum") for f in g) if self.accumulate else (),
                       reduce_partial_operands=(0,),
                       partial_group=(0, len(self.operands) - 1) if self.accumulate else ())


OPS = [SliceOp, InsertSliceOp, ReverseOp, ConcatOp, PadOp, EmbeddingOp, GatherOp, ScatterOp, ScatterReduceOp,
       IndexSelectOp, IndexOp, IndexPutOp]
