"""A model with an op spmdc cannot translate (``torch.sort``): the error must name it on every rank."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SortNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.sort(self.fc(x), dim=-1).values


def factory():
    torch.manual_seed(0)
    return SortNet(), ((torch.randn(4, 8),), (torch.randn(4, 8),)), F.mse_loss
