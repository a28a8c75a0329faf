"""A model with an op spmdc refuses (``torch.fft.rfft``: complex numbers): the error must name it on every rank."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class FftNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.fft.rfft(self.fc(x), dim=-1).abs()


def factory():
    torch.manual_seed(0)
    return FftNet(), ((torch.randn(4, 8),), (torch.randn(4, 5),)), F.mse_loss
