"""Muon: orthogonalized momentum for matrices, AdamW for everything else (one optimizer).

    opt = Muon(model.parameters(), lr=0.02)                 # 2-D parameters: Muon, others: AdamW
    spmdc.compile(..., optimizer=("muon", {"lr": 0.02}))    # the same, by name

For a 2-D parameter ``W`` with gradient ``G`` (Keller Jordan's Muon, torch.optim.Muon's formulas)::

    B <- momentum * B + (1 - momentum) * G                  # B.lerp_(G, 1 - momentum)
    U <- G.lerp(B, momentum) if nesterov else B
    O <- NewtonSchulz5(U)                                    # ~ the orthogonal factor of U
    W <- W * (1 - lr * weight_decay) - lr * sqrt(max(1, rows / cols)) * O

Newton–Schulz needs the *whole* matrix: spmdc runs it where each matrix lives whole on one rank
(``fsdp_shard="whole"``: RaggedShard storage, no gather), or stores parameters whole when
their layout cuts matrices. Every other parameter (biases, norms: not 2-D) takes AdamW with
``adamw_lr`` (default ``lr``), ``adamw_betas``, ``adamw_eps``, ``adamw_weight_decay``.

The iteration runs in ``ns_dtype`` — float32 by default, where torch.optim.Muon uses bfloat16:
bfloat16 turns the last-bit differences of a reduction done in another order (a reduce-scatter
instead of one device's sum) into 1e-3 differences of the update, float32 keeps a sharded run
within 1e-5 of one device. Empty tensors (a rank's share of a matrix another rank holds) are
skipped. A param group with ``use_muon=False`` takes AdamW for its matrices too (embeddings,
heads).
"""

from __future__ import annotations

import math
from typing import Any

import torch

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(g: torch.Tensor, steps: int = 5, coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
                  eps: float = 1e-7, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The quintic Newton–Schulz iteration of Muon on a 2-D ``g``: ``U S' V^T`` with ``S'`` near
    the identity for ``g = U S V^T``; computed in ``dtype``, returned in ``g``'s dtype."""
    if g.dim() != 2:
        raise ValueError(f"Newton-Schulz orthogonalizes matrices, got a tensor of shape {tuple(g.shape)}")
    a, b, c = coefficients
    x = g.to(dtype)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):   # X <- a X + (b A + c A^2) X with A = X X^T
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return (x.T if tall else x).to(g.dtype)


class Muon(torch.optim.Optimizer):
    """Muon for matrices and AdamW for the rest (see the module doc)."""

    def __init__(self, params: Any, lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
                 weight_decay: float = 0.0, ns_steps: int = 5, ns_dtype: torch.dtype = torch.float32,
                 eps: float = 1e-7, adamw_lr: float | None = None, adamw_betas: tuple[float, float] = (0.9, 0.95),
                 adamw_eps: float = 1e-8, adamw_weight_decay: float = 0.0):
        for what, v in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay),
                        ("adamw_eps", adamw_eps), ("adamw_weight_decay", adamw_weight_decay)):
            if not v >= 0:
                raise ValueError(f"Muon: {what} must be >= 0, got {v}")
        if not 1 <= ns_steps < 100:
            raise ValueError(f"Muon: ns_steps must be in [1, 100), got {ns_steps}")
        if not all(0 <= beta < 1 for beta in adamw_betas):
            raise ValueError(f"Muon: adamw_betas must lie in [0, 1), got {adamw_betas}")
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, ns_steps=ns_steps,
                        ns_dtype=ns_dtype, eps=eps, adamw_lr=adamw_lr, adamw_betas=tuple(adamw_betas),
                        adamw_eps=adamw_eps, adamw_weight_decay=adamw_weight_decay, use_muon=True)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse or torch.is_complex(p):
                    raise RuntimeError("Muon takes dense real parameters")
                if group["use_muon"] and p.dim() == 2:
                    self._muon(p, group)
                else:
                    self._adamw(p, group)
        return loss

    def _muon(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        g = p.grad
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(g)
        buf = state["momentum_buffer"]
        if p.numel() == 0:
            return   # another rank holds this matrix
        buf.lerp_(g, 1 - group["momentum"])
        update = g.lerp(buf, group["momentum"]) if group["nesterov"] else buf
        update = newton_schulz(update, group["ns_steps"], eps=group["eps"], dtype=group["ns_dtype"])
        rows, cols = p.shape
        scale = math.sqrt(max(1.0, rows / cols))
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(update, alpha=-group["lr"] * scale)

    def _adamw(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        g = p.grad
        state = self.state[p]
        if "step" not in state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
        if p.numel() == 0:
            return
        lr = group["adamw_lr"] if group["adamw_lr"] is not None else group["lr"]
        beta1, beta2 = group["adamw_betas"]
        t = float(state["step"])
        p.mul_(1 - lr * group["adamw_weight_decay"])
        state["exp_avg"].lerp_(g, 1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (state["exp_avg_sq"] / (1 - beta2 ** t)).sqrt_().add_(group["adamw_eps"])
        p.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - beta1 ** t))
