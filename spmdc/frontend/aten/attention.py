"""Handlers for scaled dot-product attention in every form torch produces: the public op,
the CPU flash kernel (forward and backward) that autograd uses on CPU, and the CUDA flash
and memory-efficient kernels with their backward (a model captured on a GPU).

They all become ``tensor.attention`` / ``tensor.attention_grad`` with the scale written
out (torch's default ``1/sqrt(E)``). SDPA with dropout arrives decomposed (PyTorch's math
form, whose ``native_dropout`` draws eager's mask); a fused kernel with dropout is refused with
its reason.
"""

from __future__ import annotations

import math

from spmdc.dialects import tensor as T
from spmdc.frontend.aten.base import Emitter, Unavailable, handles

A = "torch.aten."


def _attrs(e: Emitter, q, causal_i: int, scale_i: int, gqa_i: int | None, dropout_i: int) -> dict:
    p = e.const(dropout_i, 0.0)
    if p not in (None, 0, 0.0):
        raise e.unsupported(f"with dropout_p={p}: a fused attention kernel's dropout draws from its own "
                            "Philox stream, which spmdc does not reproduce (F.scaled_dot_product_attention with "
                            "dropout is captured in its math form instead)")
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


# CUDA kernels (a model captured on a GPU; their meta functions also let them be traced on CPU)
@handles(A + "_scaled_dot_product_efficient_attention")
def _efficient(e: Emitter):
    # (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, *, scale)
    #   -> (out, logsumexp, philox_seed, philox_offset)
    q, k, v = e.tensor(0), e.tensor(1), e.tensor(2)
    attrs = _attrs(e, q, causal_i=6, scale_i=7, gqa_i=None, dropout_i=5)
    out = e.create(T.AttentionOp, [q, k, v, *_mask(e, 3, q)], attrs)
    return [out, Unavailable("log-sum-exp of attention"), Unavailable("attention's dropout seed"),
            Unavailable("attention's dropout offset")]


@handles(A + "_scaled_dot_product_efficient_attention_backward")
def _efficient_backward(e: Emitter):
    # (grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask,
    #  is_causal, *, scale) -> (dq, dk, dv, d_attn_bias)
    do, q, k, v, o = (e.tensor(i) for i in (0, 1, 2, 3, 5))
    attrs = _attrs(e, q, causal_i=11, scale_i=12, gqa_i=None, dropout_i=9)
    op = e.b.create(T.AttentionGradOp, [do, q, k, v, o, *_mask(e, 4, q)], attrs, location=e.loc)
    e.created.append(op)
    return [*op.results, Unavailable("gradient of the attention bias (a learned bias is not supported)")]


@handles(A + "_scaled_dot_product_flash_attention")
def _flash_cuda(e: Emitter):
    # (q, k, v, dropout_p, is_causal, return_debug_mask, *, scale)
    #   -> (out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, rng_state, unused, debug_attn_mask)
    q, k, v = e.tensor(0), e.tensor(1), e.tensor(2)
    attrs = _attrs(e, q, causal_i=4, scale_i=6, gqa_i=None, dropout_i=3)
    out = e.create(T.AttentionOp, [q, k, v], attrs)
    return [out] + [Unavailable("flash attention's bookkeeping output")] * 8


@handles(A + "_scaled_dot_product_flash_attention_backward")
def _flash_cuda_backward(e: Emitter):
    # (grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
    #  philox_seed, philox_offset, *, scale) -> (dq, dk, dv)
    do, q, k, v, o = (e.tensor(i) for i in range(5))
    attrs = _attrs(e, q, causal_i=11, scale_i=14, gqa_i=None, dropout_i=10)
    op = e.b.create(T.AttentionGradOp, [do, q, k, v, o], attrs, location=e.loc)
    e.created.append(op)
    return list(op.results)
