"""The pooling, upsampling, grid-sampling, distance and embedding-bag ops: their torch
implementation against eager PyTorch's functional API, their shape inference against PyTorch's,
and their sharding rules against the op itself: computing the shards of a parallel factor
independently gives the shards of the global result, the partial results of a reduction factor
sum to it, and a linear operand's ``P(sum)`` parts give the parts of the result.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from spmdc.dialects import tensor as T
from spmdc.dialects.shard.rules import OpShardingRule
from spmdc.dialects.tensor.pool import pool_output_size
from spmdc.ir.core import InferError, Value
from spmdc.ir.types import TensorType, element_type_of_torch


def _type(t: torch.Tensor) -> TensorType:
    return TensorType(tuple(t.shape), element_type_of_torch(t.dtype))


def make(cls, inputs, attrs, result_types=None):
    return cls.create([Value(_type(t)) for t in inputs], attrs, result_types)


def run(cls, inputs, attrs, result_types=None) -> list[torch.Tensor]:
    out = make(cls, inputs, attrs, result_types).reference(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _chunk(t: torch.Tensor, dims, f: int, k: int, parts: int) -> torch.Tensor:
    return t.chunk(parts, dims.index(f))[k] if f in dims else t


def check_rule(cls, inputs, attrs, result_types=None, parts: int = 2) -> list[int]:
    """Run the op shard by shard along every shardable factor; returns the factors checked."""
    op = make(cls, inputs, attrs, result_types)
    rule: OpShardingRule = op.sharding_rule()
    want = run(cls, inputs, attrs, result_types)
    types = [r.tensor_type for r in op.results]
    checked = []
    for f in range(rule.num_factors):
        if f in rule.blocked or rule.factor_sizes[f] % parts:
            continue
        pieces = []
        for k in range(parts):
            local = [_chunk(t, dims, f, k, parts) for t, dims in zip(inputs, rule.operands)]
            local_types = [t.with_shape(tuple(s // parts if d == f else s for s, d in zip(t.shape, dims)))
                           for t, dims in zip(types, rule.results)]
            pieces.append(run(cls, local, attrs, local_types))
        for j, dims in enumerate(rule.results):
            if f in dims:
                got = torch.cat([p[j] for p in pieces], dims.index(f))
            else:
                assert rule.reduction_kind(f) == "sum", f"factor {f} leaves result {j} without saying how"
                got = sum(p[j] for p in pieces)
            torch.testing.assert_close(got, want[j], rtol=1e-5, atol=1e-5, msg=lambda m, f=f: f"factor {f}: {m}")
        checked.append(f)
    return checked


def check_linear(cls, inputs, attrs, result_types=None) -> None:
    """``partial_one``: the op of a sum of two parts of that operand is the sum of the op of each."""
    rule = make(cls, inputs, attrs, result_types).sharding_rule()
    assert rule.partial_one
    for i in rule.partial_one:
        a = torch.randn_like(inputs[i])
        parts = [list(inputs), list(inputs)]
        parts[0][i], parts[1][i] = a, inputs[i] - a
        got = [x + y for x, y in zip(run(cls, parts[0], attrs, result_types), run(cls, parts[1], attrs, result_types))]
        for g, w in zip(got, run(cls, inputs, attrs, result_types)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


X = torch.randn(2, 4, 6, 6, generator=torch.Generator().manual_seed(0))
DISTINCT = (torch.randperm(2 * 4 * 6 * 6, generator=torch.Generator().manual_seed(1)).float() / 100).reshape(2, 4, 6, 6)


# -- shapes ----------------------------------------------------------------------------------------
def _windows():
    for n, k, s, p, d, ceil in itertools.product((5, 6, 7), (2, 3), (1, 2, 3), (0, 1), (1, 2), (False, True)):
        span = d * (k - 1) + 1
        if 2 * p <= span <= n + 2 * p:   # what PyTorch accepts
            yield n, k, s, p, d, ceil


@pytest.mark.parametrize("n,k,s,p,d,ceil", list(_windows()))
def test_pooled_size_is_pytorchs(n, k, s, p, d, ceil):
    x = torch.zeros(1, 1, n, n)
    want = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil).shape[-1]
    assert pool_output_size(n, k, s, p, d, ceil) == want


def test_a_window_wider_than_half_its_padding_is_refused():
    with pytest.raises(InferError, match="at most half"):
        make(T.AvgPoolOp, [X], {"kernel": [2, 2], "stride": [2, 2], "padding": [2, 2]})


# -- semantics -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                                          count_include_pad=False),
                                dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
                                dict(kernel_size=3, stride=2, padding=1, divisor_override=4)])
def test_avg_pool_is_pytorchs_and_its_gradient_is_autograds(kw):
    def pair(v):
        return list(v) if isinstance(v, tuple) else [v, v]

    k = pair(kw["kernel_size"])
    s, p = pair(kw["stride"]) if "stride" in kw else k, pair(kw.get("padding", 0))
    attrs = {"kernel": k, "stride": s, "padding": p, "ceil_mode": kw.get("ceil_mode", False),
             "count_include_pad": kw.get("count_include_pad", True)}
    if "divisor_override" in kw:
        attrs["divisor_override"] = kw["divisor_override"]
    x = X.clone().requires_grad_()
    want = F.avg_pool2d(x, **kw)
    (got,) = run(T.AvgPoolOp, [X], attrs)
    torch.testing.assert_close(got, want.detach())
    dy = torch.randn_like(want)
    (dx,) = torch.autograd.grad(want, x, dy)
    (gdx,) = run(T.AvgPoolGradOp, [dy], attrs, [_type(X)])
    torch.testing.assert_close(gdx, dx)


def test_max_pool_gives_pytorchs_maxima_and_flat_indices():
    attrs = {"kernel": [2, 3], "stride": [1, 2], "padding": [1, 1], "dilation": [2, 1], "ceil_mode": True}
    v, i = run(T.MaxPoolOp, [DISTINCT], attrs)
    wv, wi = F.max_pool2d(DISTINCT, (2, 3), (1, 2), (1, 1), (2, 1), ceil_mode=True, return_indices=True)
    torch.testing.assert_close(v, wv)
    assert torch.equal(i, wi) and i.dtype == torch.int64


def test_adaptive_pool_and_gradient_are_pytorchs():
    x = X.clone().requires_grad_()
    want = F.adaptive_avg_pool2d(x, (4, 5))
    (got,) = run(T.AdaptiveAvgPoolOp, [X], {"output_size": [4, 5]})
    torch.testing.assert_close(got, want.detach())
    dy = torch.randn_like(want)
    (dx,) = torch.autograd.grad(want, x, dy)
    (gdx,) = run(T.AdaptiveAvgPoolGradOp, [dy], {"spatial_dims": 2}, [_type(X)])
    torch.testing.assert_close(gdx, dx)


def test_nearest_upsampling_reads_the_rows_the_scale_factors_pick():
    want = F.interpolate(X, scale_factor=(1.5, 0.7), mode="nearest")
    (got,) = run(T.UpsampleNearestOp, [X], {"output_size": [9, 4], "scales": [1.5, 0.7]})
    torch.testing.assert_close(got, want)
    (by_size,) = run(T.UpsampleNearestOp, [X], {"output_size": [9, 4]})
    torch.testing.assert_close(by_size, F.interpolate(X, size=(9, 4), mode="nearest"))
    assert not torch.equal(got, by_size)   # 0.7 picks other columns than 6 / 4 does


def test_grid_sample_and_both_gradients_are_pytorchs():
    x = X.clone().requires_grad_()
    g = (torch.rand(2, 3, 5, 2, generator=torch.Generator().manual_seed(2)) * 2.2 - 1.1).requires_grad_()
    want = F.grid_sample(x, g, mode="bilinear", padding_mode="border", align_corners=True)
    attrs = {"interpolation_mode": 0, "padding_mode": 1, "align_corners": True}
    (got,) = run(T.GridSampleOp, [X, g.detach()], attrs)
    torch.testing.assert_close(got, want.detach())
    dy = torch.randn_like(want)
    dx, dg = torch.autograd.grad(want, (x, g), dy)
    gdx, gdg = run(T.GridSampleGradOp, [dy, X, g.detach()], attrs)
    torch.testing.assert_close(gdx, dx)
    torch.testing.assert_close(gdg, dg)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_distances_and_gradients_are_pytorchs(p):
    a = torch.randn(2, 5, 6).requires_grad_()
    b = torch.randn(2, 4, 6).requires_grad_()
    want = torch.cdist(a, b, p, compute_mode="donot_use_mm_for_euclid_dist")
    (d,) = run(T.CdistOp, [a.detach(), b.detach()], {"p": p})
    torch.testing.assert_close(d, want.detach())
    g = torch.randn_like(want)
    if p > 0:
        da, db = torch.autograd.grad(want, (a, b), g)
        (gda,) = run(T.CdistGradOp, [g, a.detach(), b.detach(), d], {"p": p})
        torch.testing.assert_close(gda, da)
    x = a.detach()[0].clone().requires_grad_()
    q = F.pdist(x, p)
    (gq,) = run(T.PdistOp, [x.detach()], {"p": p})
    torch.testing.assert_close(gq, q.detach())
    if p > 0:
        gg = torch.randn_like(q)
        (dx,) = torch.autograd.grad(q, x, gg)
        (gdx,) = run(T.PdistGradOp, [gg, x.detach(), gq], {"p": p})
        torch.testing.assert_close(gdx, dx)


def test_the_matrix_product_form_is_eagers_choice_past_25_rows():
    a, b = torch.randn(30, 6) + 100, torch.randn(4, 6) + 100   # far from 0: the two forms round apart
    (mm,) = run(T.CdistOp, [a, b], {"p": 2.0, "mm": True})
    (direct,) = run(T.CdistOp, [a, b], {"p": 2.0})
    torch.testing.assert_close(mm, torch.cdist(a, b), rtol=0, atol=0)
    torch.testing.assert_close(direct, torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
                               rtol=0, atol=0)
    assert not torch.equal(mm, direct)
    with pytest.raises(InferError, match="needs p = 2"):
        make(T.CdistOp, [a, b], {"p": 1.0, "mm": True})


def test_max_embedding_bags_are_pytorchs():
    w = torch.randn(10, 6)
    ids, off = torch.tensor([1, 4, 4, 0, 7, 2, 9, 3]), torch.tensor([0, 3, 3, 5])
    out, idx = run(T.EmbeddingBagMaxOp, [w, ids, off], {"include_last_offset": False, "padding_idx": 4})
    want = F.embedding_bag(ids, w, off, mode="max", padding_idx=4)
    torch.testing.assert_close(out, want)
    assert torch.equal(out[1], torch.zeros(6))   # the empty bag
    assert torch.equal(idx[0], torch.ones(6, dtype=torch.int64))   # bag 0 without its padding rows: row 1


# -- sharding rules --------------------------------------------------------------------------------
def _grid():
    return torch.rand(2, 3, 5, 2, generator=torch.Generator().manual_seed(3)) * 2 - 1


RULE_CASES = {
    "avg_pool": (T.AvgPoolOp, [X], {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": True,
                                    "count_include_pad": False}, None, 2),
    "avg_pool_grad": (T.AvgPoolGradOp, [torch.randn(2, 4, 3, 3)], {"kernel": [2, 2], "stride": [2, 2],
                                                                    "padding": [0, 0]}, [_type(X)], 2),
    "max_pool": (T.MaxPoolOp, [DISTINCT], {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0],
                                           "dilation": [1, 1]}, None, 2),
    "adaptive_avg_pool": (T.AdaptiveAvgPoolOp, [X], {"output_size": [4, 5]}, None, 2),
    "adaptive_avg_pool_grad": (T.AdaptiveAvgPoolGradOp, [torch.randn(2, 4, 4, 5)], {"spatial_dims": 2},
                               [_type(X)], 2),
    "upsample_nearest": (T.UpsampleNearestOp, [X], {"output_size": [9, 4]}, None, 2),
    "grid_sample": (T.GridSampleOp, [X, _grid()], {"interpolation_mode": 0, "padding_mode": 0,
                                                   "align_corners": False}, None, 2),
    "grid_sample_grad": (T.GridSampleGradOp, [torch.randn(2, 4, 3, 5), X, _grid()],
                         {"interpolation_mode": 0, "padding_mode": 0, "align_corners": False}, None, 2),
    "embedding_bag_max": (T.EmbeddingBagMaxOp, [torch.randn(10, 6), torch.tensor([1, 4, 4, 0, 7, 2, 9, 3]),
                                                torch.tensor([0, 3, 3, 5])],
                          {"include_last_offset": False, "padding_idx": -1}, None, 1),
}


def _cdist_case(p: float):
    a, b = torch.randn(2, 4, 6), torch.randn(2, 6, 6)
    (d,) = run(T.CdistOp, [a, b], {"p": p})
    return [torch.randn_like(d), a, b, d]


@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_the_rule_shards_what_computes_apart(name):
    cls, inputs, attrs, types, n_parallel = RULE_CASES[name]
    checked = check_rule(cls, inputs, attrs, types)
    assert len(checked) == n_parallel   # batch and channels (the embedding dim for bags)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
def test_cdist_rules_shard_rows_and_sum_the_other_rows(p):
    a, b = torch.randn(2, 4, 6), torch.randn(2, 6, 6)
    assert len(check_rule(T.CdistOp, [a, b], {"p": p})) == 3               # batch, both row dims
    rule = make(T.CdistGradOp, _cdist_case(p), {"p": p}).sharding_rule()
    assert [k for _, k in rule.reductions] == ["sum"]
    assert len(check_rule(T.CdistGradOp, _cdist_case(p), {"p": p})) == 4   # batch, rows, coords; b's rows sum
    check_linear(T.CdistGradOp, _cdist_case(p), {"p": p})


def test_pdist_gradient_shards_coordinates():
    x = torch.randn(5, 6)
    (q,) = run(T.PdistOp, [x], {"p": 2.0})
    case = [torch.randn_like(q), x, q]
    assert len(check_rule(T.PdistGradOp, case, {"p": 2.0})) == 1
    check_linear(T.PdistGradOp, case, {"p": 2.0})
    assert make(T.PdistOp, [x], {"p": 2.0}).sharding_rule().blocked == frozenset(range(3))


@pytest.mark.parametrize("name", ["avg_pool", "avg_pool_grad", "adaptive_avg_pool", "adaptive_avg_pool_grad",
                                  "upsample_nearest", "grid_sample"])
def test_linear_ops_let_partial_sums_through(name):
    cls, inputs, attrs, types, _ = RULE_CASES[name]
    check_linear(cls, inputs, attrs, types)


def test_spatial_dims_need_replication_and_the_check_would_catch_it(monkeypatch):
    cls, inputs, attrs, types, _ = RULE_CASES["avg_pool"]
    rule = make(cls, inputs, attrs, types).sharding_rule()
    assert rule.blocked == frozenset({2, 3, 4, 5})
    assert str(rule).startswith("([i, j, k, l]) -> ([i, j, m, n])")
    assert not make(T.MaxPoolOp, [DISTINCT], RULE_CASES["max_pool"][2]).sharding_rule().partial_one
    from dataclasses import replace

    unblocked = replace(rule, blocked=frozenset({3, 4, 5}))   # pretend the rows could be split
    monkeypatch.setattr(cls, "sharding_rule", lambda self: unblocked)
    with pytest.raises(AssertionError):
        check_rule(cls, inputs, attrs, types)
