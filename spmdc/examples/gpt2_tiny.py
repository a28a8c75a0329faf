"""``gpt2-tiny``: the GPT-2 architecture at toy size.

Learned token and position embeddings, pre-LayerNorm blocks with causal softmax attention
(a fused ``c_attn`` projection split into q, k, v) and a tanh-GELU MLP, a final LayerNorm and
an LM head tied to the token embedding. ``factory(n_layer=12, d_model=768, n_head=12)`` gives
GPT-2 small's shape.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, block_size: int):
        super().__init__()
        self.n_head = n_head
        # q/k/v as three projections (GPT-2's fused c_attn split in three) so that
        # Megatron column-parallelism shards heads without an interleaved layout.
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("causal_mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        hd = c // self.n_head
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.causal_mask[:, :, :t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, block_size: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, block_size)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, vocab_size: int = 128, block_size: int = 16, d_model: int = 32, n_head: int = 4,
                 n_layer: int = 2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.h = nn.ModuleList([Block(d_model, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for _name, p in self.named_parameters():  # GPT-2's init: N(0, 0.02)
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over all positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def factory(batch: int = 2, seq: int = 8, vocab_size: int = 128, block_size: int = 16, d_model: int = 32,
            n_head: int = 4, n_layer: int = 2, seed: int = 0):
    """Returns ``(model, ((tokens,), (targets,)), lm_loss)``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = GPT2(vocab_size, max(block_size, seq), d_model, n_head, n_layer)
        tokens = torch.randint(0, vocab_size, (batch, seq))
        targets = torch.randint(0, vocab_size, (batch, seq))
    return model, ((tokens,), (targets,)), lm_loss
