"""Handlers for scaled dot-product attention in every form torch produces: the public op,
the CPU flash kernel (forward and backward) that autograd uses on CPU.

They all become ``tensor.attention`` / ``tensor.attention_grad`` with the scale written
out (torch's default ``1/sqrt(E)``). Dropout inside attention is refused with its reason
until random numbers consistent with one device exist for it.
"""

from __future__ import annotations

import math

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, Unavailable, handles

A = "torch.aten."


def _attrs(e: Emitter, q, causal_i: int, scale_i: int, gqa_i: int | None, dropout_i: int) -> dict:
    p = e.const(dropout_i, 0.0)
    if p not in (None, 0, 0.0):
        raise e.unsupported(f"with dropout_p={p} (dropout inside attention) is not supported yet")
    scale = e.const(scale_i, None)
    attrs = {"scale": float(scale) if scale is not None else 1.0 / math.sqrt(q.tensor_type.shape[-1])}
    if e.const(causal_i, False):
        attrs["is_causal"] = True
    if gqa_i is not None and e.const(gqa_i, False):
        attrs["enable_gqa"] = True
    return attrs


def _mask(e: Emitter, i: int, q) -> list:
    raw = e.raw(i) if i < e.num_operands else None
    if raw is None:
        return []
    m = e.as_value(raw)
    return [m if m.tensor_type.element_type == "i1" else e.cast(m, q.tensor_type.element_type)]


@handles(A + "scaled_dot_product_attention")
def _sdpa(e: Emitter):
    # (q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    q, k, v = e.tensor(0), e.tensor(1), e.tensor(2)
    attrs = _attrs(e, q, causal_i=5, scale_i=6, gqa_i=7, dropout_i=4)
    return [e.create(T.AttentionOp, [q, k, v, *_mask(e, 3, q)], attrs)]


@handles(A + "_scaled_dot_product_flash_attention_for_cpu")
def _flash_cpu(e: Emitter):
    # (q, k, v, dropout_p, is_causal, *, attn_mask, scale) -> (out, logsumexp)
    q, k, v = e.tensor(0), e.tensor(1), e.tensor(2)
    attrs = _attrs(e, q, causal_i=4, scale_i=6, gqa_i=None, dropout_i=3)
    out = e.create(T.AttentionOp, [q, k, v, *_mask(e, 5, q)], attrs)
    return [out, Unavailable("log-sum-exp of attention")]


@handles(A + "_scaled_dot_product_flash_attention_for_cpu_backward")
def _flash_cpu_backward(e: Emitter):
    # (grad_out, q, k, v, out, logsumexp, dropout_p, is_causal, *, attn_mask, scale) -> (dq, dk, dv)
    do, q, k, v, o = (e.tensor(i) for i in range(5))
    attrs = _attrs(e, q, causal_i=7, scale_i=9, gqa_i=None, dropout_i=6)
    op = e.b.create(T.AttentionGradOp, [do, q, k, v, o, *_mask(e, 8, q)], attrs, location=e.loc)
    e.created.append(op)
    return list(op.results)
