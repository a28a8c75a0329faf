"""A ViT-style encoder with a packed ``qkv`` projection (timm's ``Attention``): one
``Linear(d, 3d)`` whose output is viewed ``[B, N, 3, heads, head_dim]``, permuted and unbound
into q, k, v — the layout ``megatron`` shards ``SS(0, 3)`` (by heads within q, k and v).

``tests/models/packed_qkv.py:vit`` — ``(model, ((x,), (target,)), mse_loss)``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Encoder(nn.Module):
    def __init__(self, dim: int = 32, num_heads: int = 4, depth: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, num_heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


def vit(batch: int = 2, tokens: int = 8, dim: int = 32, num_heads: int = 4, depth: int = 2, seed: int = 0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Encoder(dim, num_heads, depth)
        x, y = torch.randn(batch, tokens, dim), torch.randn(batch, tokens, dim)
    return model, ((x,), (y,)), F.mse_loss
