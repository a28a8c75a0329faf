"""``spmdc run``'s load-balance table under expert parallelism, from the ranks' counts."""

from __future__ import annotations

import io

from rich.console import Console

from spmdc.tools.run_report import report_expert_load


def _render(results, steps=2) -> str:
    out = io.StringIO()
    report_expert_load(Console(file=out, width=120), results, steps)
    return out.getvalue()


def test_the_table_gives_each_ranks_experts_tokens_per_step_and_the_imbalance():
    text = _render({0: {"expert_rows": {0: 40, 1: 20}}, 1: {"expert_rows": {2: 10, 3: 10}}})
    assert "tokens per expert per step" in text
    row0 = next(line for line in text.splitlines() if "0-1" in line)
    assert "20 10" in row0 and "30" in row0        # per step: 40/2, 20/2; total 30
    assert "busiest rank 1.50x the mean" in text     # 30 against (30 + 10) / 2


def test_no_table_without_expert_parallelism():
    assert _render({0: {"expert_rows": {}}, 1: {}}) == ""
