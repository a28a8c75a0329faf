"""PyTorch's Core ATen opset: every overload has a state (translated, decomposed, refused with a
reason), every translated or decomposed one a sample that reaches it and matches eager PyTorch
through capture, the interpreter and the generated code (forward and training step; rtol 1e-5 /
atol 1e-6 unless a sample says more), and the generated coverage and rule tables are current."""

from __future__ import annotations

import pytest

from spmdc.tools.core_aten import all_samples, core_overloads, coverage, refused
from spmdc.tools.core_aten.check import check_reached, check_samples
from spmdc.tools.core_aten.table import render


@pytest.fixture(scope="module")
def reports():
    samples = all_samples()
    return check_samples(samples, train=False), check_samples(samples, train=True)


def test_the_core_opset_is_what_torch_tags_core():
    names = core_overloads()
    assert len(names) > 150 and "aten.mm.default" in names and "aten.convolution.default" in names


def test_every_core_overload_has_a_state_and_a_sample():
    cov = coverage()
    missing = sorted(n for n, c in cov.items() if c.state == "missing")
    assert missing == [], f"{len(missing)} Core ATen overloads have no translation: {missing}"
    unsampled = sorted(n for n, c in cov.items() if c.state != "refused" and not c.samples)
    assert unsampled == [], f"{len(unsampled)} covered overloads have no sample: {unsampled}"
    assert set(refused()) <= set(cov), "a refusal names an overload that is not core"


def test_every_sample_reaches_its_op():
    assert check_reached(all_samples()) == {}


def test_samples_match_eager_forward(reports):
    assert reports[0].failures == {}


def test_samples_match_autograd_in_the_training_step(reports):
    assert reports[1].failures == {}


def test_generated_tables_are_current(reports):
    from spmdc.tools.core_aten.__main__ import ROOT, TARGETS

    texts = render(reports)
    for rel, key in TARGETS.items():
        assert (ROOT / rel).read_text() == texts[key], f"{rel} is stale: run python -m spmdc.tools.core_aten"
