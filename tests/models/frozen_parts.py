"""Models in training mode with frozen submodules in eval mode, as users fine-tune them; also a
workload for ``spmdc run tests/models/frozen_parts.py:factory --check``.

``FrozenParts``: a frozen encoder (``nn.Dropout(0.5)`` in eval, parameters with
``requires_grad=False``), a frozen BatchNorm (eval: running statistics, never updated; its affine
weights still train) and a trainable head. ``Wrapped``: a tiny HuggingFace GPT-2 backbone left in
eval mode (as ``from_pretrained`` leaves it; dropout 0.1 in its config) inside a wrapper in
training mode with a classification head.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, d_in: int = 8, d: int = 16):
        super().__init__()
        self.fc = nn.Linear(d_in, d)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(F.gelu(self.fc(x)))


class Head(nn.Module):
    """fc1 / fc2: the megatron preset's column- and row-parallel pair."""

    def __init__(self, d: int = 16, d_out: int = 4):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(d, 2 * d), nn.Tanh(), nn.Linear(2 * d, d_out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class FrozenParts(nn.Module):
    def __init__(self, d_in: int = 8, d: int = 16, d_out: int = 4):
        super().__init__()
        self.enc = Encoder(d_in, d)
        self.bn = nn.BatchNorm1d(d)
        self.head = Head(d, d_out)

    def forward(self, x):
        return self.head(self.bn(self.enc(x)))


def frozen_parts(seed: int = 0) -> FrozenParts:
    """A FrozenParts in training mode whose ``enc`` and ``bn`` are in eval mode (``enc`` frozen),
    BatchNorm running statistics away from (0, 1) so that eval and training mode differ."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = FrozenParts()
        model.bn.running_mean.copy_(torch.randn(16) * 0.5)
        model.bn.running_var.copy_(torch.rand(16) + 0.5)
    model.train()
    model.enc.eval()
    model.bn.eval()
    model.enc.requires_grad_(False)
    return model


def batch(n: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g)


def factory(batch_size: int = 8, seed: int = 0):
    """Returns ``(model, ((x,), (y,)), F.mse_loss)``: the frozen-parts model and one batch."""
    x, y = batch(batch_size)
    return frozen_parts(seed), ((x,), (y,)), F.mse_loss


class Wrapped(nn.Module):
    """A classifier over a HuggingFace backbone: mean of the last hidden states -> linear head."""

    def __init__(self, backbone: nn.Module, d: int = 32, classes: int = 4):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        return self.head(self.backbone(input_ids=ids).last_hidden_state.mean(1))


def wrapped_gpt2(seed: int = 0) -> Wrapped:
    """A :class:`Wrapped` in training mode over a tiny GPT-2 (``GPT2Model``) in eval mode."""
    import transformers as T

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        backbone = T.GPT2Model(T.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                            bos_token_id=0, eos_token_id=0))
        model = Wrapped(backbone)
    model.train()
    backbone.eval()
    return model
