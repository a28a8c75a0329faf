"""p-norm distances between rows (``torch.cdist``, ``F.pdist``), their gradients, and the
max-mode embedding bag.

    %d = tensor.cdist %a, %b {p = 2.0} : (tensor<2x5x6xf32>, tensor<2x4x6xf32>) -> tensor<2x5x4xf32>
    %da = tensor.cdist_grad %g, %a, %b, %d {p = 2.0}
           : (tensor<2x5x4xf32>, tensor<2x5x6xf32>, tensor<2x4x6xf32>, tensor<2x5x4xf32>) -> tensor<2x5x6xf32>
    %q = tensor.pdist %x {p = 2.0} : (tensor<5x6xf32>) -> tensor<10xf32>
    %dq = tensor.pdist_grad %g, %x, %q {p = 2.0} : (tensor<10xf32>, tensor<5x6xf32>, tensor<10xf32>) -> tensor<5x6xf32>
    %o, %i = tensor.embedding_bag_max %w, %ids, %offsets {include_last_offset = false, padding_idx = -1}
           : (tensor<10x6xf32>, tensor<8xi64>, tensor<4xi64>) -> (tensor<4x6xf32>, tensor<4x6xi64>)

Each op is PyTorch's kernel (``aten._cdist_forward``, ``_cdist_backward``, ``_pdist_forward``,
``_pdist_backward``, ``_embedding_bag``), so the special cases of ``p`` (0, 1, 2, inf, and the
gradient's zero where a distance is zero) are PyTorch's own. ``tensor.cdist`` with ``mm = true``
is the matrix-product form of the Euclidean distance, which eager PyTorch picks for more than 25
rows; the frontend decides on the global shapes, so every shard computes the same form.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TensorOp, replicated_rule, same_element_type, tensor_types
from spmdc.dialects.tensor.helpers import bool_attr, int_attr, number_attr, require_float, require_int
from spmdc.ir.attributes import BoolAttr, FloatAttr, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType

_P = {"p": (FloatAttr, IntegerAttr)}


def _p(attrs) -> float:
    p = number_attr(attrs, "p")
    if p is None or not p >= 0:
        raise InferError(f"p must be a non-negative number, got {p}")
    return float(p)


def cdist_type(a: TensorType, b: TensorType) -> TensorType:
    same_element_type([a, b])
    require_float(a, "tensor")
    if a.rank < 2 or a.rank != b.rank or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-1]:
        raise InferError(f"expects [*batch, P, M] and [*batch, R, M] with one batch shape, got {a} and {b}")
    return a.with_shape(a.shape[:-1] + (b.shape[-2],))


class _DistBase(TensorOp):
    kernel = "none"
    required_attrs = _P

    @property
    def p(self) -> float:
        return _p(self.attributes)


class CdistOp(_DistBase):
    """``r[..., i, j] = ||a[..., i, :] - b[..., j, :]||_p`` (``aten._cdist_forward``).

    ``%d = tensor.cdist %a, %b {p = 1.0} : (tensor<5x6xf32>, tensor<4x6xf32>) -> tensor<5x4xf32>``

    Sharding rule: batch dims and both row dims parallel; the coordinate dim replicated.
    """

    name = "tensor.cdist"
    num_operands = 2
    num_results = 1
    optional_attrs = {"mm": BoolAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        a, b = tensor_types(operand_types, cls.name)
        _p(attrs)
        if bool_attr(attrs, "mm") and _p(attrs) != 2.0:
            raise InferError("the matrix-product form (mm = true) is the Euclidean distance: needs p = 2")
        return [cdist_type(a, b)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        mode = 1 if bool_attr(self.attributes, "mm") else 2   # 1: use mm, 2: never
        return f"torch.ops.aten._cdist_forward({ins[0]}, {ins[1]}, {literal(self.p)}, {mode})"

    def sharding_rule(self) -> OpShardingRule:
        a, b = self.operand(0).tensor_type, self.operand(1).tensor_type
        rb = RuleBuilder()
        batch = [rb.factor(s) for s in a.shape[:-2]]
        i, j, m = rb.factor(a.shape[-2]), rb.factor(b.shape[-2]), rb.factor(a.shape[-1])
        return rb.build([batch + [i, m], batch + [j, m]], [batch + [i, j]], blocked=frozenset({m}))


class CdistGradOp(_DistBase):
    """The gradient of ``tensor.cdist`` for ``a`` from the output gradient and the distances
    (``aten._cdist_backward``; the gradient for ``b`` is this op on the transposed problem).

    ``%da = tensor.cdist_grad %g, %a, %b, %d {p = 2.0}
    : (tensor<5x4xf32>, tensor<5x6xf32>, tensor<4x6xf32>, tensor<5x4xf32>) -> tensor<5x6xf32>``

    Sharding rule: batch dims, ``a``'s rows and the coordinates parallel; ``b``'s rows a sum
    (each contributes its term); linear in the output gradient.
    """

    name = "tensor.cdist_grad"
    num_operands = 4
    num_results = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        g, a, b, d = tensor_types(operand_types, cls.name)
        _p(attrs)
        want = cdist_type(a, b)
        if g != want or d != want:
            raise InferError(f"gradient {g} and distances {d} must have the distances' type {want}")
        return [a]

    def torch_expr(self, ins: Sequence[str]) -> str:
        g, a, b, d = (f"{x}.contiguous()" for x in ins)
        return f"torch.ops.aten._cdist_backward({g}, {a}, {b}, {literal(self.p)}, {d})"

    def sharding_rule(self) -> OpShardingRule:
        a, b = self.operand(1).tensor_type, self.operand(2).tensor_type
        rb = RuleBuilder()
        batch = [rb.factor(s) for s in a.shape[:-2]]
        i, j, m = rb.factor(a.shape[-2]), rb.factor(b.shape[-2]), rb.factor(a.shape[-1])
        return rb.build([batch + [i, j], batch + [i, m], batch + [j, m], batch + [i, j]], [batch + [i, m]],
                        reductions=((j, "sum"),), partial_one=(0,))


def _pairs(n: int) -> int:
    return n * (n - 1) // 2


class PdistOp(_DistBase):
    """The distances of every pair of rows ``i < j`` of ``x``, in row-major pair order
    (``aten._pdist_forward``).

    ``%q = tensor.pdist %x {p = 2.0} : (tensor<5x6xf32>) -> tensor<10xf32>``
    """

    name = "tensor.pdist"
    num_operands = 1
    num_results = 1
    sharding_rule = replicated_rule   # every pair reads two rows anywhere in x

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (x,) = tensor_types(operand_types, cls.name)
        _p(attrs)
        require_float(x, "tensor")
        if x.rank != 2:
            raise InferError(f"expects a [N, M] tensor, got {x}")
        return [x.with_shape((_pairs(x.shape[0]),))]

    def torch_expr(self, ins: Sequence[str]) -> str:
        return f"torch.ops.aten._pdist_forward({ins[0]}, {literal(self.p)})"


class PdistGradOp(_DistBase):
    """The gradient of ``tensor.pdist`` for ``x`` from the output gradient and the distances
    (``aten._pdist_backward``).

    ``%dx = tensor.pdist_grad %g, %x, %q {p = 2.0} : (tensor<10xf32>, tensor<5x6xf32>, tensor<10xf32>)
    -> tensor<5x6xf32>``

    Sharding rule: the coordinate dim parallel (given the distances, each coordinate's gradient
    is its own); rows and pairs replicated; linear in the output gradient.
    """

    name = "tensor.pdist_grad"
    num_operands = 3
    num_results = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        g, x, d = tensor_types(operand_types, cls.name)
        _p(attrs)
        (want,) = PdistOp.infer_result_types([x], attrs)
        if g != want or d != want:
            raise InferError(f"gradient {g} and distances {d} must have the distances' type {want}")
        return [x]

    def torch_expr(self, ins: Sequence[str]) -> str:
        g, x, d = (f"{v}.contiguous()" for v in ins)
        return f"torch.ops.aten._pdist_backward({g}, {x}, {literal(self.p)}, {d})"

    def sharding_rule(self) -> OpShardingRule:
        g, x = self.operand(0).tensor_type, self.operand(1).tensor_type
        rb = RuleBuilder()
        k, n, m = rb.factor(g.shape[0]), rb.factor(x.shape[0]), rb.factor(x.shape[1])
        return rb.build([[k], [n, m], [k]], [[n, m]], blocked=frozenset({k, n}), partial_one=(0,))


class EmbeddingBagMaxOp(TensorOp):
    """Per bag, the elementwise maximum of its rows of ``weight`` and, per element, which row
    it came from (``aten._embedding_bag`` in mode ``max``). Bag ``b`` holds ``indices[offsets[b]:
    offsets[b + 1]]`` (the last bag runs to the end; with ``include_last_offset`` ``offsets``
    ends with ``len(indices)``); rows equal to ``padding_idx`` (>= 0) are skipped; an empty bag
    gives zeros and index 0; of equal maxima the first row wins.

    ``%o, %i = tensor.embedding_bag_max %w, %ids, %off {include_last_offset = false, padding_idx = -1}
    : (tensor<10x6xf32>, tensor<8xi64>, tensor<4xi64>) -> (tensor<4x6xf32>, tensor<4x6xi64>)``

    Sharding rule: the embedding dim parallel; the table's rows, the indices and the bags
    replicated.
    """

    name = "tensor.embedding_bag_max"
    num_operands = 3
    num_results = 2
    required_attrs = {"include_last_offset": BoolAttr, "padding_idx": IntegerAttr}
    kernel = "none"

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        w, ids, off = tensor_types(operand_types, cls.name)
        require_float(w, "weight")
        require_int(ids, "indices")
        require_int(off, "offsets")
        if w.rank != 2 or ids.rank != 1 or off.rank != 1 or ids.element_type != off.element_type:
            raise InferError(f"expects weight [V, D] and 1-D indices and offsets of one type, got {w}, {ids}, {off}")
        bags = off.shape[0] - (1 if bool_attr(attrs, "include_last_offset") else 0)
        if bags < 0 or int_attr(attrs, "padding_idx") < -1:
            raise InferError(f"no bags in offsets {off}, or a negative padding_idx other than -1 (none)")
        return [w.with_shape((bags, w.shape[1])), TensorType((bags, w.shape[1]), ids.element_type)]

    def torch_expr(self, ins: Sequence[str]) -> str:
        last = literal(bool_attr(self.attributes, "include_last_offset"))
        pad = literal(int_attr(self.attributes, "padding_idx"))
        call = f"torch.ops.aten._embedding_bag({ins[0]}, {ins[1]}, {ins[2]}, False, 2, False, None, {last}, {pad})"
        return f"{call}[0::3]"   # (output, max_indices)

    def sharding_rule(self) -> OpShardingRule:
        w, ids, off = (v.tensor_type for v in self.operands)
        rb = RuleBuilder()
        v, d, n, o = rb.factor(w.shape[0]), rb.factor(w.shape[1]), rb.factor(ids.shape[0]), rb.factor(off.shape[0])
        bags = rb.factor(self.results[0].tensor_type.shape[0])
        return rb.build([[v, d], [n], [o]], [[bags, d], [bags, d]], blocked=frozenset({v, n, o, bags}))


OPS = [CdistOp, CdistGradOp, PdistOp, PdistGradOp, EmbeddingBagMaxOp]
__all__ = [op.__name__ for op in OPS]
