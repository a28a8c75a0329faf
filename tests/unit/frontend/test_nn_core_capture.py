"""nn modules whose ops are pooling, transposed convolution, upsampling, distances and embedding
bags: captured (forward and training step) and interpreted, against eager PyTorch and autograd;
and the forms spmdc refuses, each with its reason."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from spmdc.frontend.aten import UnsupportedOpError
from spmdc.frontend.capture import capture_program
from spmdc.runtime.interpreter import interpret


def _tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _loss(out):
    return sum((o.float() ** 2).sum() for o in _tuple(out))


def tensor_ops(module) -> set[str]:
    return {op.name for op in module.walk() if op.name.startswith("tensor.")}


def check(model: nn.Module, *inputs, train: bool = True) -> set[str]:
    """Forward and training step match eager PyTorch; returns the training step's tensor ops."""
    cap = capture_program(model, inputs)
    got = interpret(cap.module, cap.arguments(*inputs))
    with torch.no_grad():
        ref = _tuple(model(*inputs))
    for a, b in zip(got[len(got) - len(ref):], ref):   # buffer updates (batch norm) come first
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    if not train:
        return tensor_ops(cap.module)
    step = capture_program(model, inputs, train=True, loss_fn=_loss)
    res = interpret(step.module, step.arguments(*inputs))
    model.zero_grad()
    loss = _loss(model(*inputs))
    loss.backward()
    func = next(op for op in step.module.body.ops if op.name == "func.func")
    roles = [func.res_attrs(i) for i in range(len(func.function_type.results))]
    torch.testing.assert_close(res[next(i for i, a in enumerate(roles) if "spmdc.loss" in a)], loss.detach(),
                               rtol=1e-4, atol=1e-4)
    grads = {a["spmdc.grad_of"].value: res[i] for i, a in enumerate(roles) if "spmdc.grad_of" in a}
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    return tensor_ops(step.module)


def test_a_small_cnn_with_pools_a_transposed_convolution_and_upsampling():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(4, 4, 3, padding=1), nn.AvgPool2d(2, ceil_mode=True),
                        nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1),
                        nn.Upsample(scale_factor=2), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten())
    x = torch.randn(2, 3, 8, 8)
    ops = check(cnn, x)
    assert {"tensor.max_pool", "tensor.avg_pool", "tensor.avg_pool_grad", "tensor.scatter"} <= ops
    assert "tensor.mean" in ops   # global average pooling is a mean over the spatial dims
    cnn.eval()
    assert {"tensor.upsample_nearest", "tensor.conv_input_grad"} <= check(cnn, x, train=False)


class Pools3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 2, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return (F.max_pool3d(y, 2, ceil_mode=True), F.avg_pool3d(y, 2, padding=1, count_include_pad=False),
                F.adaptive_avg_pool3d(y, (3, 4, 5)), F.adaptive_avg_pool1d(y[:, 0, 0], 4),
                F.pad(y[:, 0], (1, 2, 0, 1), mode="replicate"))


def test_3d_pools_adaptive_pools_and_replication_padding():
    torch.manual_seed(0)
    ops = check(Pools3d(), torch.randn(2, 2, 4, 6, 6))
    assert {"tensor.adaptive_avg_pool", "tensor.adaptive_avg_pool_grad", "tensor.avg_pool_grad"} <= ops


class Distances(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))

    def forward(self, x):
        return (torch.cdist(x, self.w, p=1.0), F.pdist(self.w), F.normalize(x, dim=-1) @ F.normalize(self.w, dim=-1).T,
                F.cosine_similarity(x[:, None, :], self.w[None], dim=-1), nn.PairwiseDistance()(x[:4], self.w))


def test_distances_and_norms():
    torch.manual_seed(0)
    ops = check(Distances(), torch.randn(5, 6))
    assert {"tensor.cdist", "tensor.cdist_grad", "tensor.pdist", "tensor.pdist_grad"} <= ops


class Grid(nn.Module):
    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([[0.9, 0.1, 0.05], [-0.1, 1.1, 0.0]]).repeat(2, 1, 1))
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        grid = F.affine_grid(self.theta, [2, 3, 5, 4], align_corners=False)
        return F.grid_sample(self.conv(x), grid, align_corners=False)


def test_a_spatial_transformer_trains_its_grid():
    torch.manual_seed(0)
    assert {"tensor.grid_sample", "tensor.grid_sample_grad"} <= check(Grid(), torch.randn(2, 3, 6, 6))


class Bag(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 6, **kw)

    def forward(self, ids, offsets, *weights):
        return self.bag(ids, offsets, per_sample_weights=weights[0] if weights else None)


IDS, OFFSETS = torch.tensor([1, 4, 4, 0, 7, 2, 9, 3]), torch.tensor([0, 3, 3, 5])


@pytest.mark.parametrize("kw", [dict(mode="sum"), dict(mode="mean", padding_idx=4), dict(mode="max"),
                                dict(mode="max", padding_idx=4), dict(mode="mean", include_last_offset=True)])
def test_embedding_bags(kw):
    torch.manual_seed(0)
    offsets = torch.tensor([0, 3, 3, 5, 8]) if kw.get("include_last_offset") else OFFSETS
    ops = check(Bag(**kw), IDS, offsets)
    assert ("tensor.embedding_bag_max" in ops) == (kw["mode"] == "max")


def test_embedding_bag_with_per_sample_weights():
    torch.manual_seed(0)
    check(Bag(mode="sum", padding_idx=7), IDS, OFFSETS, torch.randn(8))


class Bag2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 6, mode="mean")

    def forward(self, ids):
        return self.bag(ids)   # one bag per row


def test_2d_input_bags():
    torch.manual_seed(0)
    check(Bag2d(), torch.tensor([[1, 2, 3], [4, 4, 0]]))


def test_refused_forms_say_why():
    with pytest.raises(UnsupportedOpError, match="scale_grad_by_freq"):
        capture_program(Bag(mode="sum", scale_grad_by_freq=True), (IDS, OFFSETS), train=True, loss_fn=_loss)

    class Bookkeeping(nn.Module):
        def forward(self, w):
            return torch.ops.aten._embedding_bag(w, IDS, OFFSETS, False, 1, False, None, False, -1)[2]

    with pytest.raises(UnsupportedOpError, match="bookkeeping"):
        capture_program(Bookkeeping(), (torch.randn(10, 6),))
    # stride 1, dilation 2: PyTorch accepts output_padding 1, which no convolution of the output undoes
    up = nn.ConvTranspose2d(2, 2, 3, stride=1, dilation=2, output_padding=1)
    with pytest.raises(UnsupportedOpError, match="output_padding"):
        capture_program(up, (torch.randn(1, 2, 5, 5),))


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_the_forward_only_bag_kernel(mode):
    # torch-mlir imports it as embedding_bag.padding_idx; padding_idx None means none
    class ForwardOnly(nn.Module):
        def forward(self, w, ids, offsets):
            return torch.ops.aten._embedding_bag_forward_only(w, ids, offsets, False, mode, False, None, False, 4)[0]

    w = torch.randn(10, 6)
    check(ForwardOnly(), w, IDS, OFFSETS, train=False)
