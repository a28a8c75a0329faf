"""Dropout on 4 gloo ranks (one launch): masks bitwise equal to one device, under every preset.

Eager mode: each rank's dropout mask, put together, is bitwise the mask eager PyTorch draws on
one device with the same seed (megatron, fsdp, fsdp+tp), and a training step with dropout
0.1 (residual and attention dropout) matches eager's loss and gradients (rtol 1e-4, atol
1e-5), also with every block checkpointed (recomputed in the backward, masks replayed).
Counter mode (``rng="philox"``): the masks are the same bits on every mesh and plan, and
training steps agree across meshes to rounding.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from rank_checks import assert_step_matches

from spmdc.api.worker import run_steps
from spmdc.compiler import compile_step
from spmdc.runtime.launcher import launch
from spmdc.sharding.mesh import Mesh

SEED = 1234
MESHES = [("megatron", Mesh({"tp": 4})), ("fsdp", Mesh({"dp": 4})), ("fsdp+tp", Mesh({"dp": 2, "tp": 2}))]


class MaskNet(nn.Module):
    """Returns its dropout mask (scaled): 0 or 1/(1-p) per element of a [6, 10] activation."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 10), nn.Linear(10, 4)

    def forward(self, x):
        h = self.fc1(x)
        mask = F.dropout(torch.ones_like(h), 0.3, self.training)
        return self.fc2(h * mask), mask


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)
        self.fc1, self.fc2, self.drop = nn.Linear(16, 32), nn.Linear(32, 16), nn.Dropout(0.1)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 4).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0, is_causal=True)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, 16)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(x))))


class DropNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks, self.head = nn.Sequential(Block(), Block()), nn.Linear(16, 8)

    def forward(self, x):
        return self.head(self.blocks(x))


def _loss(out, y):
    return F.cross_entropy(out.reshape(-1, 8), y.reshape(-1))


def _mask_model():
    torch.manual_seed(0)
    return MaskNet(), torch.randn(6, 8)


def _drop_model():
    torch.manual_seed(0)
    return DropNet(), torch.randn(4, 8, 16), torch.randint(0, 8, (4, 8))


@pytest.fixture(scope="module")
def runs():
    steps = []
    for rng in ("eager", "philox"):
        for plan, mesh in MESHES:
            model, x = _mask_model()
            steps.append(compile_step(model, (x,), mesh=mesh, plan=plan, rng=rng))
    for rng in ("eager", "philox"):
        for plan, mesh in MESHES[:2]:
            model, x, y = _drop_model()
            steps.append(compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=_loss,
                                      loss_inputs=(y,), rng=rng))
    for plan, mesh in MESHES[:2]:   # activation checkpointing: every block recomputed in the backward
        model, x, y = _drop_model()
        steps.append(compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=_loss,
                                  loss_inputs=(y,), checkpoint="blocks"))
    return steps, launch(run_steps, 4, (steps, "codegen", "torch", SEED))


def _eager_mask():
    model, x = _mask_model()
    torch.manual_seed(SEED)
    return model(x)[1]


def test_eager_mode_masks_are_the_single_device_masks_under_every_plan(runs):
    steps, results = runs
    want = _eager_mask()
    assert 0 < int((want == 0).sum()) < want.numel()   # dropout really dropped something
    for case in range(len(MESHES)):
        for rank in range(4):
            got = results[rank][case]["outputs"][1]
            assert torch.equal(got, want), f"{MESHES[case][0]} rank {rank}"


def test_counter_mode_masks_are_the_same_bits_under_every_plan(runs):
    steps, results = runs
    first = results[0][len(MESHES)]["outputs"][1]
    assert 0 < int((first == 0).sum()) < first.numel()
    torch.testing.assert_close(first.unique(), torch.tensor([0.0, 1 / 0.7]))
    for case in range(len(MESHES), 2 * len(MESHES)):
        for rank in range(4):
            assert torch.equal(results[rank][case]["outputs"][1], first), f"{MESHES[case - 3][0]} rank {rank}"
    assert "tensor.rng_seed" in steps[len(MESHES)].global_ir


@pytest.mark.parametrize("first", [
    pytest.param(2 * len(MESHES), id="plain", marks=[pytest.mark.matrix("one mesh", "dropout")]),
    pytest.param(2 * len(MESHES) + 4, id="checkpointed",
                 marks=[pytest.mark.matrix("one mesh", "dropout"), pytest.mark.matrix("one mesh", "act. ckpt")])])
def test_training_with_dropout_matches_eager(runs, first):
    steps, results = runs
    model, x, y = _drop_model()
    torch.manual_seed(SEED)
    loss = _loss(model(x), y)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    model.eval()
    assert abs(_loss(model(x), y).item() - loss.item()) > 1e-3   # dropout changes the loss
    for case in (first, first + 1):
        assert_step_matches(steps[case], [results[rank][case] for rank in range(4)], loss.detach(), grads,
                            f"case {case}")


def test_counter_mode_training_agrees_across_meshes(runs):
    steps, results = runs
    a, b = results[0][2 * len(MESHES) + 2], results[0][2 * len(MESHES) + 3]
    for got, want in zip(a["outputs"], b["outputs"], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_checkpointed_fsdp_gathers_weights_again_for_the_recomputation(runs):
    steps, results = runs
    plain, ckpt = results[0][2 * len(MESHES) + 1], results[0][2 * len(MESHES) + 5]
    assert "spmdc.recompute" in steps[2 * len(MESHES) + 5].global_ir
    def gathered(step):   # tensors all-gathered by rank 0's program, alone or in buckets
        return sum(len(op.operands) for op in step.rank_module(0).walk() if op.name.startswith("comm.all_gather"))
    assert gathered(steps[2 * len(MESHES) + 5]) > gathered(steps[2 * len(MESHES) + 1])
    assert ckpt["comm_ops"] and plain["comm_ops"]
