"""spmdc.api.metrics without ranks: the FLOPs, MFU and rate arithmetic, the peak table, its lookup and
overrides, the CUDA memory reading (torch.cuda faked), the torchtitan-style line; and spmdc run's
spinner (spmdc.tools.run_metrics). ``spmdc run`` printing the columns: tests/unit/tools/test_run_cli.py."""

from __future__ import annotations

import io
import time

import pytest
import torch
import torch.nn as nn

import spmdc
from spmdc.api import metrics as M
from spmdc.tools.run_metrics import batch_count, compile_progress, step_suffix


def test_flops_per_token_is_6n_training_2n_forward_plus_the_attention_term():
    assert M.flops_per_token(1000) == 6000
    assert M.flops_per_token(1000, training=False) == 2000
    # torchtitan: 6 N + 12 l h q t (training); a third of it forward
    assert M.flops_per_token(1000, n_layers=2, n_heads=4, head_dim=8, seq_len=16) == 6000 + 12 * 2 * 4 * 8 * 16
    assert M.flops_per_token(1000, training=False, n_layers=2, n_heads=4, head_dim=8, seq_len=16) == \
        2000 + 4 * 2 * 4 * 8 * 16
    with pytest.raises(ValueError, match="needs n_layers, n_heads, head_dim and seq_len together"):
        M.flops_per_token(1000, n_layers=2)


def test_count_params_leaves_out_embeddings_but_counts_a_tied_head_once():
    class LM(nn.Module):
        def __init__(self, tied: bool):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.fc = nn.Linear(4, 4)         # 20
            self.head = nn.Linear(4, 10, bias=False)
            if tied:
                self.head.weight = self.emb.weight

    assert M.count_params(LM(False)) == 20 + 40 and M.count_params(LM(False), embeddings=True) == 40 + 20 + 40
    assert M.count_params(LM(True)) == 20 + 40 and M.count_params(LM(True), embeddings=True) == 20 + 40
    with torch.device("meta"):
        assert M.count_params(LM(False)) == 60   # a meta model counts too
    assert spmdc.count_params is M.count_params and spmdc.flops_per_token is M.flops_per_token


def test_mfu_is_achieved_over_peak():
    assert M.mfu(6e9, 1000.0, 1e13) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="peak_flops must be > 0"):
        M.mfu(1.0, 1.0, 0.0)


def test_peak_table_lookup_aliases_and_unknown_names():
    assert M.device_peak("H100").flops == 989e12 and M.device_peak("h100").name == "h100-sxm"
    assert M.device_peak("h100_pcie").flops == 756e12
    assert M.device_peak("A100").name == "a100-80gb" and M.device_peak("a100-40gb").flops == 312e12
    assert M.device_peak("h200").flops == 989e12 and M.device_peak("l4").flops == 121e12
    assert M.device_peak("MI300X").flops == 1307e12
    assert M.device_peak("cpu").rough and not M.device_peak("h100").rough
    with pytest.raises(ValueError, match=r"unknown device 'h1000'.*did you mean 'h100"):
        M.device_peak("h1000")


@pytest.mark.parametrize("name, want", [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
                                        ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H200", "h200"),
                                        ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100 80GB PCIe", "a100-80gb"),
                                        ("NVIDIA L4", "l4"), ("AMD Instinct MI300X", "mi300x"),
                                        ("NVIDIA L40S", None), ("NVIDIA GeForce RTX 4090", None)])
def test_cuda_device_names_map_to_the_table(name, want):
    got = M.peak_of_device_name(name)
    assert (got.name if got else None) == want


def test_resolve_peak_order_number_name_env_then_device(monkeypatch):
    monkeypatch.delenv(M.ENV_PEAK, raising=False)
    assert M.resolve_peak(None, "cpu") is None                     # a CPU: no MFU unless asked
    assert M.resolve_peak(2.5e12).flops == 2.5e12
    assert M.resolve_peak("3e12").flops == 3e12                    # a number as text
    assert M.resolve_peak("a100").flops == 312e12
    monkeypatch.setenv(M.ENV_PEAK, "7e12")
    assert M.resolve_peak(None, "cpu").flops == 7e12
    assert "$SPMDC_PEAK_FLOPS" in M.resolve_peak(None, "cpu").description
    assert M.resolve_peak("l4").flops == 121e12                    # an explicit peak wins over the environment
    monkeypatch.setenv(M.ENV_PEAK, "h200")
    assert M.resolve_peak(None, "cpu").name == "h200"
    monkeypatch.setenv(M.ENV_PEAK, "-1")
    with pytest.raises(ValueError, match=r"peak FLOP/s \(\$SPMDC_PEAK_FLOPS\) must be a positive number"):
        M.resolve_peak(None, "cpu")


def test_step_records_rates_per_device_and_mfu(monkeypatch):
    monkeypatch.delenv(M.ENV_PEAK, raising=False)
    lines = []
    m = M.StepMetrics(flops_per_token=6e6, peak=1e12, devices=4, log=lines.append, step=10)
    m.start()
    time.sleep(0.02)
    rec = m.stop(torch.tensor(2.5), tokens=8000, grad_norm=torch.tensor(0.5))
    assert rec.step == 11 and rec.loss == 2.5 and rec.grad_norm == 0.5 and rec.seconds >= 0.02
    assert rec.unit == "tps" and rec.per_device == pytest.approx(8000 / rec.seconds / 4)
    assert rec.tflops == pytest.approx(6e6 * rec.per_device / 1e12)
    assert rec.mfu == pytest.approx(6e6 * rec.per_device / 1e12) and not rec.rough
    assert rec.memory is None and "memory: n/a" in lines[0]   # a CPU: not measured cheaply
    assert lines[0].startswith("step: 11  loss:  2.5000  grad_norm:  0.5000  time: ")
    assert f"tps: {round(rec.per_device):,}" in lines[0] and f"mfu: {100 * rec.mfu:.2f}%" in lines[0]
    # samples only: samples/s, MFU from the FLOPs per sample; no peak: no MFU column
    m2 = M.StepMetrics(flops_per_sample=100.0, log=None)
    with m2.timed(samples=50) as t:
        t.loss = 1.0
    assert t.record.unit == "sps" and t.record.per_device == pytest.approx(50 / t.record.seconds)
    assert t.record.tflops == pytest.approx(100.0 * t.record.per_device / 1e12) and t.record.mfu is None
    assert "sps: " in t.record.line() and "mfu" not in t.record.line() and m2.history == [t.record]
    rough = M.StepMetrics(flops_per_token=1.0, peak="cpu", log=None)
    rough.start()
    assert rough.stop(tokens=10).line().split("mfu: ")[1].startswith("~")
    with pytest.raises(RuntimeError, match="without start"):
        rough.stop()


def test_cuda_peak_memory_since_start(monkeypatch):
    calls = []
    fake = {"reset_peak_memory_stats": lambda d=None: calls.append("reset"),
            "synchronize": lambda d=None: calls.append("sync"),
            "max_memory_allocated": lambda d=None: 3 * M.GIB,
            "get_device_properties": lambda d=None: type("P", (), {"total_memory": 12 * M.GIB})()}
    for name, fn in fake.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)   # (no detection of a device name)
    m = M.StepMetrics(device="cuda:0", log=None)
    m.start()
    assert calls == ["sync", "reset"]
    rec = m.stop(1.0, tokens=1)
    assert rec.memory == 3 * M.GIB and rec.memory_pct == pytest.approx(25.0)
    assert "memory:  3.00GiB(25.00%)" in rec.line()


def test_spmdc_run_helpers_count_tokens_or_samples_and_spin_only_on_a_terminal():
    w = type("W", (), {"inputs": [torch.zeros(4, 8, dtype=torch.long)], "kwargs": {}})()
    assert batch_count(w) == {"tokens": 32}
    w.inputs = [torch.zeros(6, 12)]
    assert batch_count(w) == {"samples": 6}
    w.inputs, w.kwargs = [], {"input_ids": torch.zeros(2, 5, dtype=torch.long)}   # HF: keyword inputs
    assert batch_count(w) == {"tokens": 10}
    rec = M.StepRecord(1, 1.0, 0.5, per_device=1234.4, unit="sps", mfu=0.000512, rough=True)
    assert step_suffix(rec) == "  1,234 sps  mfu ~0.0512%"

    class Tty(io.StringIO):
        def isatty(self):
            return True

    pipe, tty = io.StringIO(), Tty()
    with compile_progress(0, "compiling", pipe):
        time.sleep(0.2)
    assert pipe.getvalue() == ""                  # CI logs: nothing
    with compile_progress(1, "compiling", tty):
        time.sleep(0.2)
    assert tty.getvalue() == ""                   # only rank 0
    with compile_progress(0, "compiling", tty):
        time.sleep(0.3)
    assert "[rank 0] compiling ..." in tty.getvalue()
