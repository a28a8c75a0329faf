"""Torch implementations of ops that are more than one expression, as plain functions.

Op expressions call them as ``spmdc_ops.<name>(...)`` (:mod:`spmdc.dialects.pyexpr`): the
interpreter evaluates that text with this module in scope and generated programs import it
under the same name, so both run the same code. Only public torch APIs are used.
"""

from __future__ import annotations

from typing import Any


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
    return dq, dk, dv
