"""Torch implementations of ops that are more than one expression, as plain functions.

Op expressions call them as ``spmdc_ops.<name>(...)`` (:mod:`spmdc.dialects.pyexpr`): the
interpreter evaluates that text with this module in scope and generated programs import it
under the same name, so both run the same code. Only public torch APIs are used.
"""

from __future__ import annotations

from typing import Any

from spmdc.dialects.expert_helpers import (  # noqa: F401
    expert_combine,
    expert_counts,
    expert_dispatch,
    expert_route,
    grouped_matmul_slots,
    grouped_matmul_wgrad_slots,
)


def attention_probs(q: Any, k: Any, mask: Any, is_causal: bool, scale: float) -> Any:
    """``softmax(q k^T * scale + mask)`` in the element type of ``q`` (keys already grouped)."""
    import torch

    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        sq, sk = s.shape[-2], s.shape[-1]
        keep = torch.ones(sq, sk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, dim=-1)


def attention_backward(do: Any, q: Any, k: Any, v: Any, o: Any, mask: Any, *, is_causal: bool, scale: float,
                       enable_gqa: bool) -> tuple[Any, Any, Any]:
    """``(dq, dk, dv)`` of scaled dot-product attention, recomputing the probabilities ``p``:
    ``dv = p^T do``, ``ds = p * (do v^T - rowsum(do * o))``, ``dq = ds k * scale``,
    ``dk = ds^T q * scale``; grouped key heads sum the gradients of their query heads."""
    import torch

    groups = q.shape[-3] // k.shape[-3]
    if enable_gqa and groups > 1:
        kk, vv = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
    else:
        kk, vv = k, v
    p = attention_probs(q, kk, mask, is_causal, scale)
    dv = torch.matmul(p.transpose(-2, -1), do)
    dp = torch.matmul(do, vv.transpose(-2, -1))
    ds = p * (dp - (do * o).sum(dim=-1, keepdim=True))
    ds = torch.nan_to_num(ds)   # fully masked rows: p is nan in torch's forward, their gradient is zero
    dq = torch.matmul(ds, kk) * scale
    dk = torch.matmul(ds.transpose(-2, -1), q) * scale
    if enable_gqa and groups > 1:
        shape = k.shape[:-3] + (k.shape[-3], groups) + dk.shape[-2:]
        dk = dk.reshape(shape).sum(dim=-3)
        dv = dv.reshape(k.shape[:-3] + (k.shape[-3], groups) + dv.shape[-2:]).sum(dim=-3)
    elif k.shape[-3] == 1 and q.shape[-3] > 1:   # one key head broadcast to every query head
        dk, dv = dk.sum(dim=-3, keepdim=True), dv.sum(dim=-3, keepdim=True)
    return dq, dk, dv


# -- counter-based random numbers (tensor.random with a seed operand) ----------------------
# Philox-4x32-10 as Triton's tl.philox computes it (same constants, same word order), on
# int64 tensors holding uint32 values, so generated torch code and Triton kernels agree bitwise.
_PHILOX_KEY_A, _PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85
_PHILOX_ROUND_A, _PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57
_U32 = 0xFFFFFFFF


def _mul_u32(a: int, b: Any) -> tuple[Any, Any]:
    """``(hi, lo)`` 32-bit words of ``a * b`` for a constant ``a`` and uint32 tensor ``b``
    (split in 16-bit halves: every partial product fits in int64)."""
    b_lo, b_hi = b & 0xFFFF, b >> 16
    t = b_lo * a                       # < 2^48
    u = b_hi * a + (t >> 16)           # < 2^48 + 2^32
    return u >> 16, ((u & 0xFFFF) << 16) | (t & 0xFFFF)


def philox_4x32(seed: int, c0: Any, c1: Any, c2: Any, c3: Any, rounds: int = 10) -> tuple[Any, Any, Any, Any]:
    """Philox-4x32 on int64 tensors of uint32 values, keyed by the 64-bit ``seed``."""
    k0, k1 = seed & _U32, (seed >> 32) & _U32
    for _ in range(rounds):
        hi_b, lo_b = _mul_u32(_PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mul_u32(_PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _PHILOX_KEY_A) & _U32, (k1 + _PHILOX_KEY_B) & _U32
    return c0, c1, c2, c3


def uint32_to_uniform(x: Any) -> Any:
    """A uint32 word as a float32 in [0, 1), exactly as ``tl.rand`` converts it."""
    import torch

    signed = torch.where(x >= 2 ** 31, x - 2 ** 32, x)
    signed = torch.where(signed < 0, -signed - 1, signed).to(torch.int32)
    return signed.to(torch.float32) * torch.tensor(4.6566127342e-10, dtype=torch.float32)


def global_indices(shape: tuple[int, ...], global_shape: tuple[int, ...], offset: tuple[int, ...]) -> Any:
    """Row-major index in ``global_shape`` of every element of the piece ``shape`` at ``offset``."""
    import torch

    index = torch.zeros((), dtype=torch.int64)
    stride = 1
    for d in reversed(range(len(shape))):
        pos = torch.arange(offset[d], offset[d] + shape[d], dtype=torch.int64) * stride
        index = index + pos.reshape((-1,) + (1,) * (len(shape) - 1 - d))
        stride *= global_shape[d]
    return index.expand(shape)


def philox_random(seed: Any, stream: int, distribution: str, params: list, shape: tuple[int, ...],
                  global_shape: tuple[int, ...], offset: tuple[int, ...], dtype: Any) -> Any:
    """The piece ``shape`` at ``offset`` of a counter-based random tensor of ``global_shape``
    (see :mod:`spmdc.dialects.tensor.random`): it depends only on ``seed``, ``stream`` and each
    element's global index, never on how the tensor is split."""
    import torch

    key = int(seed)
    index = global_indices(shape, global_shape, offset)
    zeros = torch.zeros_like(index)
    w0, w1, _, _ = philox_4x32(key, index & _U32, index >> 32, zeros + (stream & _U32), zeros)
    if distribution == "randint":
        low, high = params
        return (low + torch.remainder(w0, high - low)).to(dtype)
    u = uint32_to_uniform(w0)
    if distribution == "uniform":
        low, high = params
        return (u * (high - low) + low).to(dtype)
    if distribution == "bernoulli":
        return (u < params[0]).to(dtype)
    if distribution == "normal":
        mean, std = params
        u1 = torch.clamp(u, min=1.0e-7)
        u2 = uint32_to_uniform(w1)
        z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(6.283185307179586 * u2)
        return (z * std + mean).to(dtype)
    raise ValueError(f"unknown distribution {distribution!r}")
