"""Ordering along one dim: ``topk``, ``sort`` and the product scan ``cumprod``.

    %v, %i = tensor.topk %x {dim = 1, k = 2, largest = true, sorted = true}
               : (tensor<8x16xf32>) -> (tensor<8x2xf32>, tensor<8x2xi64>)
    %s, %p = tensor.sort %x {descending = false, dim = 1, stable = true}
               : (tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xi64>)
    %c = tensor.cumprod %x {dim = 1} : tensor<8x16xf32>

Each is the torch call eager PyTorch makes (``torch.topk``, ``torch.sort``, ``torch.cumprod``),
so ties come out in torch's order: a stable sort keeps equal elements in their order, an
unstable one (and ``topk``) orders them as torch's kernel on that device does.

Sharding: the dim the op works along needs replication (a piece's top-k or order is not a
part of the whole's); every other dim is parallel, for values and indices alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TensorOp, tensor_types
from spmdc.dialects.tensor.helpers import bool_attr, check_dim, int_attr
from spmdc.dialects.tensor.nn import DimOp
from spmdc.ir.attributes import BoolAttr, IntegerAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


def along_dim_rule(x: TensorType, dim: int, size: int, num_results: int) -> OpShardingRule:
    """``x`` -> results of ``x``'s shape with ``dim`` of ``size``: ``dim`` (on both sides) needs
    replication, every other dim is one parallel factor."""
    b = RuleBuilder()
    fx = [b.factor(s) for s in x.shape]
    if not fx:  # rank 0: nothing to shard
        return b.build([[]], [[] for _ in range(num_results)])
    out = b.factor(size) if size != x.shape[dim] else fx[dim]
    res = [out if d == dim else f for d, f in enumerate(fx)]
    return b.build([fx], [res for _ in range(num_results)], blocked=frozenset({fx[dim], out}))


class _OrderOp(TensorOp):
    """Base: one tensor in; values (its element type) and ``i64`` indices out, along ``dim``."""

    num_operands = 1
    num_results = 2
    kernel = "none"

    @property
    def dim(self) -> int:
        return int(self.attr_value("dim"))  # type: ignore[arg-type]

    @staticmethod
    def _check(a: TensorType, attrs) -> int:
        dim = int_attr(attrs, "dim")
        check_dim(dim, max(a.rank, 1))
        return dim

    def sharding_rule(self) -> OpShardingRule:
        t = self.operand(0).tensor_type
        size = self.results[0].tensor_type.shape[self.dim] if t.rank else 1
        return along_dim_rule(t, self.dim, size, 2)


class TopkOp(_OrderOp):
    """The ``k`` largest (``largest``) or smallest elements along ``dim`` and their indices
    (``torch.topk``; ``sorted``: in order, else in the kernel's order).

    ``%v, %i = tensor.topk %x {dim = 1, k = 2, largest = true, sorted = true}
               : (tensor<8x16xf32>) -> (tensor<8x2xf32>, tensor<8x2xi64>)``
    """

    name = "tensor.topk"
    required_attrs = {"k": IntegerAttr, "dim": IntegerAttr}
    optional_attrs = {"largest": BoolAttr, "sorted": BoolAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        dim, k = cls._check(a, attrs), int_attr(attrs, "k")
        n = a.shape[dim] if a.rank else 1
        if not 0 <= k <= n:
            raise InferError(f"k = {k} is out of range for a dim of size {n}")
        shape = a.shape[:dim] + (k,) + a.shape[dim + 1:] if a.rank else ()
        return [a.with_shape(shape), TensorType(shape, "i64")]

    def torch_expr(self, ins: Sequence[str]) -> str:
        k = literal(self.attr_value("k"))
        largest, ordered = bool_attr(self.attributes, "largest", True), bool_attr(self.attributes, "sorted", True)
        return (f"tuple(torch.topk({ins[0]}, {k}, dim={literal(self.dim)}, largest={literal(largest)}, "
                f"sorted={literal(ordered)}))")


class SortOp(_OrderOp):
    """Sorted values along ``dim`` (ascending, or ``descending``) and the permutation that
    sorts (``torch.sort``; ``stable`` keeps equal elements in their order).

    ``%s, %p = tensor.sort %x {descending = false, dim = 1, stable = true}
               : (tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xi64>)``
    """

    name = "tensor.sort"
    required_attrs = {"dim": IntegerAttr}
    optional_attrs = {"descending": BoolAttr, "stable": BoolAttr}

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        (a,) = tensor_types(operand_types, cls.name)
        cls._check(a, attrs)
        return [a, a.with_element_type("i64")]

    def torch_expr(self, ins: Sequence[str]) -> str:
        desc = literal(bool_attr(self.attributes, "descending"))
        dim = literal(self.dim)
        if "stable" in self.attributes:   # sort.stable (stable=False there is still that overload)
            return (f"tuple(torch.sort({ins[0]}, stable={literal(bool_attr(self.attributes, 'stable'))}, "
                    f"dim={dim}, descending={desc}))")
        return f"tuple(torch.sort({ins[0]}, {dim}, {desc}))"


class CumprodOp(DimOp):
    """Inclusive prefix product along ``dim``, in the operand's element type (the backward of
    ``prod`` multiplies a forward and a reversed exclusive scan).

    ``%r = tensor.cumprod %x {dim = 1} : tensor<8x16xf32>``
    """

    name = "tensor.cumprod"
    float_only = False
    kernel = "none"

    def torch_expr(self, ins: Sequence[str]) -> str:
        # keep the element type (torch would promote integer scans to int64)
        return f"torch.cumprod({ins[0]}, {literal(self.dim)}, dtype={ins[0]}.dtype)"


OPS = [TopkOp, SortOp, CumprodOp]
