"""``llama-tiny``: the Llama architecture at toy size.

RMSNorm, rotary position embeddings (cos/sin from a non-persistent ``inv_freq`` buffer),
grouped-query attention (fewer key/value heads, expanded with ``repeat_kv``) with a causal
mask, a SwiGLU MLP and an untied LM head. The rotary tables and the mask take the activations' dtype
(bf16 under ``--mixed-precision bf16``), as HF Llama's do.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from spmdc.examples.gpt2_tiny import lm_loss


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[b, kv_heads, t, d] -> [b, kv_heads * n_rep, t, d]."""
    b, h, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


class Attention(nn.Module):
    def __init__(self, d_model: int, n_head: int, n_kv_head: int):
        super().__init__()
        self.n_head, self.n_kv_head, self.hd = n_head, n_kv_head, d_model // n_head
        self.q_proj = nn.Linear(d_model, n_head * self.hd, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_head * self.hd, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_head * self.hd, bias=False)
        self.o_proj = nn.Linear(n_head * self.hd, d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_head, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv_head, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv_head, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        mask = torch.full((t, t), float("-inf"), device=x.device, dtype=att.dtype).triu(1)
        att = F.softmax(att + mask, dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, hidden, bias=False)
        self.up_proj = nn.Linear(d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, n_kv_head: int, hidden: int):
        super().__init__()
        self.input_layernorm = RMSNorm(d_model)
        self.self_attn = Attention(d_model, n_head, n_kv_head)
        self.post_attention_layernorm = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, vocab_size: int = 128, d_model: int = 32, n_head: int = 4, n_kv_head: int = 2,
                 hidden: int = 64, n_layer: int = 2, rope_theta: float = 10000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList([Block(d_model, n_head, n_kv_head, hidden) for _ in range(n_layer)])
        self.norm = RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        hd = d_model // n_head
        inv_freq = 1.0 / (rope_theta ** (torch.arange(0, hd, 2).float() / hd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = torch.arange(idx.shape[1], dtype=torch.float32, device=idx.device)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        x = self.embed_tokens(idx)
        # in the activations' dtype (as HF Llama's rotary embedding): under a bf16 policy the float32
        # tables would turn q and k float32 and the attention's matmul with bf16 v would fail
        cos, sin = emb.cos()[None, None].to(x.dtype), emb.sin()[None, None].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def factory(batch: int = 2, seq: int = 8, vocab_size: int = 128, d_model: int = 32, n_head: int = 4,
            n_kv_head: int = 2, hidden: int = 64, n_layer: int = 2, seed: int = 0):
    """Returns ``(model, ((tokens,), (targets,)), lm_loss)``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Llama(vocab_size, d_model, n_head, n_kv_head, hidden, n_layer)
        tokens = torch.randint(0, vocab_size, (batch, seq))
        targets = torch.randint(0, vocab_size, (batch, seq))
    return model, ((tokens,), (targets,)), lm_loss
