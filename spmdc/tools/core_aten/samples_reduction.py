"""Core ATen samples: reductions, sorting, indexing and random ops (see
:class:`spmdc.tools.core_aten.Sample`), plus the non-core ops mixture-of-experts routing reaches
(``histc``, integer ``cumsum``, ``index_add``, ``argsort``) and a Mixtral-style router.

Inputs avoid ties where torch's order of equal elements would decide (sort, topk, argmax)
unless a sample means to test it: the tie samples use a stable sort and first-index
arg-reductions, whose order is defined. Random samples compare what does not depend on the
draw (a permutation sorts to ``arange``, ``rand`` lies in ``[0, 1)``, dropout's output is
its input scaled where the mask keeps it): the check draws eager's reference and the
captured program's numbers from successive generator states. Their draws equal eager's
under the same seed (``tests/unit/frontend/test_capture_reduction_core.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from spmdc.frontend.torch_compat import below_autograd
from spmdc.tools.core_aten import Sample

A = torch.ops.aten


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _distinct(*shape: int) -> torch.Tensor:
    """Distinct values in a random order (no ties for sort/topk/argmax to break)."""
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n).float() * 0.37 - 2.0 + 0.01 * torch.rand(n)).reshape(shape)


def _ids(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape)


def _router(logits: torch.Tensor, x: torch.Tensor, k: int = 2):
    """A Mixtral-style top-k router: the routing weights, the tokens grouped by expert, each
    expert's offset into the groups and the tokens combined back (weights applied)."""
    tokens, experts = logits.shape
    probs = torch.softmax(logits, dim=-1)
    weights, chosen = torch.topk(probs, k, dim=-1)                  # [T, k]
    weights = weights / weights.sum(dim=-1, keepdim=True)
    flat = chosen.reshape(-1)                                        # [T*k] expert of each slot
    order, perm = torch.sort(flat, stable=True)                      # slots grouped by expert
    counts = torch.histc(flat.float(), bins=experts, min=0, max=experts - 1)
    offsets = torch.cumsum(counts.to(torch.int64), dim=0)            # end of each expert's group
    grouped = x.index_select(0, perm // k)                           # [T*k, D] tokens by expert
    inverse = torch.argsort(perm)                                    # slot -> position in the groups
    back = grouped.index_select(0, inverse).reshape(tokens, k, -1)
    combined = (back * weights.unsqueeze(-1)).sum(dim=1)
    scatter_inv = torch.zeros_like(perm).scatter(0, perm, torch.arange(perm.numel()))
    return combined, weights, order, offsets, inverse, scatter_inv, counts


def _var_dim(x: torch.Tensor) -> torch.Tensor:
    """``var.dim`` is CompositeImplicitAutograd: above autograd it becomes ``var.correction``
    before any dispatch mode sees it; below autograd it is dispatched (and exported) itself."""
    with below_autograd():
        return A.var.dim(x, [0], True)


# non-core ops of this family that never reach a captured graph (so they need no handler)
NOT_REACHED: dict[str, str] = {
    "aten.bincount.default": ("its result's length is the input's largest value + 1, known only at run time: "
                              "torch.export stops on it (a data-dependent shape) before spmdc sees a graph"),
}

SAMPLES: list[Sample] = [
    # -- reductions ------------------------------------------------------------------------
    Sample("aten.amax.default", lambda x: torch.amax(x, dim=(0, 2), keepdim=True), lambda: (_distinct(2, 3, 4),)),
    Sample("aten.amax.default", lambda x: torch.amax(x, dim=1), lambda: (_ids(50, 3, 4).to(torch.int32),),
           train=False),
    Sample("aten.amin.default", lambda x: torch.amin(x, dim=-1), lambda: (_distinct(3, 5),)),
    Sample("aten.amin.default", lambda x: torch.amin(x, dim=(0, 1), keepdim=True), lambda: (_distinct(2, 3, 4),)),
    Sample("aten.amin.default", lambda x: torch.amin(x), lambda: (_ids(50, 3, 4),), train=False),
    Sample("aten.any.default", lambda x: torch.any(x > 1.5), lambda: (_r(3, 4),), train=False),
    Sample("aten.any.dim", lambda x: torch.any(x > 0.5, dim=1), lambda: (_r(3, 4),), train=False),
    Sample("aten.any.dims", lambda x: torch.any(x > 0.5, dim=(0, 2), keepdim=True), lambda: (_r(2, 3, 4),),
           train=False),
    Sample("aten.argmax.default", lambda x: torch.argmax(x), lambda: (_distinct(3, 5),), train=False),
    Sample("aten.argmax.default", lambda x: torch.argmax(x, dim=1, keepdim=True), lambda: (_distinct(3, 5),),
           train=False),
    Sample("aten.argmax.default", lambda x: torch.argmax(x, dim=0), lambda: (_distinct(4, 3),), train=False),
    # ties: the first extreme's index (defined by torch for argmax/argmin and max.dim/min.dim)
    Sample("aten.argmax.default", lambda x: torch.argmax(x, dim=1),
           lambda: (torch.tensor([[1, 3, 3, 0], [2, 2, 2, 2], [0, 5, 1, 5]]),), train=False),
    Sample("aten.argmin.default", lambda x: torch.argmin(x, dim=-1), lambda: (_distinct(3, 5),), train=False),
    Sample("aten.argmin.default", lambda x: torch.argmin(x, keepdim=True), lambda: (_distinct(2, 3),),
           train=False),
    Sample("aten.argmin.default", lambda x: torch.argmin(x, dim=0),
           lambda: (torch.tensor([[1, 0, 3], [0, 0, 3], [1, 4, 3]]),), train=False),
    Sample("aten.max.dim", lambda x: torch.max(x, dim=1), lambda: (_distinct(3, 5),)),
    Sample("aten.max.dim", lambda x: torch.max(x, dim=0, keepdim=True), lambda: (_distinct(4, 3),)),
    Sample("aten.max.dim", lambda x: torch.max(x, dim=1),
           lambda: (torch.tensor([[1, 3, 3, 0], [2, 2, 2, 2]]),), train=False),
    Sample("aten.min.dim", lambda x: torch.min(x, dim=-1, keepdim=True), lambda: (_distinct(3, 5),)),
    Sample("aten.min.dim", lambda x: torch.min(x, dim=0),
           lambda: (torch.tensor([[1, 0, 3], [0, 0, 3], [1, 4, 3]]),), train=False),
    Sample("aten.mean.default", lambda x: torch.mean(x), lambda: (_r(3, 4),)),
    Sample("aten.mean.dim", lambda x: torch.mean(x, dim=(0, 2), keepdim=True), lambda: (_r(2, 3, 4),)),
    Sample("aten.mean.dim", lambda x: torch.mean(x, dim=-1, dtype=torch.float64), lambda: (_r(3, 4),)),
    Sample("aten.prod.default", lambda x: torch.prod(x), lambda: (_r(2, 3) + 1.5,)),
    Sample("aten.prod.default", lambda x: torch.prod(x), lambda: (_ids(5, 3, 4).to(torch.int32) + 1,), train=False),
    Sample("aten.prod.dim_int", lambda x: torch.prod(x, dim=1), lambda: (_r(3, 4),)),
    Sample("aten.prod.dim_int", lambda x: torch.prod(x, dim=0, keepdim=True),
           lambda: (torch.tensor([[1.5, 0.0, -2.0], [2.0, 3.0, 0.0], [0.5, -1.0, 0.0]]),)),
    Sample("aten.prod.dim_int", lambda x: torch.prod(x, dim=-1, dtype=torch.int64),
           lambda: (_ids(4, 3, 5).to(torch.int32),), train=False),
    Sample("aten.sum.dim_IntList", lambda x: torch.sum(x, dim=(0, 2)), lambda: (_r(2, 3, 4),)),
    Sample("aten.sum.dim_IntList", lambda x: torch.sum(x > 0, dim=1, keepdim=True), lambda: (_r(3, 4),),
           train=False),
    Sample("aten.var.correction", lambda x: torch.var(x, dim=1, correction=0, keepdim=True), lambda: (_r(3, 5),)),
    Sample("aten.var.correction", lambda x: torch.var(x), lambda: (_r(3, 5),)),
    Sample("aten.var.dim", _var_dim, lambda: (_r(4, 3),), train=False),
    # -- scans and normalisers -------------------------------------------------------------------
    Sample("aten.cumsum.default", lambda x: torch.cumsum(x, dim=1), lambda: (_r(3, 5),)),
    Sample("aten.cumsum.default", lambda x: torch.cumsum(x, dim=0), lambda: (_ids(9, 6).to(torch.int32),),
           train=False),
    Sample("aten.cumsum.default", lambda x: torch.cumsum(x, dim=-1, dtype=torch.int32), lambda: (_ids(9, 2, 6),),
           train=False),
    Sample("aten.cumsum.default", lambda x: torch.cumsum(x > 0, dim=1), lambda: (_r(3, 5),), train=False),
    Sample("aten._softmax.default", lambda x: torch.softmax(x, dim=-1), lambda: (_r(3, 5),)),
    Sample("aten._softmax.default", lambda x: A._softmax.default(x, 0, False), lambda: (_r(3, 5),)),
    Sample("aten._log_softmax.default", lambda x: torch.log_softmax(x, dim=1), lambda: (_r(3, 5),)),
    Sample("aten._log_softmax.default", lambda x: A._log_softmax.default(x, 0, False), lambda: (_r(4, 3),)),
    # -- ordering --------------------------------------------------------------------------------
    Sample("aten.topk.default", lambda x: torch.topk(x, 2, dim=1), lambda: (_distinct(3, 6),)),
    Sample("aten.topk.default", lambda x: torch.topk(x, 3, dim=0, largest=False), lambda: (_distinct(5, 4),)),
    Sample("aten.topk.default", lambda x: torch.topk(x, 2, dim=-1, sorted=False), lambda: (_distinct(3, 6),)),
    Sample("aten.topk.default", lambda x: torch.topk(x, 3),
           lambda: ((torch.randperm(14) * 3 - 10).reshape(2, 7).to(torch.int32),), train=False),
    Sample("aten.sort.default", lambda x: torch.sort(x, dim=1), lambda: (_distinct(3, 6),)),
    Sample("aten.sort.default", lambda x: torch.sort(x, dim=0, descending=True), lambda: (_distinct(5, 2),)),
    Sample("aten.sort.stable", lambda x: torch.sort(x, stable=True, dim=-1), lambda: (_ids(3, 2, 9),), train=False),
    Sample("aten.sort.stable", lambda x: torch.sort(x, stable=True, dim=0, descending=True),
           lambda: (torch.tensor([[1.0, 2.0], [0.5, 2.0], [1.0, -1.0], [0.5, 2.0]]),)),
    Sample("aten.sort.default", lambda x: torch.argsort(x, dim=1), lambda: (_distinct(3, 6),), train=False),
    # -- gathers and scatters ----------------------------------------------------------------
    Sample("aten.gather.default", lambda x, i: torch.gather(x, 1, i), lambda: (_r(3, 5), _ids(5, 3, 2))),
    Sample("aten.gather.default", lambda x, i: torch.gather(x, 0, i), lambda: (_r(4, 3), _ids(4, 2, 3))),
    Sample("aten.scatter.src", lambda x, s: x.scatter(1, torch.tensor([[0, 3], [2, 1], [4, 0]]), s),
           lambda: (_r(3, 5), _r(3, 2))),
    Sample("aten.scatter.value", lambda x: x.scatter(0, torch.tensor([[1, 0, 2]]), 2.5), lambda: (_r(3, 3),)),
    Sample("aten.scatter_add.default", lambda x, i, s: x.scatter_add(1, i, s),
           lambda: (_r(3, 5), _ids(5, 3, 4), _r(3, 4))),
    Sample("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(1, i, s, "sum"),
           lambda: (_r(3, 5), _ids(5, 3, 4), _r(3, 4))),
    Sample("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(0, i, s, "sum", include_self=False),
           lambda: (_r(4, 3), _ids(4, 5, 3), _r(5, 3)), train=False),
    Sample("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(1, i, s, "prod"),
           lambda: (_r(3, 5), _ids(5, 3, 4), _r(3, 4))),
    Sample("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(1, i, s, "mean", include_self=False),
           lambda: (_r(3, 5), _ids(5, 3, 4), _r(3, 4))),
    Sample("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(1, i, s, "mean"),
           lambda: (_ids(20, 3, 5), _ids(5, 3, 4), _ids(20, 3, 4)), train=False),
    Sample("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(1, i, s, "amax"),
           lambda: (_distinct(3, 5), _ids(5, 3, 4), _distinct(3, 4))),
    Sample("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(1, i, s, "amin", include_self=False),
           lambda: (_distinct(3, 5), _ids(5, 3, 4), _distinct(3, 4))),
    Sample("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(0, i, s, "amax"),
           lambda: (_ids(9, 4, 3), torch.tensor([[0, 1, 3], [3, 3, 0]]), _ids(9, 2, 5)), train=False),
    Sample("aten.index.Tensor", lambda x, i: x[i], lambda: (_r(5, 3), _ids(5, 2, 4))),
    Sample("aten.index.Tensor", lambda x, i, j: x[i, j], lambda: (_r(4, 5, 2), _ids(4, 3, 1), _ids(5, 1, 6))),
    Sample("aten.index.Tensor", lambda x, j: x[:, j], lambda: (_r(3, 5, 2), _ids(5, 4))),
    Sample("aten.index_put.default", lambda x, v: torch.index_put(x, (torch.tensor([2, 0]),), v),
           lambda: (_r(4, 3), _r(2, 3))),
    Sample("aten.index_put.default", lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
           lambda: (_r(4, 3), _ids(4, 6), _r(6, 3))),
    Sample("aten.index_select.default", lambda x, i: torch.index_select(x, 0, i),
           lambda: (_r(5, 3), _ids(5, 7))),
    Sample("aten.index_select.default", lambda x, i: x.index_select(-1, i), lambda: (_r(2, 3, 4), _ids(4, 6))),
    # a 0-d index: forward only (torch's index_add decomposition makes its backward an index_put
    # that eager PyTorch itself rejects; capture refuses it)
    Sample("aten.index_select.default", lambda x: x.index_select(1, torch.tensor(2)), lambda: (_r(3, 4),),
           train=False),
    Sample("aten.index_select.default", lambda x, i: torch.index_select(x, 0, i),
           lambda: (_ids(100, 5, 2), _ids(5, 3).to(torch.int32)), train=False),
    Sample("aten.index_add.default", lambda x, i, s: x.index_add(0, i, s), lambda: (_r(4, 3), _ids(4, 6), _r(6, 3))),
    Sample("aten.index_add.default", lambda x, i, s: x.index_add(1, i, s, alpha=2),
           lambda: (_ids(9, 2, 4), _ids(4, 3), _ids(9, 2, 3)), train=False),
    Sample("aten.embedding.default", lambda w, i: F.embedding(i, w), lambda: (_r(10, 4), _ids(10, 2, 3))),
    Sample("aten.embedding_dense_backward.default",
           lambda g, i: A.embedding_dense_backward.default(g, i, 6, -1, False), lambda: (_r(2, 3, 4), _ids(6, 2, 3))),
    Sample("aten.embedding_dense_backward.default",
           lambda g, i: A.embedding_dense_backward.default(g, i, 6, 2, False),
           lambda: (_r(5, 4), torch.tensor([2, 0, 2, 5, 1]))),
    # -- histograms and routing (not core; mixture-of-experts routing reaches them) ------------------
    Sample("aten.histc.default", lambda x: torch.histc(x, bins=5, min=-1.0, max=1.5), lambda: (_r(4, 6),),
           train=False),
    Sample("aten.histc.default", lambda x: torch.histc(x, bins=4), lambda: (_r(10),), train=False),
    Sample("aten.histc.default", lambda x: torch.histc(x, bins=3, min=0, max=2),
           lambda: (torch.tensor([0.0, 2.0, 1.0, 0.5, -0.1, 2.1, 1.999, 0.666]),), train=False),
    Sample("aten.histc.default", _router, lambda: (_r(6, 4), _r(6, 5)), tol=(1e-5, 1e-5),
           note="Mixtral-style router: softmax, top-2, normalised weights, stable sort of the expert ids, "
                "histc counts, cumsum offsets, index permutation and its inverse (argsort and scatter)"),
    # -- random numbers (what does not depend on the draw; see the module doc) ---------------
    Sample("aten.randperm.default", lambda: torch.sort(torch.randperm(7)).values, lambda: (), train=False),
    Sample("aten.randperm.default", lambda x: x.index_select(0, torch.randperm(5)).sum(0), lambda: (_r(5, 3),),
           tol=(1e-5, 1e-5)),
    Sample("aten.rand.default", lambda: (torch.rand(3, 4) >= 0) & (torch.rand(3, 4) < 1), lambda: (), train=False),
    Sample("aten.rand.default", lambda x: x + torch.rand(3, 4) * 0, lambda: (_r(3, 4),)),
    Sample("aten.randn.default", lambda x: x * (torch.randn(2, 5) * 0 + 1), lambda: (_r(2, 5),)),
    Sample("aten.native_dropout.default", lambda x: _dropout_consistent(x), lambda: (_r(4, 6),), train=False),
    Sample("aten.native_dropout.default", lambda x: A.native_dropout.default(x, 0.4, True)[0] * 0 + x,
           lambda: (_r(4, 6),)),
]


def _dropout_consistent(x: torch.Tensor) -> torch.Tensor:
    """native_dropout's output is its input times 1 / (1 - p) where the mask keeps it, else 0."""
    out, mask = A.native_dropout.default(x, 0.25, True)
    return out == torch.where(mask, x * (1.0 / 0.75), 0.0)
