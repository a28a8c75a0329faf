"""Warm starts on 4 gloo ranks (spmdc.compiler.compile_cache): one launch runs every case
(:func:`compile_cache_workers.cache_cases`) against a fresh ``SPMDC_CACHE_DIR``.

A second ``spmdc.compile`` of the same job (a fresh model in a fresh module) loads every global
program and every rank's program from the cache — one mesh, device groups and pipeline stages —
generates the same code and trains to the same numbers, bitwise, as the first, which equal one
device's (rtol 1e-4 / atol 1e-5), its rank programs loaded from their flat form (not parsed), its
parameters leaf ``nn.Parameter``s; another batch size misses; an entry overwritten with garbage
warns on the rank that reads it, is compiled again with the same numbers and rewritten (the next
compile hits); ``compile_cache=False`` compiles.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import compile_cache_workers as W  # noqa: E402
import rank_checks  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    old = os.environ.get("SPMDC_CACHE_DIR")
    os.environ["SPMDC_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))   # the ranks inherit it
    try:
        return launch(W.cache_cases, 4, timeout_s=900)
    finally:
        if old is None:
            os.environ.pop("SPMDC_CACHE_DIR", None)
        else:
            os.environ["SPMDC_CACHE_DIR"] = old


def total(ranks, case, what):
    return sum(ranks[r][case][what] for r in range(4))


def one_device(rows=8):
    model = W.model()
    x, y = W.batch(rows)
    return rank_checks.train_one_device(model, x, y, F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                                        W.STEPS)


def same_training(ranks, a, b):
    for r in range(4):
        assert ranks[r][a]["losses"] == ranks[r][b]["losses"], (r, a, b)
        sa, sb = ranks[r][a]["state"], ranks[r][b]["state"]
        assert sa.keys() == sb.keys() and sa
        for k in sa:
            assert torch.equal(sa[k], sb[k]), (r, a, b, k)


@pytest.mark.parametrize("kind", ["mesh", "groups", "pipeline"])
def test_a_second_compile_is_a_hit_and_trains_to_the_same_numbers(ranks, kind):
    cold, warm = f"{kind} cold", f"{kind} warm"
    compiled = total(ranks, cold, "misses")
    assert compiled >= 2, ranks[0][cold]          # (a training module compiles its forward program too)
    assert total(ranks, cold, "uncacheable") == 0, [ranks[r][cold]["reason"] for r in range(4)]
    assert total(ranks, cold, "stores") == compiled and total(ranks, cold, "hits") == 0
    assert total(ranks, warm, "hits") == compiled and total(ranks, warm, "misses") == 0
    # every role's program (partition, per-rank passes) comes from the cache too; with shared role
    # programs (the default) only the lowest rank of each role partitions, the others receive it
    assert total(ranks, cold, "rank_hits") == 0 and total(ranks, cold, "rank_misses") >= 2
    assert total(ranks, warm, "rank_hits") == total(ranks, cold, "rank_misses")
    assert total(ranks, warm, "rank_misses") == 0
    assert total(ranks, warm, "rank_parsed") == 0   # loaded from their flat form, not parsed
    for r in range(4):   # parameters as nn.Parameter made them (dtensor_parameter skips its detach)
        for case in (cold, warm):
            params = ranks[r][case]["params"]
            assert params and all(p[1:] == (True, True, True) for p in params), (r, case, params)
    same_training(ranks, cold, warm)
    for r in range(4):
        assert ranks[r][warm]["sources"] == ranks[r][cold]["sources"]   # the same generated code
    for r in range(4):
        rank_checks.close(torch.tensor(ranks[r][warm]["losses"]), torch.stack(one_device()), RTOL, ATOL,
                          where=f"rank {r} {warm}")


def test_another_batch_size_misses(ranks):
    assert total(ranks, "mesh shape", "hits") == 0
    assert total(ranks, "mesh shape", "misses") == total(ranks, "mesh cold", "misses")
    rank_checks.close(torch.tensor(ranks[0]["mesh shape"]["losses"]), torch.stack(one_device(16)), RTOL, ATOL)


def test_a_corrupt_entry_is_compiled_again_with_a_warning_and_rewritten(ranks):
    readers = [r for r in range(4) if ranks[r]["mesh warm"]["key"]]
    assert len(readers) == total(ranks, "mesh cold", "misses")   # every compiling rank garbled its entry
    for r in range(4):
        msgs = ranks[r]["mesh corrupt"]["cache_warnings"]
        if r in readers:
            assert len(msgs) == 1 and "unreadable" in msgs[0] and "compiling again" in msgs[0], msgs
            assert ranks[r]["mesh warm"]["key"] in msgs[0]
        else:
            assert msgs == []
    assert total(ranks, "mesh corrupt", "corrupt") == len(readers)
    assert total(ranks, "mesh corrupt", "hits") == 0 and total(ranks, "mesh corrupt", "stores") == len(readers)
    same_training(ranks, "mesh cold", "mesh corrupt")
    assert total(ranks, "mesh rewritten", "hits") == len(readers)
    same_training(ranks, "mesh cold", "mesh rewritten")


def test_the_option_off_compiles(ranks):
    assert total(ranks, "mesh off", "hits") == 0
    assert total(ranks, "mesh off", "bypassed") == total(ranks, "mesh cold", "misses")
    assert total(ranks, "mesh off", "rank_hits") == total(ranks, "mesh off", "rank_misses") == 0
    same_training(ranks, "mesh cold", "mesh off")


def test_entries_are_whole_files_named_by_their_keys(ranks):
    names = ranks[0]["entries"]
    assert names and all(n.endswith(".pkl") and len(n) == 64 + 4 for n in names), names   # no temporary files
