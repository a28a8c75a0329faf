"""What is live at the measured peak (spmdc.runtime.memory.peak_tensors, torch.profiler's memory
timeline on a CPU): the peak is measure_peak's, the tensors listed are the ones the call made that
were alive then, each named by the op that made it."""

from __future__ import annotations

import torch

from spmdc.runtime.memory import by_op, measure_peak, peak_tensors


def step(x, w):
    a = torch.mm(x, w)            # 64 x 64 floats: 16 KiB, alive until the end
    b = torch.relu(a) * 2.0       # relu's 16 KiB freed once mul made its 16 KiB (48 KiB then)
    c = torch.cat([a, b], dim=0)  # 32 KiB: the peak is a + b + c = 64 KiB
    del a, b
    return c.sum()


def test_the_peak_and_what_is_live_at_it():
    x, w = torch.randn(64, 32), torch.randn(32, 64)
    out, peak, live = peak_tensors(step, x, w)
    assert torch.equal(out, step(x, w))
    _, plain = measure_peak(step, x, w)
    assert peak == plain == 64 * 1024
    rows = {op: (n, b) for op, n, b in by_op(live)}
    assert rows["aten::mm"] == (1, 16 * 1024)
    assert rows["aten::mul"] == (1, 16 * 1024)
    assert rows["aten::cat"] == (1, 32 * 1024)
    assert "aten::relu" not in rows and sum(b for _, b in rows.values()) == peak
    assert [t.nbytes for t in live] == sorted((t.nbytes for t in live), reverse=True)
