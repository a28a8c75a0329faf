"""Core ATen samples: nn ops (see :class:`spmdc.tools.core_aten.Sample`).

Pooling, convolution, normalisation, upsampling, padding, distances and embedding bags, on
small shapes (``N = 2``, ``C = 3``, ``6 x 6``). Max-pool inputs are permutations of distinct
values, so no window holds a tie (the index of a tie is an implementation detail).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from spmdc.tools.core_aten import Sample

aten = torch.ops.aten


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _distinct(*shape: int) -> torch.Tensor:
    """Distinct values in random order: no ties inside any max-pool window."""
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n).float() / n - 0.5).reshape(shape)


def _max_pool2d_backward(g, x, k, s, p, d, ceil):
    _, idx = aten.max_pool2d_with_indices(x, k, s, p, d, ceil)
    return aten.max_pool2d_with_indices_backward(g, x, k, s, p, d, ceil, idx)


def _layer_norm_backward(g, x, w):
    # no bias: the gradients do not depend on it (a parameter without a gradient fails the capture)
    _, mean, rstd = aten.native_layer_norm(x, [6], w, None, 1e-5)
    return aten.native_layer_norm_backward(g, x, [6], mean, rstd, w, None, [True, True, False])[:2]


def _group_norm_backward(g, x, w):
    _, mean, rstd = aten.native_group_norm(x, w, None, 2, 4, 36, 2, 1e-5)
    return aten.native_group_norm_backward(g, x, mean, rstd, w, 2, 4, 36, 2, [True, True, True])


def _batch_norm_eval(x, w, b):
    mean, var = torch.linspace(-0.5, 0.5, 3), torch.linspace(0.5, 1.5, 3)
    return aten._native_batch_norm_legit_no_training(x, w, b, mean, var, 0.1, 1e-5)


def _conv_backward(g, x, w):
    return aten.convolution_backward(g, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])


def _bag(mode: int, psw: bool = False, last: bool = False, pad: int = -1):
    def fn(w, ids, offsets, *rest):
        out = aten._embedding_bag(w, ids, offsets, False, mode, False, rest[0] if psw else None, last, pad)
        # offset2bag, bag_size and (outside max) max_indices are PyTorch's bookkeeping, not compared
        return out[0] if mode != 2 else (out[0], out[3])
    return fn


def _IDS() -> torch.Tensor:
    return torch.tensor([1, 4, 4, 0, 7, 2, 9, 3])


def _OFFSETS() -> torch.Tensor:
    return torch.tensor([0, 3, 3, 5])   # bag 1 is empty


SAMPLES: list[Sample] = [
    # -- pooling ---------------------------------------------------------------------------
    Sample("aten.avg_pool2d.default", lambda x: F.avg_pool2d(x, 2), lambda: (_x(2, 3, 6, 6),)),
    Sample("aten.avg_pool2d.default", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
           lambda: (_x(2, 3, 6, 6),), note="padding, ceil_mode, count_include_pad=False"),
    Sample("aten.avg_pool2d.default", lambda x: F.avg_pool2d(x, (3, 2), (2, 1), (1, 0), ceil_mode=True),
           lambda: (_x(2, 3, 6, 6),), note="ceil_mode with count_include_pad"),
    Sample("aten.avg_pool2d.default", lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=4),
           lambda: (_x(2, 3, 6, 6),), note="divisor_override"),
    Sample("aten.avg_pool2d.default", lambda x: F.avg_pool2d(x, 2, 1), lambda: (_x(3, 6, 6),), note="unbatched"),
    Sample("aten.avg_pool2d_backward.default",
           lambda g, x: aten.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], True, False, None),
           lambda: (_x(2, 3, 4, 4), _x(2, 3, 6, 6))),
    Sample("aten.avg_pool3d.default", lambda x: F.avg_pool3d(x, 2, 2, 1, ceil_mode=True, count_include_pad=False),
           lambda: (_x(2, 3, 4, 6, 6),)),
    Sample("aten.avg_pool3d.default", lambda x: F.avg_pool3d(x, (2, 3, 3), divisor_override=5),
           lambda: (_x(2, 3, 4, 6, 6),), note="divisor_override"),
    Sample("aten.avg_pool1d.default", lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
           lambda: (_x(2, 3, 6),)),
    Sample("aten.max_pool2d_with_indices.default", lambda x: F.max_pool2d(x, 2, return_indices=True),
           lambda: (_distinct(2, 3, 6, 6),)),
    Sample("aten.max_pool2d_with_indices.default",
           lambda x: F.max_pool2d(x, 3, 2, 1, dilation=1, ceil_mode=True, return_indices=True),
           lambda: (_distinct(2, 3, 6, 6),), note="padding, ceil_mode, overlapping windows"),
    Sample("aten.max_pool2d_with_indices.default",
           lambda x: F.max_pool2d(x, (2, 3), (1, 2), (1, 1), dilation=(2, 1), return_indices=True),
           lambda: (_distinct(2, 3, 6, 6),), note="dilation"),
    Sample("aten.max_pool2d_with_indices.default", lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True),
           lambda: (_distinct(3, 6, 6),), note="unbatched [C, H, W]"),
    Sample("aten.max_pool2d_with_indices_backward.default",
           lambda g, x: _max_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], [1, 1], True),
           lambda: (_x(2, 3, 4, 4), _distinct(2, 3, 6, 6))),
    Sample("aten.max_pool3d_with_indices.default",
           lambda x: F.max_pool3d(x, 2, 2, 1, ceil_mode=True, return_indices=True),
           lambda: (_distinct(2, 3, 4, 6, 6),)),
    Sample("aten._adaptive_avg_pool2d.default", lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
           lambda: (_x(2, 3, 6, 6),)),
    Sample("aten._adaptive_avg_pool2d.default", lambda x: F.adaptive_avg_pool2d(x, (4, 5)),
           lambda: (_x(2, 3, 6, 6),), note="overlapping windows of unequal size"),
    Sample("aten._adaptive_avg_pool2d.default", lambda x: aten._adaptive_avg_pool2d(x, [1, 1]),
           lambda: (_x(2, 3, 6, 6),), note="global average pooling (a mean over the spatial dims)"),
    Sample("aten._adaptive_avg_pool2d_backward.default",
           lambda g, x: aten._adaptive_avg_pool2d_backward(g, x), lambda: (_x(2, 3, 4, 5), _x(2, 3, 6, 6))),
    Sample("aten._adaptive_avg_pool3d.default", lambda x: F.adaptive_avg_pool3d(x, (3, 4, 5)),
           lambda: (_x(2, 3, 4, 6, 6),)),
    Sample("aten.adaptive_avg_pool1d.default", lambda x: F.adaptive_avg_pool1d(x, 4), lambda: (_x(2, 3, 6),)),
    # -- convolution -----------------------------------------------------------------------
    Sample("aten.convolution.default", lambda x, w, b: F.conv2d(x, w, b, padding=1),
           lambda: (_x(2, 3, 6, 6), _x(4, 3, 3, 3), _x(4))),
    Sample("aten.convolution.default", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1,
                                                                         output_padding=1, groups=2),
           lambda: (_x(2, 4, 6, 6), _x(4, 3, 3, 3), _x(6)), note="transposed, grouped, output_padding"),
    Sample("aten.convolution_backward.default", _conv_backward,
           lambda: (_x(2, 4, 6, 6), _x(2, 3, 6, 6), _x(4, 3, 3, 3))),
    Sample("aten.col2im.default", lambda x: F.fold(x, (6, 6), 2, stride=2), lambda: (_x(2, 12, 9),)),
    # -- normalisation ---------------------------------------------------------------------
    Sample("aten.native_layer_norm.default", lambda x, w, b: F.layer_norm(x, (6,), w, b),
           lambda: (_x(2, 3, 6), _x(6), _x(6))),
    Sample("aten.native_layer_norm_backward.default", _layer_norm_backward,
           lambda: (_x(2, 3, 6), _x(2, 3, 6), _x(6))),
    Sample("aten.native_group_norm.default", lambda x, w, b: F.group_norm(x, 2, w, b),
           lambda: (_x(2, 4, 6, 6), _x(4), _x(4))),
    Sample("aten.native_group_norm_backward.default", _group_norm_backward,
           lambda: (_x(2, 4, 6, 6), _x(2, 4, 6, 6), _x(4)), train=False,
           note="PyTorch has no derivative of native_group_norm_backward"),
    Sample("aten._native_batch_norm_legit.default",
           lambda x, w, b: aten._native_batch_norm_legit(x, w, b, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5),
           lambda: (_x(2, 3, 6, 6), _x(3), _x(3))),
    Sample("aten._native_batch_norm_legit.no_stats",
           lambda x, w, b: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5),
           lambda: (_x(2, 3, 6, 6), _x(3), _x(3))),
    Sample("aten._native_batch_norm_legit_no_training.default", _batch_norm_eval,
           lambda: (_x(2, 3, 6, 6), _x(3), _x(3)), note="running statistics are buffers, not trained"),
    # -- upsampling and sampling -----------------------------------------------------------
    Sample("aten.upsample_nearest2d.vec", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
           lambda: (_x(2, 3, 6, 6),)),
    Sample("aten.upsample_nearest2d.vec", lambda x: F.interpolate(x, size=(9, 4), mode="nearest"),
           lambda: (_x(2, 3, 6, 6),), note="non-integer ratios, down and up"),
    Sample("aten.upsample_nearest2d.vec", lambda x: aten.upsample_nearest2d.vec(x, None, [1.5, 0.7]),
           lambda: (_x(2, 3, 6, 6),), note="scale factors given: they, not the sizes, set the source rows"),
    Sample("aten.upsample_bilinear2d.vec",
           lambda x: F.interpolate(x, size=(9, 4), mode="bilinear", align_corners=False), lambda: (_x(2, 3, 6, 6),)),
    Sample("aten.upsample_bilinear2d.vec",
           lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True), lambda: (_x(2, 3, 6, 6),)),
    Sample("aten.grid_sampler_2d.default",
           lambda x, g: F.grid_sample(x, g, mode="bilinear", padding_mode="zeros", align_corners=False),
           lambda: (_x(2, 3, 6, 6), torch.rand(2, 4, 5, 2) * 2.2 - 1.1)),
    Sample("aten.grid_sampler_2d.default",
           lambda x, g: F.grid_sample(x, g, mode="nearest", padding_mode="reflection", align_corners=True),
           lambda: (_x(2, 3, 6, 6), torch.rand(2, 4, 5, 2) * 2.2 - 1.1), note="nearest, reflection padding"),
    Sample("aten.grid_sampler_2d.default",
           lambda x, g: F.grid_sample(x, g, mode="bicubic", padding_mode="border", align_corners=False),
           lambda: (_x(2, 3, 6, 6), torch.rand(2, 4, 5, 2) * 2.2 - 1.1), tol=(1e-5, 1e-5), note="bicubic, border"),
    # -- padding ---------------------------------------------------------------------------
    Sample("aten.reflection_pad1d.default", lambda x: F.pad(x, (2, 1), mode="reflect"), lambda: (_x(2, 3, 6),)),
    Sample("aten.reflection_pad2d.default", lambda x: F.pad(x, (2, 1, 0, 3), mode="reflect"),
           lambda: (_x(2, 3, 6, 6),)),
    Sample("aten.reflection_pad3d.default", lambda x: F.pad(x, (1, 2, 2, 0, 1, 1), mode="reflect"),
           lambda: (_x(2, 3, 4, 6, 6),)),
    Sample("aten.replication_pad2d.default", lambda x: F.pad(x, (2, 1, 0, 3), mode="replicate"),
           lambda: (_x(2, 3, 6, 6),)),
    Sample("aten.replication_pad3d.default", lambda x: F.pad(x, (1, 2, 2, 0, 1, 1), mode="replicate"),
           lambda: (_x(2, 3, 4, 6, 6),)),
    # -- distances and norms ---------------------------------------------------------------
    Sample("aten._cdist_forward.default", lambda a, b: aten._cdist_forward(a, b, 2.0, None),
           lambda: (_x(2, 5, 6), _x(2, 4, 6))),
    Sample("aten._cdist_forward.default", lambda a, b: aten._cdist_forward(a, b, 3.0, None),
           lambda: (_x(1, 5, 6), _x(3, 4, 6)), note="batch dims broadcast"),
    Sample("aten._cdist_forward.default", lambda a, b: aten._cdist_forward(a, b, 1.0, None),
           lambda: (_x(5, 6), _x(4, 6)), note="p = 1"),
    Sample("aten._cdist_forward.default", lambda a, b: aten._cdist_forward(a, b, float("inf"), None),
           lambda: (_x(5, 6), _x(4, 6)), note="p = inf"),
    Sample("aten._cdist_forward.default", lambda a, b: aten._cdist_forward(a, b, 3.0, None),
           lambda: (_x(5, 6), _x(4, 6)), note="p = 3"),
    Sample("aten._cdist_forward.default", lambda a, b: aten._cdist_forward(a, b, 0.5, None),
           lambda: (_x(5, 6), _x(4, 6)), note="p < 1"),
    Sample("aten._cdist_forward.default", lambda a, b: aten._cdist_forward(a, b, 0.0, None),
           lambda: (_x(5, 6), _x(4, 6)), note="p = 0 (count of differing coordinates)"),
    Sample("aten._cdist_forward.default", lambda a, b: aten._cdist_forward(a, b, 2.0, None),
           lambda: (_x(30, 6), _x(4, 6)), tol=(1e-4, 1e-5), note="more than 25 rows: the matmul form, as eager"),
    Sample("aten._pdist_forward.default", lambda x: aten._pdist_forward(x, 2.0), lambda: (_x(5, 6),)),
    Sample("aten._pdist_forward.default", lambda x: aten._pdist_forward(x, 1.0), lambda: (_x(5, 6),), note="p = 1"),
    Sample("aten._pdist_forward.default", lambda x: aten._pdist_forward(x, float("inf")), lambda: (_x(5, 6),),
           note="p = inf"),
    Sample("aten._pdist_forward.default", lambda x: aten._pdist_forward(x, 1.5), lambda: (_x(5, 6),), note="p = 1.5"),
    Sample("aten.linalg_vector_norm.default", lambda x: F.normalize(x, dim=1), lambda: (_x(2, 3, 6),)),
    Sample("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, 1, dim=(0, 2), keepdim=True),
           lambda: (_x(2, 3, 6),), note="ord 1"),
    Sample("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, float("inf"), dim=-1),
           lambda: (_x(2, 3, 6),), note="ord inf"),
    Sample("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, 3), lambda: (_x(2, 3, 6),),
           note="ord 3, every dim"),
    Sample("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, float("-inf"), dim=(1, 2)),
           lambda: (_x(2, 3, 6),), note="ord -inf"),
    Sample("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, 0, dim=1),
           lambda: (torch.randn(2, 3, 6).clamp(min=0),), train=False,
           note="ord 0 (count of non-zeros): no gradient, so nothing to train"),
    Sample("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, -1.5, dim=2),
           lambda: (_x(2, 3, 6),), note="negative ord"),
    # -- embedding bags --------------------------------------------------------------------
    Sample("aten._embedding_bag.default", _bag(0), lambda: (_x(10, 6), _IDS(), _OFFSETS()), note="sum"),
    Sample("aten._embedding_bag.default", _bag(1), lambda: (_x(10, 6), _IDS(), _OFFSETS()), note="mean"),
    Sample("aten._embedding_bag.default", _bag(2), lambda: (_x(10, 6), _IDS(), _OFFSETS()), note="max"),
    Sample("aten._embedding_bag.default", _bag(0, psw=True), lambda: (_x(10, 6), _IDS(), _OFFSETS(), _x(8)),
           note="sum with per_sample_weights"),
    Sample("aten._embedding_bag.default", _bag(1, last=True, pad=4),
           lambda: (_x(10, 6), _IDS(), torch.tensor([0, 3, 3, 5, 8])), note="include_last_offset, padding_idx"),
]
