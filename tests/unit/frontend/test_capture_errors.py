"""Unsupported ops fail with one paragraph naming the op and the module path; bad workload
specs list the built-ins; the ``spmdc capture`` / ``spmdc show`` commands work end to end."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import spmdc
from spmdc.frontend.aten import UnsupportedOpError
from spmdc.frontend.workloads import WorkloadError, load_workload


class Spectral(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


class WithFFT(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.mixer = nn.Sequential(Spectral())

    def forward(self, x):
        return self.mixer(self.proj(x))


@torch.library.custom_op("spmdc_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


class WithCustomOp(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        return twice(self.inner(x))


def _one_paragraph(msg: str) -> None:
    assert "\n" not in msg and len(msg) < 1200, msg


def test_fft_names_op_and_module_path():
    with pytest.raises(UnsupportedOpError) as ei:
        spmdc.capture(WithFFT(), (torch.randn(2, 8),))
    msg = str(ei.value)
    _one_paragraph(msg)
    assert "aten.fft_rfft" in msg and "module 'mixer.0'" in msg and "Spectral" in msg
    assert ei.value.module_path == "mixer.0"
    assert "torch.fft.rfft" in msg  # the user's source line


def test_custom_op_names_op_and_module_path():
    with pytest.raises(UnsupportedOpError) as ei:
        spmdc.capture(WithCustomOp(), (torch.randn(2, 4),))
    msg = str(ei.value)
    _one_paragraph(msg)
    assert "spmdc_test.twice" in msg and "top-level module" in msg


def test_bad_workload_specs_list_builtins(tmp_path):
    for spec in ["gpt3", str(tmp_path / "missing.py") + ":factory", "json:nothing_here", "no_such_mod_xyz:f"]:
        with pytest.raises(WorkloadError) as ei:
            load_workload(spec)
        assert spec.split(":")[0].split("/")[-1] in str(ei.value)
    with pytest.raises(WorkloadError, match="mlp, gpt2-tiny, llama-tiny"):
        load_workload("gpt3")
    bad = tmp_path / "bad.py"
    bad.write_text("def factory():\n    return 42\n")
    with pytest.raises(WorkloadError, match="must return"):
        load_workload(f"{bad}:factory")


def test_module_factory_spec():
    w = load_workload("spmdc.examples.mlp:factory")
    assert w.inputs[0].shape == (8, 16) and w.loss_inputs[0].shape == (8, 8)


def test_cli_capture_and_show(tmp_path, capsys):
    from spmdc.tools.cli import main

    out = tmp_path / "mlp.mlir"
    assert main(["capture", "mlp", "--train", "-o", str(out)]) == 0
    text = out.read_text()
    assert '{spmdc.param = "fc1.weight"}' in text and "{spmdc.loss}" in text
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "training step" in shown and "tensor.matmul" in shown and "fc1.weight" in shown
    assert main(["capture", "nope"]) == 1
    assert "built-in workloads" in capsys.readouterr().err
