"""Scaled dot-product attention as one op, and its gradient.

    %o = tensor.attention %q, %k, %v {is_causal = true, scale = 0.25}
           : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
    %o = tensor.attention %q, %k, %v, %mask {scale = 0.25} : (..., tensor<2x1x8x8xi1>) -> tensor<2x4x8x16xf32>
    %dq, %dk, %dv = tensor.attention_grad %do, %q, %k, %v, %o {is_causal = true, scale = 0.25}
           : (...) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)

``q`` is ``[..., H, Sq, E]``, ``k`` ``[..., Hk, Sk, E]``, ``v`` ``[..., Hk, Sk, Ev]``; an optional
mask (``i1``: true = attend; or additive, of ``q``'s element type) broadcasts to
``[..., H, Sq, Sk]``. ``is_causal`` masks key ``j > i`` for query ``i`` (top-left aligned, as
torch does); ``scale`` multiplies ``q k^T`` (its default in torch, ``1/sqrt(E)``, is written out
by the frontend); ``enable_gqa`` lets ``H`` be a multiple of ``Hk`` (query head ``i`` reads key
head ``i // (H / Hk)``); ``Hk = 1`` broadcasts one key head to every query head (multi-query).
Dropout inside attention is not part of the op: SDPA with dropout arrives as PyTorch's math form
(matmuls, softmax, ``native_dropout``), whose mask is the draw eager PyTorch makes.

Sharding rule: batch dims and heads are parallel factors (Megatron shards heads); the
query sequence is parallel too (``k``/``v`` replicated on that axis) unless ``is_causal``,
whose mask depends on global positions; the key sequence and the head dims need
replication. In the gradient the query sequence is a sum for ``dk``/``dv`` (each rank's
queries contribute a part: ``P(sum)``) and parallel for ``dq``. With grouped heads
(``H != Hk``) the heads need replication.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from spmdc.dialects.pyexpr import literal
from spmdc.dialects.shard.rules import OpShardingRule, RuleBuilder
from spmdc.dialects.tensor.base import TensorOp, broadcast_shapes, same_element_type, tensor_types
from spmdc.dialects.tensor.helpers import bool_attr
from spmdc.ir.attributes import Attribute, BoolAttr, FloatAttr
from spmdc.ir.core import InferError
from spmdc.ir.types import TensorType


def _check(types: Sequence[TensorType], attrs: dict[str, Attribute]) -> tuple[TensorType, ...]:
    """Validate q, k, v (and mask); returns the result type ``[..., H, Sq, Ev]``."""
    if len(types) not in (3, 4):
        raise InferError(f"expects q, k, v and an optional mask, got {len(types)} operands")
    q, k, v = types[:3]
    if min(q.rank, k.rank, v.rank) < 3 or not q.rank == k.rank == v.rank:
        raise InferError(f"q, k, v must have one rank >= 3 ([..., heads, seq, dim]), got {q}, {k}, {v}")
    if not q.is_float:
        raise InferError(f"expects floating-point q, k, v, got {q.element_type}")
    same_element_type([q, k, v])
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or k.shape[-3] != v.shape[-3]:
        raise InferError(f"q {q}, k {k} and v {v} do not fit: need q[..., E] = k[..., E] and k, v with one "
                         "number of heads and keys")
    if q.shape[:-3] != k.shape[:-3] or q.shape[:-3] != v.shape[:-3]:
        raise InferError(f"batch dims of q {q}, k {k} and v {v} differ")
    h, hk = q.shape[-3], k.shape[-3]
    gqa = bool_attr(attrs, "enable_gqa")
    if h != hk and hk != 1 and not (gqa and h % hk == 0):
        raise InferError(f"{h} query heads and {hk} key heads: needs one key head (broadcast), or enable_gqa "
                         "and a multiple")
    if len(types) == 4:
        m = types[3]
        full = q.shape[:-1] + (k.shape[-2],)
        try:
            ok = broadcast_shapes(m.shape, full) == full
        except InferError:
            ok = False
        if not ok or m.element_type not in ("i1", q.element_type):
            raise InferError(f"mask {m} must be i1 or {q.element_type} and broadcast to {list(full)}")
    return (TensorType(q.shape[:-1] + (v.shape[-1],), q.element_type),)


class _AttentionBase(TensorOp):
    optional_attrs = {"is_causal": BoolAttr, "scale": FloatAttr, "enable_gqa": BoolAttr}
    kernel = "none"

    @property
    def is_causal(self) -> bool:
        return bool_attr(self.attributes, "is_causal")

    @property
    def gqa(self) -> bool:
        return bool_attr(self.attributes, "enable_gqa")

    def scale(self, q: TensorType) -> float:
        s = self.attr_value("scale")
        return float(s) if s is not None else 1.0 / math.sqrt(q.shape[-1])

    def _factors(self, q_i: int, k_i: int, v_i: int, mask_i: int | None, out_dims: Sequence[str]
                 ) -> tuple[RuleBuilder, dict[str, Any], list[list[int | None]]]:
        """Factors of q, k, v (and mask): batch..., h, sq, sk, e, ev; operands mapped to them."""
        q, k, v = (self.operand(i).tensor_type for i in (q_i, k_i, v_i))
        b = RuleBuilder()
        f: dict[str, Any] = {"batch": [b.factor(s) for s in q.shape[:-3]]}
        f["h"] = b.factor(q.shape[-3])
        if q.shape[-3] == k.shape[-3]:
            f["hk"] = f["h"]
        elif k.shape[-3] == 1:          # one key head broadcast to every query head (multi-query)
            f["hk"] = None
        else:
            f["hk"] = b.factor(k.shape[-3])
        f["sq"], f["sk"] = b.factor(q.shape[-2]), b.factor(k.shape[-2])
        f["e"], f["ev"] = b.factor(q.shape[-1]), b.factor(v.shape[-1])
        dims = {"q": f["batch"] + [f["h"], f["sq"], f["e"]], "k": f["batch"] + [f["hk"], f["sk"], f["e"]],
                "v": f["batch"] + [f["hk"], f["sk"], f["ev"]], "o": f["batch"] + [f["h"], f["sq"], f["ev"]]}
        operands: list[list[int | None]] = [list(dims[name]) for name in out_dims]
        if mask_i is not None and mask_i < len(self.operands):
            m = self.operand(mask_i).tensor_type
            full = f["batch"] + [f["h"], f["sq"], f["sk"]]
            full_shape = q.shape[:-1] + (k.shape[-2],)
            off = len(full) - m.rank
            operands.append([None if s == 1 and full_shape[off + i] != 1 else full[off + i]
                             for i, s in enumerate(m.shape)])
        return b, f, operands

    def _blocked(self, f: dict[str, Any]) -> set[int]:
        blocked = {f["sk"], f["e"], f["ev"]}
        if f["hk"] is not None and f["h"] != f["hk"]:        # grouped heads: keep them whole
            blocked |= {f["h"], f["hk"]}
        if self.is_causal:           # the causal mask depends on global positions
            blocked.add(f["sq"])
        return blocked


class AttentionOp(_AttentionBase):
    """``softmax(q k^T * scale + mask) v`` per head (``F.scaled_dot_product_attention``).

    ``%o = tensor.attention %q, %k, %v {is_causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>,
    tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>``
    """

    name = "tensor.attention"
    num_results = 1

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        return list(_check(tensor_types(operand_types, cls.name), attrs))

    def torch_expr(self, ins: Sequence[str]) -> str:
        mask = ins[3] if len(ins) > 3 else "None"
        return (f"torch.nn.functional.scaled_dot_product_attention({ins[0]}, {ins[1]}, {ins[2]}, attn_mask={mask}, "
                f"dropout_p=0.0, is_causal={literal(self.is_causal)}, "
                f"scale={literal(self.scale(self.operand(0).tensor_type))}, enable_gqa={literal(self.gqa)})")

    def triton_call(self, ins: Sequence[str]) -> str:
        """The triton target: a flash-attention kernel (:mod:`spmdc.codegen.triton_attention`)."""
        mask = ins[3] if len(ins) > 3 else "None"
        return (f"spmdc_attn.attention_forward({ins[0]}, {ins[1]}, {ins[2]}, {mask}, "
                f"is_causal={literal(self.is_causal)}, scale={literal(self.scale(self.operand(0).tensor_type))})")

    def sharding_rule(self) -> OpShardingRule:
        b, f, operands = self._factors(0, 1, 2, 3, ("q", "k", "v"))
        out = f["batch"] + [f["h"], f["sq"], f["ev"]]
        return b.build(operands, [out], blocked=frozenset(self._blocked(f)))


class AttentionGradOp(_AttentionBase):
    """The gradient of ``tensor.attention``: ``(dq, dk, dv)`` from the output gradient ``do``, the
    forward's ``q``, ``k``, ``v``, output ``o`` and mask (recomputes the probabilities).

    ``%dq, %dk, %dv = tensor.attention_grad %do, %q, %k, %v, %o {scale = 0.35} : (...) -> (...)``
    """

    name = "tensor.attention_grad"
    num_results = 3

    @classmethod
    def infer_result_types(cls, operand_types, attrs):
        ts = tensor_types(operand_types, cls.name)
        if len(ts) not in (5, 6):
            raise InferError(f"expects do, q, k, v, o and an optional mask, got {len(ts)} operands")
        (o,) = _check(ts[1:4] + ts[5:], attrs)
        if ts[0] != o or ts[4] != o:
            raise InferError(f"the output gradient {ts[0]} and the output {ts[4]} must have the output's type {o}")
        return [ts[1], ts[2], ts[3]]

    def torch_expr(self, ins: Sequence[str]) -> str:
        mask = ins[5] if len(ins) > 5 else "None"
        return (f"spmdc_ops.attention_backward({', '.join(ins[:5])}, {mask}, "
                f"is_causal={literal(self.is_causal)}, scale={literal(self.scale(self.operand(1).tensor_type))}, "
                f"enable_gqa={literal(self.gqa)})")

    def triton_call(self, ins: Sequence[str]) -> str:
        """The triton target: FlashAttention-2 backward kernels (:mod:`spmdc.codegen.triton_attention`)."""
        mask = ins[5] if len(ins) > 5 else "None"
        return (f"spmdc_attn.attention_backward({', '.join(ins[:5])}, {mask}, is_causal={literal(self.is_causal)}, "
                f"scale={literal(self.scale(self.operand(1).tensor_type))}, enable_gqa={literal(self.gqa)})")

    def sharding_rule(self) -> OpShardingRule:
        b, f, operands = self._factors(1, 2, 3, 5, ("o", "q", "k", "v", "o"))
        results = [f["batch"] + [f["h"], f["sq"], f["e"]], f["batch"] + [f["hk"], f["sk"], f["e"]],
                   f["batch"] + [f["hk"], f["sk"], f["ev"]]]
        # dk, dv sum over the queries (and over the query heads sharing one broadcast key head)
        reductions = [(f["sq"], "sum")] + ([(f["h"], "sum")] if f["hk"] is None else [])
        return b.build(operands, results, blocked=frozenset(self._blocked(f)), reductions=tuple(reductions))


OPS = [AttentionOp, AttentionGradOp]
