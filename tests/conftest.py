"""The suite's layout-kind x training-feature matrix (issue 26), printed at the end of every run.

A test that checks a feature under a layout kind against one device carries
``@pytest.mark.matrix(kind, feature)`` (several marks for several cells; parametrized cases
carry their own through ``pytest.param(..., marks=[pytest.mark.matrix(...), ...])``). After the run, a table gives each
cell's passed / failed test counts, so a combination nobody tests shows as an empty cell and a
broken one as a failure, in the suite's own output.

The session's ``SPMDC_CACHE_DIR`` (generated code, the compile cache) is a temporary directory
removed at exit, unless the environment sets one: the suite never writes into ``~/.cache/spmdc``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections import defaultdict
from typing import Any

import pytest

if "SPMDC_CACHE_DIR" not in os.environ:   # generated code and compiled programs of the suite: never ~/.cache/spmdc
    _CACHE = tempfile.mkdtemp(prefix="spmdc-test-cache-")   # (set before any launch: the ranks inherit it)
    os.environ["SPMDC_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, True)

KINDS = ("one mesh", "eager", "device groups", "pipeline", "4-D")
FEATURES = ("bf16", "clip", "accum", "act. ckpt", "dropout", "save/resume", "switch", "BatchNorm", "interleaved",
            "local inputs", "hsdp")
_cells: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", f"matrix(kind, feature): a cell of the layout-kind x feature matrix; "
                                       f"kinds {KINDS}, features {FEATURES}")


def pytest_collection_modifyitems(items: list[Any]) -> None:
    for item in items:   # a misspelt cell would silently count nowhere
        for mark in item.iter_markers("matrix"):
            kind, feature = mark.args
            if kind not in KINDS or feature not in FEATURES:
                raise pytest.UsageError(f"{item.nodeid}: matrix cell ({kind!r}, {feature!r}): kinds {KINDS}, "
                                        f"features {FEATURES}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and report.failed):
        for mark in item.iter_markers("matrix"):   # (carried by the report: a pytest-xdist worker sends it on)
            report.user_properties.append(("matrix", "|".join(mark.args)))


def pytest_runtest_logreport(report: Any) -> None:
    """Counts the cells (in the process that reports: the controller under ``pytest -n``)."""
    for key, cell in report.user_properties:
        if key == "matrix":
            kind, feature = cell.split("|")
            _cells[(kind, feature)][0 if report.passed else 1] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _cells:
        return
    w = max(len(k) for k in KINDS)
    tr = terminalreporter
    tr.write_sep("=", "layout kind x feature: tests against one device (passed / failed)")
    tr.write_line(" " * w + " | " + " | ".join(f"{f:^11}" for f in FEATURES))
    for kind in KINDS:
        cells = []
        for f in FEATURES:
            ok, bad = _cells.get((kind, f), (0, 0))
            cells.append(f"{'-' if not ok and not bad else f'{ok} ok' + (f' {bad} FAIL' if bad else ''):^11}")
        tr.write_line(f"{kind:<{w}} | " + " | ".join(cells))
