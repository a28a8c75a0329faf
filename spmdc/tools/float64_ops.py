"""Float64 kernels for the ops PyTorch computes only in lower precision, for ``--check``'s float64 run.

``--check`` tells rounding noise from a bug by a second eager run in float64
(:func:`spmdc.tools.reference.judge_by_float64`). Some ops have no float64 CPU kernel — above all
``aten._grouped_mm``, which every Hugging Face mixture of experts calls (Mixtral, Qwen-MoE,
OLMoE): "Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double". Under
:class:`Float64Kernels` such an op on float64 operands is computed by its definition instead, one
``torch.matmul`` per group, in float64 (the mode sits below autograd, so the backward's
``_grouped_mm`` calls are computed so too)::

    with Float64Kernels():
        y = torch._grouped_mm(x.double(), w.double(), offs=offs)   # (S, K) x (E, K, N) -> (S, N)

``torch._grouped_mm``'s forms, ``offs`` holding the groups' cumulative ends (group ``g`` is
``offs[g-1]:offs[g]``, ``offs[-1]`` read as 0):

* (2-D, 3-D): rows of ``a`` grouped, ``a[rows_g] @ b[g]``; rows past ``offs[-1]`` belong to no
  group and are zeros (the CPU kernel leaves them unwritten);
* (2-D, 2-D): the contracted dim grouped, ``r[g] = a[:, cols_g] @ b[rows_g]`` (a weight gradient);
* (3-D, 2-D): columns of ``b`` grouped, ``r[:, cols_g] = a[g] @ b[:, cols_g]``;
* (3-D, 3-D) without ``offs``: a batched product.

A call with ``bias`` or ``out_dtype``, or with other operand types, goes to PyTorch's own kernel
(and its error) unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _bounds(offs: torch.Tensor) -> list[tuple[int, int]]:
    """``[(start, end)]`` of each group from the cumulative ends ``offs``."""
    ends = [int(e) for e in offs.tolist()]
    return list(zip([0, *ends[:-1]], ends))


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None) -> torch.Tensor:
    """``torch._grouped_mm(a, b, offs)`` by its definition (any floating dtype; see the module doc)."""
    if offs is None:
        if a.dim() != 3 or b.dim() != 3:
            raise ValueError(f"grouped_mm without offs multiplies 3-D batches, got ranks {a.dim()} and {b.dim()}")
        return torch.bmm(a, b)
    groups = _bounds(offs)
    if a.dim() == 2 and b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for g, (s, e) in enumerate(groups):
            out[s:e] = a[s:e] @ b[g]
        return out
    if a.dim() == 2 and b.dim() == 2:
        return torch.stack([a[:, s:e] @ b[s:e] for s, e in groups])
    if a.dim() == 3 and b.dim() == 2:
        out = a.new_zeros(a.shape[1], b.shape[1])
        for g, (s, e) in enumerate(groups):
            out[:, s:e] = a[g] @ b[:, s:e]
        return out
    raise ValueError(f"grouped_mm with offs takes 2-D or 3-D operands, not both 3-D (ranks {a.dim()}, {b.dim()})")


class Float64Kernels(TorchDispatchMode):
    """Computes ops without float64 kernels (``aten._grouped_mm``) by their definition when their
    operands are float64; every other call runs as it would."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._grouped_mm.default and _float64_plain(args, kwargs):
            a, b, *rest = args
            offs = rest[0] if rest else kwargs.get("offs")
            return grouped_mm(a, b, offs)
        return func(*args, **kwargs)


def _float64_plain(args: tuple, kwargs: dict) -> bool:
    """A ``_grouped_mm`` call on float64 operands without ``bias`` or ``out_dtype``."""
    a, b, *rest = args
    extra = [*rest[1:], kwargs.get("bias"), kwargs.get("out_dtype")]
    return a.dtype == b.dtype == torch.float64 and all(x is None for x in extra)
