"""Flash attention in Triton: ``tensor.attention`` and ``tensor.attention_grad`` on the triton target.

The generated program calls :func:`attention_forward` / :func:`attention_backward` (imported
as ``spmdc_attn``); each launches kernels specialised (``tl.constexpr``) on the op's flags:

* forward (one program per ``BLOCK_M`` queries of one batch and head): keys and values in
  ``BLOCK_N`` blocks with an online softmax (running max ``m``, running sum ``l``; the
  accumulator rescaled by ``exp(m_old - m_new)``), never the ``Sq x Sk`` score matrix;
* backward, FlashAttention-2 style, recomputing the probabilities from the row statistics:
  ``_attn_stats`` (log-sum-exp of every query row and ``delta = rowsum(do * o)``),
  ``_attn_bwd_kv`` (one program per key block and key head: ``dv = p^T do``, ``dk = ds^T q``,
  summed over the query heads that share the key head), ``_attn_bwd_q`` (``dq = ds k``).

Masks: ``is_causal`` (key ``j <= `` query ``i``), a boolean mask (true = attend) or an additive
mask, broadcast to ``[..., H, Sq, Sk]``; grouped (``enable_gqa``) and single broadcast key heads.
Scores and sums are fp32 (``tl.dot`` in IEEE precision). A query row that may attend to no key
gives zeros (forward and gradients), as torch's math attention does with ``_safe_softmax``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

BLOCK = 16


def _pow2(n: int) -> int:
    return max(16, 1 << max(0, (n - 1).bit_length()))


@triton.jit
def _tile(PTR, base, rows, cols, s_row, s_col, n_rows, n_cols):
    """The fp32 tile ``PTR[base + rows * s_row + cols * s_col]`` (zeros outside ``n_rows x n_cols``);
    ``rows`` / ``cols`` carry their broadcast axis (``[:, None]`` / ``[None, :]``)."""
    return tl.load(PTR + base + rows * s_row + cols * s_col, mask=(rows < n_rows) & (cols < n_cols),
                   other=0.0).to(tl.float32)


@triton.jit
def _scores(q, K, M, b, h, hk, offs_m, offs_n, offs_e, skb, skh, skn, ske, smb, smh, smm, smn, SQ, SK, E, scale,
            HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, CAUSAL: tl.constexpr):
    """``q k^T * scale`` (+ additive mask) for one query block and one key block, and which
    entries may be attended."""
    k = _tile(K, b * skb + hk * skh, offs_e[:, None], offs_n[None, :], ske, skn, E, SK)
    s = tl.dot(q, k, input_precision="ieee") * scale
    valid = (offs_m[:, None] < SQ) & (offs_n[None, :] < SK)
    if CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None])
    if HAS_MASK:
        mv = tl.load(M + b * smb + h * smh + offs_m[:, None] * smm + offs_n[None, :] * smn,
                     mask=(offs_m[:, None] < SQ) & (offs_n[None, :] < SK), other=0)
        if MASK_BOOL:
            valid = valid & (mv != 0)
        else:
            s = s + mv.to(tl.float32)
    return tl.where(valid, s, float("-inf")), valid


@triton.jit
def _attn_fwd(Q, K, V, M, OUT, sqb, sqh, sqm, sqe, skb, skh, skn, ske, svb, svh, svn, sve,
              smb, smh, smm, smn, sob, soh, som, soe, H, SQ, SK, E, EV, GROUP, scale,
              HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, CAUSAL: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e, offs_ev = tl.arange(0, BLOCK_E), tl.arange(0, BLOCK_EV)
    q = _tile(Q, b * sqb + h * sqh, offs_m[:, None], offs_e[None, :], sqm, sqe, SQ, E)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], dtype=tl.float32)
    for start in range(0, SK, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        s, valid = _scores(q, K, M, b, h, hk, offs_m, offs_n, offs_e, skb, skh, skn, ske, smb, smh, smm, smn,
                           SQ, SK, E, scale, HAS_MASK, MASK_BOOL, CAUSAL)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.where(valid, tl.exp(s - m_safe[:, None]), 0.0)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = _tile(V, b * svb + hk * svh, offs_n[:, None], offs_ev[None, :], svn, sve, SK, EV)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = tl.where(l_i[:, None] > 0, acc / tl.where(l_i > 0, l_i, 1.0)[:, None], 0.0)
    tl.store(OUT + b * sob + h * soh + offs_m[:, None] * som + offs_ev[None, :] * soe, out.to(OUT.dtype.element_ty),
             mask=(offs_m[:, None] < SQ) & (offs_ev[None, :] < EV))


@triton.jit
def _attn_stats(Q, K, M, DO, OUT, LSE, DELTA, sqb, sqh, sqm, sqe, skb, skh, skn, ske, smb, smh, smm, smn,
                sob, soh, som, soe, H, SQ, SK, E, EV, GROUP, scale,
                HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, CAUSAL: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    """Per query row: the log-sum-exp of its scores (-inf when it attends to nothing) and
    ``delta = sum(do * o)``. ``do`` and ``o`` share strides (the launcher makes them contiguous)."""
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e, offs_ev = tl.arange(0, BLOCK_E), tl.arange(0, BLOCK_EV)
    q = _tile(Q, b * sqb + h * sqh, offs_m[:, None], offs_e[None, :], sqm, sqe, SQ, E)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, SK, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        s, valid = _scores(q, K, M, b, h, hk, offs_m, offs_n, offs_e, skb, skh, skn, ske, smb, smh, smm, smn,
                           SQ, SK, E, scale, HAS_MASK, MASK_BOOL, CAUSAL)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_i = l_i * tl.exp(m_i - m_safe) + tl.sum(tl.where(valid, tl.exp(s - m_safe[:, None]), 0.0), axis=1)
        m_i = m_new
    lse = tl.where(l_i > 0, m_i + tl.log(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
    rows = pid_bh * SQ + offs_m
    tl.store(LSE + rows, lse, mask=offs_m < SQ)
    do = _tile(DO, b * sob + h * soh, offs_m[:, None], offs_ev[None, :], som, soe, SQ, EV)
    o = _tile(OUT, b * sob + h * soh, offs_m[:, None], offs_ev[None, :], som, soe, SQ, EV)
    tl.store(DELTA + rows, tl.sum(do * o, axis=1), mask=offs_m < SQ)


@triton.jit
def _probs(s, valid, lse):
    lse_safe = tl.where(lse == float("-inf"), 0.0, lse)
    return tl.where(valid & (lse[:, None] > float("-inf")), tl.exp(s - lse_safe[:, None]), 0.0)


@triton.jit
def _attn_bwd_kv(Q, K, V, M, DO, LSE, DELTA, DK, DV, sqb, sqh, sqm, sqe, skb, skh, skn, ske, svb, svh, svn, sve,
                 smb, smh, smm, smn, sob, soh, som, soe, H, HK, SQ, SK, E, EV, GROUP, scale,
                 HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, CAUSAL: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    """One key block of one key head: ``dk``, ``dv`` summed over its query heads and all queries."""
    pid_n, pid_bk = tl.program_id(0), tl.program_id(1)
    b, hk = pid_bk // HK, pid_bk % HK
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_e, offs_ev = tl.arange(0, BLOCK_E), tl.arange(0, BLOCK_EV)
    v_t = _tile(V, b * svb + hk * svh, offs_ev[:, None], offs_n[None, :], sve, svn, EV, SK)   # [EV, N]
    dk = tl.zeros([BLOCK_N, BLOCK_E], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_EV], dtype=tl.float32)
    for g in range(0, GROUP):
        h = hk * GROUP + g
        for start in range(0, SQ, BLOCK_M):
            offs_m = start + tl.arange(0, BLOCK_M)
            q = _tile(Q, b * sqb + h * sqh, offs_m[:, None], offs_e[None, :], sqm, sqe, SQ, E)
            s, valid = _scores(q, K, M, b, h, hk, offs_m, offs_n, offs_e, skb, skh, skn, ske, smb, smh, smm, smn,
                               SQ, SK, E, scale, HAS_MASK, MASK_BOOL, CAUSAL)
            rows = (b * H + h) * SQ + offs_m
            lse = tl.load(LSE + rows, mask=offs_m < SQ, other=float("-inf"))
            delta = tl.load(DELTA + rows, mask=offs_m < SQ, other=0.0)
            p = _probs(s, valid, lse)
            do = _tile(DO, b * sob + h * soh, offs_m[:, None], offs_ev[None, :], som, soe, SQ, EV)
            dv += tl.dot(tl.trans(p), do, input_precision="ieee")
            dp = tl.dot(do, v_t, input_precision="ieee")
            ds = p * (dp - delta[:, None])
            dk += tl.dot(tl.trans(ds), q, input_precision="ieee") * scale
    io_k = (offs_n[:, None] < SK) & (offs_e[None, :] < E)
    tl.store(DK + (pid_bk * SK + offs_n[:, None]) * E + offs_e[None, :], dk.to(DK.dtype.element_ty), mask=io_k)
    io_v = (offs_n[:, None] < SK) & (offs_ev[None, :] < EV)
    tl.store(DV + (pid_bk * SK + offs_n[:, None]) * EV + offs_ev[None, :], dv.to(DV.dtype.element_ty), mask=io_v)


@triton.jit
def _attn_bwd_q(Q, K, V, M, DO, LSE, DELTA, DQ, sqb, sqh, sqm, sqe, skb, skh, skn, ske, svb, svh, svn, sve,
                smb, smh, smm, smn, sob, soh, som, soe, H, SQ, SK, E, EV, GROUP, scale,
                HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, CAUSAL: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    """One query block of one head: ``dq = sum over key blocks of ds k * scale``."""
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e, offs_ev = tl.arange(0, BLOCK_E), tl.arange(0, BLOCK_EV)
    q = _tile(Q, b * sqb + h * sqh, offs_m[:, None], offs_e[None, :], sqm, sqe, SQ, E)
    do = _tile(DO, b * sob + h * soh, offs_m[:, None], offs_ev[None, :], som, soe, SQ, EV)
    rows = pid_bh * SQ + offs_m
    lse = tl.load(LSE + rows, mask=offs_m < SQ, other=float("-inf"))
    delta = tl.load(DELTA + rows, mask=offs_m < SQ, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_E], dtype=tl.float32)
    for start in range(0, SK, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        s, valid = _scores(q, K, M, b, h, hk, offs_m, offs_n, offs_e, skb, skh, skn, ske, smb, smh, smm, smn,
                           SQ, SK, E, scale, HAS_MASK, MASK_BOOL, CAUSAL)
        p = _probs(s, valid, lse)
        v_t = _tile(V, b * svb + hk * svh, offs_ev[:, None], offs_n[None, :], sve, svn, EV, SK)
        ds = p * (tl.dot(do, v_t, input_precision="ieee") - delta[:, None])
        k = _tile(K, b * skb + hk * skh, offs_n[:, None], offs_e[None, :], skn, ske, SK, E)
        dq += tl.dot(ds, k, input_precision="ieee") * scale
    tl.store(DQ + (pid_bh * SQ + offs_m[:, None]) * E + offs_e[None, :], dq.to(DQ.dtype.element_ty),
             mask=(offs_m[:, None] < SQ) & (offs_e[None, :] < E))


# -- launchers ------------------------------------------------------------------------------------
def _flat(x: Any, batch: int) -> Any:
    """``[..., H, S, D]`` as ``[B, H, S, D]`` (a view when the batch dims allow it)."""
    return x.reshape((batch,) + tuple(x.shape[-3:]))


def _prepare(q: Any, k: Any, v: Any, mask: Any) -> tuple[Any, ...]:
    batch = math.prod(q.shape[:-3])
    h, sq, e = q.shape[-3:]
    hk, sk, ev = k.shape[-3], k.shape[-2], v.shape[-1]
    q4, k4, v4 = _flat(q, batch), _flat(k, batch), _flat(v, batch)
    if mask is not None:
        m4 = mask.expand(tuple(q.shape[:-1]) + (sk,)).reshape(batch, h, sq, sk)
        m_strides = m4.stride()
        if m4.dtype == torch.bool:
            m4 = m4.to(torch.int8)
            m_strides = m4.stride()
    else:
        m4, m_strides = q4, (0, 0, 0, 0)
    return batch, h, hk, sq, sk, e, ev, q4, k4, v4, m4, m_strides


def _consts(mask: Any, is_causal: bool, e: int, ev: int) -> dict[str, Any]:
    return {"HAS_MASK": mask is not None, "MASK_BOOL": mask is not None and mask.dtype == torch.bool,
            "CAUSAL": bool(is_causal), "BLOCK_M": BLOCK, "BLOCK_N": BLOCK, "BLOCK_E": _pow2(e),
            "BLOCK_EV": _pow2(ev)}


def attention_forward(q: Any, k: Any, v: Any, mask: Any, *, is_causal: bool, scale: float) -> Any:
    """``tensor.attention``: softmax(q k^T * scale + mask) v, one fused kernel."""
    batch, h, hk, sq, sk, e, ev, q4, k4, v4, m4, ms = _prepare(q, k, v, mask)
    out = torch.empty((batch, h, sq, ev), dtype=q.dtype, device=q.device)
    if out.numel():
        grid = (triton.cdiv(sq, BLOCK), batch * h)
        _attn_fwd[grid](q4, k4, v4, m4, out, *q4.stride(), *k4.stride(), *v4.stride(), *ms, *out.stride(),
                        h, sq, sk, e, ev, h // hk, float(scale), **_consts(mask, is_causal, e, ev))
    return out.reshape(tuple(q.shape[:-1]) + (ev,))


def attention_backward(do: Any, q: Any, k: Any, v: Any, o: Any, mask: Any, *, is_causal: bool, scale: float,
                       enable_gqa: bool = False) -> tuple[Any, Any, Any]:
    """``tensor.attention_grad``: ``(dq, dk, dv)`` with the probabilities recomputed."""
    batch, h, hk, sq, sk, e, ev, q4, k4, v4, m4, ms = _prepare(q, k, v, mask)
    do4 = _flat(do, batch).contiguous()
    o4 = _flat(o, batch).contiguous()
    consts = _consts(mask, is_causal, e, ev)
    group = h // hk
    lse = torch.empty((batch * h * sq,), dtype=torch.float32, device=q.device)
    delta = torch.empty_like(lse)
    dq = torch.empty((batch, h, sq, e), dtype=q.dtype, device=q.device)
    dk = torch.empty((batch, hk, sk, e), dtype=k.dtype, device=k.device)
    dv = torch.empty((batch, hk, sk, ev), dtype=v.dtype, device=v.device)
    if q.numel() and k.numel():
        grid_q = (triton.cdiv(sq, BLOCK), batch * h)
        _attn_stats[grid_q](q4, k4, m4, do4, o4, lse, delta, *q4.stride(), *k4.stride(), *ms, *do4.stride(),
                            h, sq, sk, e, ev, group, float(scale), **consts)
        _attn_bwd_kv[(triton.cdiv(sk, BLOCK), batch * hk)](
            q4, k4, v4, m4, do4, lse, delta, dk, dv, *q4.stride(), *k4.stride(), *v4.stride(), *ms, *do4.stride(),
            h, hk, sq, sk, e, ev, group, float(scale), **consts)
        _attn_bwd_q[grid_q](q4, k4, v4, m4, do4, lse, delta, dq, *q4.stride(), *k4.stride(), *v4.stride(), *ms,
                            *do4.stride(), h, sq, sk, e, ev, group, float(scale), **consts)
    else:
        dq.zero_(), dk.zero_(), dv.zero_()
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
