"""A hand-written mixture-of-experts language model, written as MoE papers and torchtitan do:
a softmax router with top-k, normalised top-k weights, tokens sorted by expert, per-expert
counts (``histc``, as torchtitan and HuggingFace count them) and offsets (``cumsum``), a
grouped matmul over the sorted tokens, the
weighted outputs put back in token order (``index_add``) and a Switch-style load-balancing
auxiliary loss added to the cross-entropy.

``starve`` makes routing uneven on purpose: that expert's router logit gets a large negative
bias, so it receives no token at all (its weights get a zero gradient, the grouped matmul an
empty group). ``grouped`` picks the experts' matmul: ``"sorted"`` (a loop over the sorted
token segments written with masks, static shapes) or ``"dense"`` (every expert on every
token, weighted by the routing mask — the reference form of a per-expert loop).

Workloads: ``tests/models/moe.py:moe`` (4 experts, top-2, expert 3 starved) and ``moe_dense``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Experts(nn.Module):
    """Stacked expert weights stored ``[E, in, out]``, named as HuggingFace names them (so that
    presets recognise them; ``is_transposed`` says the ``[E, in, out]`` order, as HuggingFace's
    experts do): ``gate_up_proj`` (E, D, 2H) gate and up projections, ``down_proj`` (E, H, D)."""

    is_transposed = True

    def __init__(self, experts: int, dim: int, hidden: int):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.randn(experts, dim, 2 * hidden) * dim ** -0.5)
        self.down_proj = nn.Parameter(torch.randn(experts, hidden, dim) * hidden ** -0.5)

    def ffn(self, x: torch.Tensor, e: int) -> torch.Tensor:
        gate, up = (x @ self.gate_up_proj[e]).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ self.down_proj[e]


class MoELayer(nn.Module):
    def __init__(self, dim: int, hidden: int, experts: int, top_k: int, starve: int | None, grouped: str):
        super().__init__()
        self.top_k, self.num_experts, self.grouped = top_k, experts, grouped
        self.router = nn.Linear(dim, experts, bias=False)
        bias = torch.zeros(experts)
        if starve is not None:
            bias[starve] = -1e4
        self.register_buffer("router_bias", bias)
        self.experts = Experts(experts, dim, hidden)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, shape[-1])                                   # (T, D)
        probs = (self.router(x) + self.router_bias).softmax(dim=-1)   # (T, E)
        weights, ids = probs.topk(self.top_k, dim=-1)                 # (T, k)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        # Switch Transformer's auxiliary loss: E * sum_e (fraction of tokens to e) * (mean prob of e)
        counts = torch.histc(ids.reshape(-1).float(), bins=self.num_experts, min=0, max=self.num_experts - 1)
        frac = counts / ids.numel()
        aux = self.num_experts * (frac * probs.mean(dim=0)).sum()
        if self.grouped == "dense":
            out = torch.zeros_like(x)
            for e in range(self.num_experts):
                w_e = (weights * (ids == e)).sum(dim=-1, keepdim=True)    # (T, 1): 0 where not routed
                out = out + w_e * self.experts.ffn(x, e)
            return out.reshape(shape), aux
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)                              # (T*k,) sorted by expert
        token = order // self.top_k
        xs = x[token]
        ends = counts.long().cumsum(dim=0)
        starts = ends - counts.long()
        pos = torch.arange(xs.shape[0], device=x.device)
        ys = torch.zeros_like(xs)
        for e in range(self.num_experts):                             # one segment of the sorted tokens
            seg = ((pos >= starts[e]) & (pos < ends[e])).unsqueeze(-1)
            ys = ys + seg * self.experts.ffn(xs, e)
        ys = ys * weights.reshape(-1)[order].unsqueeze(-1)
        out = torch.zeros_like(x).index_add(0, token, ys)
        return out.reshape(shape), aux


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, moe: MoELayer):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True, bias=False)
        self.moe = moe

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.norm1(h)
        mask = torch.ones(h.shape[1], h.shape[1], dtype=torch.bool, device=h.device).triu(1)
        h = h + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]
        m, aux = self.moe(self.norm2(h))
        return h + m, aux


class MoELM(nn.Module):
    """Token embedding, ``layers`` attention + MoE blocks, LM head; returns (logits, aux loss)."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, experts: int = 4,
                 top_k: int = 2, hidden: int = 32, starve: int | None = 3, grouped: str = "sorted"):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, MoELayer(dim, hidden, experts, top_k, starve, grouped))
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.embed(ids)
        aux = torch.zeros((), device=ids.device)
        for blk in self.blocks:
            h, a = blk(h)
            aux = aux + a
        return self.head(self.norm(h)), aux


AUX_WEIGHT = 0.01


def moe_loss(out: tuple[torch.Tensor, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the next token plus the weighted load-balancing loss."""
    logits, aux = out
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)) + AUX_WEIGHT * aux


def _workload(grouped: str, batch: int = 4):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (batch, 8), generator=g)
    return MoELM(grouped=grouped), ((ids,), (ids.roll(-1, dims=1),)), moe_loss


def moe(batch: int = 4):
    return _workload("sorted", batch)


def moe_dense(batch: int = 4):
    return _workload("dense", batch)
