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
"""

from __future__ import annotations

from typing import Any

from spmdc.ir.attributes import ArrayAttr, BoolAttr, FloatAttr, IntegerAttr, StringAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType
from spmdc.dialects.tensor.base import (
    TensorOp, broadcast_shapes, check_dims, int_list, same_element_type, tensor_types, torch_module,
)
from spmdc.dialects.tensor.helpers import bool_attr, check_dim, int_attr, number_attr, require_int, str_attr

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


class SliceOp(TensorOp):
    """Elements ``start, start+step, ... < end`` of dim ``dim`` (0 <= start <= end <= size).

    ``%r = tensor.slice %x {dim = 0, end = 6, start = 0, step = 2} : (tensor<8xf32>) -> tensor<3xf32>``
    """

    name = "tensor.slice"
    num_operands = 1
    num_results = 1
    required_attrs = _SLICE_ATTRS

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        dim, _, _, _, n = _slice_len(attrs, a)
        return [a.with_shape(a.shape[:dim] + (n,) + a.shape[dim + 1:])]

    def reference(self, a: Any) -> Any:
        d, s, e, st = (self.attr_value(k) for k in ("dim", "start", "end", "step"))
        idx = [slice(None)] * a.dim()
        idx[d] = slice(s, e, st)
        return a[tuple(idx)]


class InsertSliceOp(TensorOp):
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

    def reference(self, d: Any, s: Any) -> Any:
        dim, st, e, step = (self.attr_value(k) for k in ("dim", "start", "end", "step"))
        return torch_module().slice_scatter(d, s, dim, st, e, step)


class ReverseOp(TensorOp):
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

    def reference(self, a: Any) -> Any:
        return torch_module().flip(a, self.attr_value("dims"))


class ConcatOp(TensorOp):
    """Join operands along ``dim``; other dims must agree.

    ``%r = tensor.concat %a, %b {dim = 1} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>``
    """

    name = "tensor.concat"
    num_results = 1
    required_attrs = {"dim": IntegerAttr}

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

    def reference(self, *xs: Any) -> Any:
        return torch_module().cat(xs, dim=self.attr_value("dim"))


class PadOp(TensorOp):
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

    def reference(self, a: Any) -> Any:
        low, high = self.attr_value("low"), self.attr_value("high")
        pad: list[int] = []
        for lo, hi in reversed(list(zip(low, high))):
            pad += [lo, hi]
        return torch_module().nn.functional.pad(a, pad, value=self.attr_value("value"))


class EmbeddingOp(TensorOp):
    """Rows of ``weight`` (``[V, D]``) picked by integer ``indices``; result ``indices.shape + [D]``.

    ``%r = tensor.embedding %w, %ids : (tensor<64x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>``
    """

    name = "tensor.embedding"
    num_operands = 2
    num_results = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        w, ids = tensor_types(operand_types, cls.name)
        if w.rank != 2:
            raise InferError(f"weight must have rank 2, got {w}")
        require_int(ids, "indices")
        return [TensorType(ids.shape + w.shape[1:], w.element_type)]

    def reference(self, w: Any, ids: Any) -> Any:
        return torch_module().nn.functional.embedding(ids, w)


class GatherOp(TensorOp):
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

    def reference(self, x: Any, idx: Any) -> Any:
        return torch_module().gather(x, self.attr_value("dim"), idx)


class ScatterOp(TensorOp):
    """``torch.scatter``: ``x`` with ``x[i][index[i][j]] = src[i][j]`` (``dim = 1``); ``src`` has the
    index's shape. ``reduce = "add"`` accumulates instead of overwriting.

    ``%r = tensor.scatter %x, %i, %s {dim = 1} : (tensor<16x64xf32>, tensor<16x1xi64>, tensor<16x1xf32>) -> tensor<16x64xf32>``
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

    def reference(self, x: Any, idx: Any, src: Any) -> Any:
        dim = self.attr_value("dim")
        if self.attr_value("reduce") == "add":
            return x.scatter_add(dim, idx, src)
        return x.scatter(dim, idx, src)


def _index_shape(x: TensorType, idx: list[TensorType]) -> tuple[int, ...]:
    if not idx:
        raise InferError("needs at least one index tensor")
    if len(idx) > x.rank:
        raise InferError(f"{len(idx)} index tensors for a rank-{x.rank} tensor")
    shape: tuple[int, ...] = ()
    for t in idx:
        require_int(t, "index")
        shape = broadcast_shapes(shape, t.shape)
    return shape + x.shape[len(idx):]


class IndexOp(TensorOp):
    """Advanced indexing ``x[i0, i1, ...]`` of the leading dims by broadcast integer tensors.

    ``%r = tensor.index %x, %i, %j : (tensor<2x8xi64>, tensor<2x1xi64>, tensor<1x8xi64>) -> tensor<2x8xi64>``
    """

    name = "tensor.index"
    num_results = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ts = tensor_types(operand_types, cls.name)
        if len(ts) < 2:
            raise InferError("needs a tensor and at least one index tensor")
        return [TensorType(_index_shape(ts[0], ts[1:]), ts[0].element_type)]

    def reference(self, x: Any, *idx: Any) -> Any:
        return x[tuple(idx)]


class IndexPutOp(TensorOp):
    """``x`` with ``x[i0, ...] = values`` (``+=`` when ``accumulate``, duplicates summed).

    Operands: ``x``, the index tensors, ``values`` (broadcast to the indexed shape).

    ``%r = tensor.index_put %x, %i, %v {accumulate = true} : (tensor<64x32xf32>, tensor<16xi64>, tensor<16x32xf32>) -> tensor<64x32xf32>``
    """

    name = "tensor.index_put"
    num_results = 1
    optional_attrs = {"accumulate": BoolAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ts = tensor_types(operand_types, cls.name)
        if len(ts) < 3:
            raise InferError("needs a tensor, at least one index tensor and the values")
        x, idx, v = ts[0], ts[1:-1], ts[-1]
        same_element_type([x, v])
        target = _index_shape(x, idx)
        try:
            ok = broadcast_shapes(v.shape, target) == target
        except InferError:
            ok = False
        if not ok:
            raise InferError(f"values {v} do not broadcast to the indexed shape {list(target)}")
        return [x]

    def reference(self, x: Any, *rest: Any) -> Any:
        return x.index_put(tuple(rest[:-1]), rest[-1], accumulate=bool_attr(self.attributes, "accumulate"))


OPS = [SliceOp, InsertSliceOp, ReverseOp, ConcatOp, PadOp, EmbeddingOp, GatherOp, ScatterOp, IndexOp, IndexPutOp]
