"""LoRA workloads: frozen base weights plus small trainable adapters (``tests/models/lora.py:mlp``).

``LoRALinear`` keeps the wrapped layer's ``weight``/``bias`` names (frozen: ``requires_grad=False``),
so presets lay the base weight out as they would the plain layer, and adds ``lora_A`` (``r x in``)
and ``lora_B`` (``out x r``): ``y = x W^T + b + (x A^T) B^T * scale``. The adapters are replicated
under ``megatron`` (their names are no projection's); the frozen weights' gradients are never computed.

* ``mlp``: a two-layer MLP (fc1 column-, fc2 row-parallel), LoRA on both;
* ``attention``: an attention block with ``F.scaled_dot_product_attention``, LoRA on q/k/v/o;
  ``bidirectional``: the same without the causal mask;
* ``gpt2``: the built-in gpt2-tiny with LoRA on every attention projection (q/k/v and c_proj).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from spmdc.examples import gpt2_tiny
from spmdc.examples.mlp import MLP  # the built-in mlp: fc1 (16 -> 32), gelu, fc2 (32 -> 8)


class LoRALinear(nn.Module):
    """``base(x) + (x A^T) B^T * alpha / r`` with ``base``'s parameters frozen."""

    def __init__(self, base: nn.Linear, r: int = 4, alpha: float = 8.0):
        super().__init__()
        self.weight = base.weight
        self.weight.requires_grad_(False)
        self.bias = base.bias
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) * 0.1)
        self.lora_B = nn.Parameter(torch.randn(base.out_features, r) * 0.1)   # nonzero: A gets a gradient
        self.scale = alpha / r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + (x @ self.lora_A.t()) @ self.lora_B.t() * self.scale


def wrap(model: nn.Module, names: tuple[str, ...], r: int = 4) -> nn.Module:
    """Replace every ``nn.Linear`` child called one of ``names`` by a :class:`LoRALinear`."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in names and isinstance(child, nn.Linear):
                setattr(module, name, LoRALinear(child, r))
    return model


class Attention(nn.Module):
    """Pre-norm self-attention (SDPA, causal unless told) and a linear head."""

    def __init__(self, dim: int = 32, heads: int = 4, out: int = 8, causal: bool = True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.norm = nn.LayerNorm(dim)
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.o_proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.norm(x)

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, c // self.heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(split(self.q_proj(h)), split(self.k_proj(h)), split(self.v_proj(h)),
                                           is_causal=self.causal)
        return self.head(x + self.o_proj(y.transpose(1, 2).reshape(b, t, c)))


def mlp(seed: int = 0):
    """Returns ``(model, ((x,), (target,)), F.mse_loss)``: LoRA on fc1 and fc2."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = wrap(MLP(), ("fc1", "fc2"))
        x, y = torch.randn(8, 16), torch.randn(8, 8)
    return model, ((x,), (y,)), F.mse_loss


def attention(seed: int = 0, causal: bool = True):
    """Returns ``(model, ((x,), (target,)), F.mse_loss)``: LoRA on q/k/v/o of an SDPA block."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = wrap(Attention(causal=causal), ("q_proj", "k_proj", "v_proj", "o_proj"))
        x, y = torch.randn(2, 8, 32), torch.randn(2, 8, 8)
    return model, ((x,), (y,)), F.mse_loss


def bidirectional(seed: int = 0):
    """:func:`attention` without the causal mask (an encoder's): under ``sp`` its backward meets
    result layouts no strategy of ``tensor.attention_grad`` yields (the planner falls back)."""
    return attention(seed, causal=False)


def gpt2(seed: int = 0):
    """gpt2-tiny with LoRA on its attention projections: ``(model, ((tokens,), (targets,)), lm_loss)``."""
    model, data, loss = gpt2_tiny.factory(seed=seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed + 1)
        for block in model.h:
            wrap(block.attn, ("q_proj", "k_proj", "v_proj", "c_proj"))
    return model, data, loss
