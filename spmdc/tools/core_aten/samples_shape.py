"""Core ATen samples: shape, creation and matrix-product ops (see :class:`spmdc.tools.core_aten.Sample`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from spmdc.tools.core_aten import Sample

A = torch.ops.aten


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


SAMPLES: list[Sample] = [
    Sample("aten.alias.default", lambda x: A.alias.default(x) * 2, lambda: (_r(3, 4),)),
    Sample("aten.arange.start_step", lambda x: x * torch.arange(1, 9, 2, dtype=torch.float32), lambda: (_r(3, 4),)),
    Sample("aten.arange.start_step", lambda: torch.arange(2, 20, 3), lambda: (), train=False),
    Sample("aten.as_strided.default", lambda x: torch.as_strided(x, (2, 2), (1, 4), 1), lambda: (_r(3, 4),),
           note="x.t()[1:3, 0:2]"),
    Sample("aten.as_strided.default", lambda x: torch.as_strided(x, (3, 2), (4, 1), 2), lambda: (_r(3, 4),),
           note="x[:, 2:4]"),
    Sample("aten.as_strided.default", lambda x: torch.as_strided(x, (4,), (5,)), lambda: (_r(4, 4),),
           note="the diagonal, flat with step 5"),
    Sample("aten.as_strided.default", lambda x: torch.as_strided(x[1:], (2, 3, 2), (1, 0, 4), 5),
           lambda: (_r(3, 4),), note="a view with a storage offset; a broadcast dim"),
    Sample("aten.bmm.default", torch.bmm, lambda: (_r(2, 3, 4), _r(2, 4, 5))),
    Sample("aten.cat.default", lambda a, b: torch.cat([a, b], dim=1), lambda: (_r(2, 3), _r(2, 5))),
    Sample("aten.cat.default", lambda a, b, c: torch.cat([a, b, c], dim=-2),
           lambda: (_r(2, 3, 2), _r(2, 1, 2), _r(2, 4, 2))),
    Sample("aten.cat.default", lambda a, b: torch.cat([a, b]), lambda: (torch.arange(6).reshape(2, 3),
                                                                         torch.randint(0, 5, (1, 3))), train=False),
    Sample("aten.clone.default", lambda x: torch.clone(x) + 1, lambda: (_r(3, 4),)),
    Sample("aten.constant_pad_nd.default", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), lambda: (_r(2, 3),)),
    Sample("aten.constant_pad_nd.default", lambda x: F.pad(x, (-1, 2), value=-1.0), lambda: (_r(2, 3),),
           note="a negative amount crops"),
    Sample("aten.copy.default", lambda a, b: A.copy.default(a, b), lambda: (_r(3, 4), _r(4)), train=False,
           note="torch has no derivative for the functional aten.copy (training graphs get it from copy_)"),
    Sample("aten.copy.default", lambda a, b: A.copy.default(a, b), lambda: (_r(2, 3), torch.randint(0, 9, (2, 3))),
           train=False),
    Sample("aten.diagonal.default", lambda x: torch.diagonal(x), lambda: (_r(3, 4),)),
    Sample("aten.diagonal.default", lambda x: torch.diagonal(x, 1, 0, 2), lambda: (_r(3, 2, 4),)),
    Sample("aten.diagonal.default", lambda x: torch.diagonal(x, -2, -1, 0) * 3, lambda: (_r(4, 2, 3),)),
    Sample("aten.diagonal.default", lambda x: torch.diagonal(x, 5), lambda: (_r(3, 4),), note="empty diagonal"),
    Sample("aten.diagonal.default", lambda x: torch.diagonal(x, 1), lambda: (torch.randint(0, 9, (3, 4)),),
           train=False),
    Sample("aten.empty.memory_format", lambda x: torch.empty(3, 4).fill_(1.5) * x, lambda: (_r(3, 4),)),
    Sample("aten.empty.memory_format", lambda: torch.empty(2, 3, dtype=torch.int64).fill_(7), lambda: (),
           train=False),
    Sample("aten.empty_strided.default", lambda x: torch.empty_strided((3, 4), (4, 1)).fill_(-2.0) + x,
           lambda: (_r(3, 4),)),
    Sample("aten.expand.default", lambda x: x.expand(2, 3, 4), lambda: (_r(3, 1),)),
    Sample("aten.expand.default", lambda x: x.expand(2, -1, 5), lambda: (_r(1, 3, 1),)),
    Sample("aten.fill.Scalar", lambda x: torch.fill(x, 2.5) + x, lambda: (_r(3, 4),)),
    Sample("aten.flip.default", lambda x: torch.flip(x, [0, 2]), lambda: (_r(2, 3, 4),)),
    Sample("aten.full.default", lambda: torch.full((2, 3), 2.5), lambda: (), train=False),
    Sample("aten.full.default", lambda: torch.full((2, 2), 7, dtype=torch.int32), lambda: (), train=False),
    Sample("aten.full_like.default", lambda x: torch.full_like(x, 3.0) * x, lambda: (_r(3, 4),)),
    Sample("aten.full_like.default", lambda x: torch.full_like(x, 2, dtype=torch.int64), lambda: (_r(2, 3),),
           train=False),
    Sample("aten.mm.default", torch.mm, lambda: (_r(3, 4), _r(4, 5))),
    Sample("aten.addmm.default", torch.addmm, lambda: (_r(5), _r(3, 4), _r(4, 5))),
    Sample("aten.addmm.default", lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0),
           lambda: (_r(3, 5), _r(3, 4), _r(4, 5))),
    Sample("aten.permute.default", lambda x: x.permute(2, 0, 1), lambda: (_r(2, 3, 4),)),
    Sample("aten.permute.default", lambda x: x.permute(-1, 0, -2), lambda: (_r(2, 3, 4),)),
    Sample("aten.repeat.default", lambda x: x.repeat(2, 1, 3), lambda: (_r(3, 2),)),
    Sample("aten.repeat.default", lambda x: x.repeat(2, 2), lambda: (torch.arange(3),), train=False),
    Sample("aten.scalar_tensor.default", lambda: torch.scalar_tensor(2.5), lambda: (), train=False),
    Sample("aten.select.int", lambda x: x.select(1, -1), lambda: (_r(2, 3, 4),)),
    Sample("aten.select.int", lambda x: x[2], lambda: (_r(3, 4),)),
    Sample("aten.select_scatter.default", lambda x, s: torch.select_scatter(x, s, 1, 2),
           lambda: (_r(2, 3, 4), _r(2, 4))),
    Sample("aten.slice.Tensor", lambda x: x[:, 1:4:2], lambda: (_r(2, 5),)),
    Sample("aten.slice.Tensor", lambda x: x[-3:, :-1], lambda: (_r(4, 5),)),
    Sample("aten.slice.Tensor", lambda x: x[1:100], lambda: (_r(4, 2),), note="an end past the dim clamps"),
    Sample("aten.slice_scatter.default", lambda x, s: torch.slice_scatter(x, s, 1, 1, 5, 2),
           lambda: (_r(2, 6), _r(2, 2))),
    Sample("aten.split_with_sizes.default", lambda x: torch.split(x, [1, 3], dim=1), lambda: (_r(2, 4),)),
    Sample("aten.split_with_sizes.default", lambda x: torch.split(x, [2, 0, 3], dim=-1), lambda: (_r(2, 5),)),
    Sample("aten.squeeze.dim", lambda x: x.squeeze(1), lambda: (_r(3, 1, 4),)),
    Sample("aten.squeeze.dim", lambda x: x.squeeze(0), lambda: (_r(3, 4),), note="a dim that is not 1 stays"),
    Sample("aten.squeeze.dims", lambda x: x.squeeze((0, 2)), lambda: (_r(1, 3, 1, 4),)),
    Sample("aten.unsqueeze.default", lambda x: x.unsqueeze(1), lambda: (_r(3, 4),)),
    Sample("aten.view.default", lambda x: x.view(2, 6), lambda: (_r(3, 4),)),
    Sample("aten.view.default", lambda x: x.view(-1, 2, 3), lambda: (_r(3, 4),)),
    Sample("aten.mm.default", lambda a, b: torch.mm(a, b), lambda: (_r(1, 4), _r(4, 1))),
    Sample("aten.bmm.default", torch.bmm, lambda: (_r(1, 2, 3), _r(1, 3, 2))),
]
