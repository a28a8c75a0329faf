"""``mlp``: two linear layers with a GELU, trained with mean-squared error.

    model, ((x,), (y,)), loss_fn = factory()      # x: [8, 16], y: [8, 8]
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def factory(batch: int = 8, d_in: int = 16, d_hidden: int = 32, d_out: int = 8, seed: int = 0):
    """Returns ``(model, ((x,), (target,)), F.mse_loss)``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = MLP(d_in, d_hidden, d_out)
        x, y = torch.randn(batch, d_in), torch.randn(batch, d_out)
    return model, ((x,), (y,)), F.mse_loss
