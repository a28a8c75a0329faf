"""torch.nn building blocks as users assemble them, at their default settings (dropout 0.1 in
``nn.TransformerEncoderLayer``): workloads for tests and ``spmdc run``.

* ``encoder``: ``nn.TransformerEncoder`` (``nn.MultiheadAttention`` inside) with a token
  embedding and an LM head, trained with cross-entropy;
* ``vit``: a small Vision Transformer: ``nn.Conv2d`` patch embedding, class token, learned
  positions, pre-norm ``nn.TransformerEncoder``, linear head;
* ``conv1d``: a 1-D convolution stack (padding, stride, groups) with a linear head.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, heads, 2 * dim, batch_first=True),
                                             layers)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)))


class ViT(nn.Module):
    def __init__(self, dim: int = 32, patch: int = 4, image: int = 16, classes: int = 10, layers: int = 2):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 4, 2 * dim, batch_first=True, norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h = self.patch(images).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1) + self.pos
        return self.head(self.encoder(h)[:, 0])


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 3, padding=1)
        self.c2 = nn.Conv1d(8, 8, 5, stride=2, groups=2)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.c2(F.relu(self.c1(x)))).mean(-1))


def _ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def encoder():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (4, 8), generator=g)
    return Encoder(), ((ids,), (ids.roll(-1, dims=1),)), _ce


def vit():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return ViT(), ((torch.randn(4, 3, 16, 16, generator=g),), (torch.randint(0, 10, (4,), generator=g),)), _ce


def conv1d():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return Conv1dNet(), ((torch.randn(4, 4, 16, generator=g),), (torch.randint(0, 3, (4,), generator=g),)), _ce
