"""The decomposition table used to lower exported graphs to (near-)core ATen."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from spmdc.frontend import torch_compat

__all__ = ["ATTENTION_OPS", "addmm_decomposition", "default_decomposition_table"]

ATTENTION_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu")
NN_OPS = ("_adaptive_avg_pool2d", "adaptive_avg_pool1d", "grid_sampler_2d")


def addmm_decomposition(self, mat1, mat2, *, beta=1, alpha=1):
    """``addmm`` -> ``mm`` (+ ``mul`` only when alpha/beta != 1) + ``add``.

    The stock decomposition always emits ``mul(x, 1)`` for both terms, which adds two
    useless elementwise ops per linear layer.
    """
    out = torch.ops.aten.mm.default(mat1, mat2)
    if alpha != 1:
        out = torch.ops.aten.mul.Tensor(out, alpha)
    if beta == 0:
        return out
    bias = self if beta == 1 else torch.ops.aten.mul.Tensor(self, beta)
    return torch.ops.aten.add.Tensor(out, bias)


def default_decomposition_table() -> dict[Any, Callable]:
    """Core-ATen decompositions plus the extra overloads torch-mlir wants decomposed.

    torch-mlir's table = ``core_aten_decompositions()`` minus a few ops whose decomps it
    cannot lower (FFT, norm, ...) plus e.g. ``native_layer_norm``, ``addmm``,
    ``_log_softmax``, ``_to_copy``, ``full`` and SDPA, which keeps the op set small.
    """
    try:
        from torch_mlir.extras.fx_decomp_util import get_decomposition_table

        table = dict(get_decomposition_table())
    except ImportError:  # pragma: no cover - torch-mlir missing
        table = torch_compat.core_aten_decompositions()
    table[torch.ops.aten.addmm.default] = addmm_decomposition
    from spmdc.frontend.aten.strided import as_strided_decomposition

    # as_strided as the views it reads, planned while the traced tensor still has its real layout
    table[torch.ops.aten.as_strided.default] = as_strided_decomposition
    # attention stays one op (tensor.attention and its gradient): it has its own sharding rule
    # (heads, queries) and kernels, and its backward is not in the table anyway
    for name in ATTENTION_OPS:
        table.pop(getattr(torch.ops.aten, name).default, None)
    # adaptive pooling and grid sampling stay one op (tensor.adaptive_avg_pool, tensor.grid_sample):
    # batch and channels shard, where the decompositions' gathers run replicated
    for name in NN_OPS:
        table.pop(getattr(torch.ops.aten, name).default, None)
    # GELU's gradient stays one op (tensor.gelu_backward): decomposed, it materializes a dozen
    # full-size temporaries (in float32 for a bf16 model) where eager PyTorch runs one kernel
    table.pop(torch.ops.aten.gelu_backward.default, None)
    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    math = torch_compat.core_aten_decompositions().get(sdpa) or torch_compat.registered_decomposition(sdpa)
    if math is not None:
        table[sdpa] = _sdpa_with_dropout_only(math)
    return table


def _sdpa_with_dropout_only(math: Callable) -> Callable:
    """SDPA with dropout becomes PyTorch's math form (its dropout is a ``native_dropout`` on the
    probabilities, the draw eager PyTorch makes on CPU); without dropout it stays one op."""

    def decompose(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
        if dropout_p == 0.0:
            return NotImplemented
        return math(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)

    return decompose
