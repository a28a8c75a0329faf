"""spmdc's Muon (``optimizer="muon"``): torch.optim.Muon's update for matrices, torch's AdamW
for the rest, float32 Newton–Schulz by default; empty pieces skipped."""

from __future__ import annotations

import copy

import pytest
import torch

from spmdc.runtime.muon import Muon, newton_schulz
from spmdc.runtime.optimizers import OPTIMIZERS, is_per_tensor, optimizer_class


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3))


def _train(model, opt, steps=3):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {k: v.detach() for k, v in model.state_dict().items()}


def test_matrices_take_torch_muons_update():
    """With bfloat16 iterations (torch's choice) the matrices follow torch.optim.Muon exactly."""
    a, b = _model(), _model()
    mats = [p for p in b.parameters() if p.dim() == 2]
    ours = Muon(a.parameters(), lr=0.02, weight_decay=0.1, ns_dtype=torch.bfloat16, adamw_lr=0.0)
    theirs = torch.optim.Muon(mats, lr=0.02, weight_decay=0.1)
    got, want = _train(a, ours), _train(b, theirs)
    for k in ("0.weight", "2.weight"):
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)


def test_the_rest_takes_torch_adamw():
    a, b = _model(), _model()
    ours = Muon(a.parameters(), lr=0.0, adamw_lr=1e-2, adamw_betas=(0.9, 0.99), adamw_weight_decay=0.05)
    vectors = [p for p in b.parameters() if p.dim() != 2]
    theirs = torch.optim.AdamW(vectors, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.05, eps=1e-8)
    got, want = _train(a, ours), _train(b, theirs)
    for k in ("0.bias", "2.bias"):
        torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-7)


def test_newton_schulz_orthogonalizes():
    g = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    o = newton_schulz(g, steps=10)
    s = torch.linalg.svdvals(o)
    assert o.shape == g.shape and bool(((s > 0.6) & (s < 1.3)).all())   # Muon's S' ~ U(0.5, 1.5)
    with pytest.raises(ValueError, match="orthogonalizes matrices"):
        newton_schulz(torch.randn(4))


def test_empty_pieces_are_skipped_and_keep_state():
    p = torch.nn.Parameter(torch.zeros(0, 5))
    v = torch.nn.Parameter(torch.zeros(0))
    p.grad, v.grad = torch.zeros(0, 5), torch.zeros(0)
    opt = Muon([p, v])
    opt.step()
    assert opt.state[p]["momentum_buffer"].shape == (0, 5) and float(opt.state[v]["step"]) == 1


def test_by_name_and_as_per_tensor():
    assert "muon" in OPTIMIZERS and optimizer_class("muon") is Muon
    assert is_per_tensor(Muon) and is_per_tensor(torch.optim.AdamW) and not is_per_tensor(torch.optim.Adafactor)
    with pytest.raises(ValueError, match="ns_steps"):
        Muon(_model().parameters(), ns_steps=0)
    m = copy.deepcopy(_model())
    assert isinstance(optimizer_class(("muon", {"lr": 0.1})), type) and Muon(m.parameters()).defaults["lr"] == 0.02
