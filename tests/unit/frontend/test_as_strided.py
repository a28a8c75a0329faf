"""``as_strided`` as views (spmdc.frontend.aten.strided), ``as_strided_scatter`` as nested
``insert_slice``s, and ``diagonal``: what they read and write is what eager PyTorch does, through
capture, the interpreter and the generated code (forward and training step); the rest is refused
with the reason."""

from __future__ import annotations

import random
import re

import pytest
import torch

from spmdc.frontend.aten import UnsupportedOpError
from spmdc.frontend.aten.strided import as_strided_decomposition, dense_order, plan, reference
from spmdc.tools.core_aten import Sample, samples_shape
from spmdc.tools.core_aten.check import check_samples


def _random_view(rng: random.Random, x: torch.Tensor) -> torch.Tensor:
    v = x
    for _ in range(rng.randint(1, 4)):
        k = rng.randint(0, 4)
        if k == 0 and v.dim():
            d = rng.randrange(v.dim())
            a = rng.randrange(v.shape[d])
            b, step = rng.randint(a + 1, v.shape[d]), rng.randint(1, 3)
            v = v.narrow(d, a, b - a)[(slice(None),) * d + (slice(None, None, step),)]
        elif k == 1:
            v = v.permute(*rng.sample(range(v.dim()), v.dim()))
        elif k == 2:
            v = v.unsqueeze(0).expand(rng.randint(1, 3), *v.shape)
        elif k == 3 and v.is_contiguous():
            v = v.view(-1)
        elif v.dim() and v.shape[-1] % 2 == 0:
            v = v.unflatten(-1, (2, v.shape[-1] // 2))
    return v


def test_every_composition_of_views_is_planned_and_reads_the_same_elements():
    rng = random.Random(0)
    for _ in range(1500):
        shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 4)))
        x = torch.arange(torch.Size(shape).numel()).reshape(shape)
        v = _random_view(rng, x)
        p = plan(shape, tuple(v.shape), tuple(v.stride()), v.storage_offset())
        assert not isinstance(p, str), (shape, v.shape, v.stride(), v.storage_offset(), p)
        assert reference(x.flatten().tolist(), p) == v.flatten().tolist()


def test_a_plan_never_reads_other_elements_than_as_strided():
    rng = random.Random(1)
    planned = 0
    for _ in range(4000):
        shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
        n = torch.Size(shape).numel()
        r = rng.randint(0, 3)
        size = tuple(rng.randint(1, 4) for _ in range(r))
        stride = tuple(rng.choice([0, 1, 2, 3, 4, 5, 6, 8, 12, 15, 20]) for _ in range(r))
        offset = rng.randint(0, n)
        p = plan(shape, size, stride, offset)
        if isinstance(p, str):
            continue
        planned += 1
        want = torch.as_strided(torch.arange(n), size, stride, offset)
        assert reference(list(range(n)), p) == want.flatten().tolist()
    assert planned > 1000


@pytest.mark.parametrize("shape,size,stride,offset,why", [
    ((3, 4), (2, 2), (1, 1), 0, "same place"),              # overlapping sliding windows
    ((3, 4), (3, 3), (4, 1), 2, "reads elements 2..12"),    # past the last element
    ((3, 4), (2,), (1,), -1, "reads elements -1"),
    ((12,), (2, 3), (3, 2), 0, "carries"),                    # 0, 2, 4, 3, 5, 7: interleaved
])
def test_reads_that_are_not_views_are_refused_with_the_reason(shape, size, stride, offset, why):
    p = plan(shape, size, stride, offset)
    assert isinstance(p, str)
    assert re.search(why, p), p


def test_the_decomposition_reads_views_of_dense_inputs():
    x = torch.randn(3, 4)
    cases = [(x, (2, 2), (1, 4), 1), (x, (3, 2), (4, 1), 2), (x.t(), (2, 2), (4, 1), 1),
             (x[1:], (2, 2), (1, 4), 5), (x, (2, 3, 2), (1, 0, 4), None), (x, (0, 3), (1, 1), 0)]
    for t, size, stride, offset in cases:
        got = as_strided_decomposition(t, size, stride, offset)
        want = torch.as_strided(t, size, stride, offset)
        assert got.shape == want.shape and torch.equal(got, want)
        if got.numel():
            assert got.data_ptr() == want.data_ptr()   # a view of the same storage, not a copy
    assert dense_order((4, 3), (1, 4)) == (1, 0) and dense_order((3, 2), (8, 1)) is None


@pytest.mark.parametrize("t,size,stride,why", [
    (torch.randn(3, 8)[:, ::2], (2,), (2,), "gaps or overlaps"),
    (torch.randn(3, 4), (3, 2), (1, 1), "not a composition"),
])
def test_the_decomposition_refuses_what_it_cannot_write_as_views(t, size, stride, why):
    with pytest.raises(UnsupportedOpError, match=why):
        as_strided_decomposition(t, size, stride)


@pytest.fixture
def as_strided_decomposed(monkeypatch):
    """The capture's decomposition table with ``as_strided`` -> views (what
    spmdc.frontend.decompositions is to register)."""
    import spmdc.frontend.export as export

    table = export.default_decomposition_table

    def with_views():
        t = table()
        t.setdefault(torch.ops.aten.as_strided.default, as_strided_decomposition)
        return t

    monkeypatch.setattr(export, "default_decomposition_table", with_views)


def _one_by_one(samples, train):
    out = {}
    for s in samples:
        out.update({f"{s.op} {s.note}": v for v in check_samples([s], train=train).failures.values()})
    return out


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_as_strided_and_diagonal_samples_match_eager(as_strided_decomposed, train):
    samples = [s for s in samples_shape.SAMPLES if s.op in ("aten.as_strided.default", "aten.diagonal.default")]
    assert len(samples) >= 6
    assert _one_by_one(samples, train) == {}


def test_as_strided_scatter_writes_through_the_views(as_strided_decomposed):
    samples = [
        Sample("aten.as_strided_scatter.default", lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 4), 1),
               lambda: (torch.randn(3, 4), torch.randn(2, 2)), note="transposed block"),
        Sample("aten.as_strided_scatter.default", lambda x, s: torch.as_strided_scatter(x, s, (4,), (5,), 0),
               lambda: (torch.randn(4, 4), torch.randn(4)), note="diagonal"),
        Sample("aten.as_strided_scatter.default", lambda x, s: torch.as_strided_scatter(x, s, (2, 6), (6, 1), 20),
               lambda: (torch.randn(3, 3, 4), torch.randn(2, 6)), note="a flat segment"),
    ]
    assert _one_by_one(samples, False) == {}
    assert _one_by_one(samples, True) == {}


@pytest.mark.parametrize("fn,why", [
    (lambda x, s: torch.as_strided_scatter(x.t(), s, (2, 2), (1, 4), 1), "not contiguous"),
    (lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 1), 0), "not a composition"),
])
def test_as_strided_scatter_refuses_what_views_cannot_write(fn, why):
    s = Sample("aten.as_strided_scatter.default", fn, lambda: (torch.randn(4, 4), torch.randn(2, 2)), train=False)
    failures = check_samples([s], train=False).failures
    assert set(failures) == {s.op} and why in failures[s.op] and "UnsupportedOpError" in failures[s.op]
