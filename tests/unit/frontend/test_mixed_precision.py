"""Mixed precision in the capture: the policy's parsing, the cast shards in the program, and
what cannot run exactly refused with the reason."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy

from spmdc.frontend.capture import capture
from spmdc.frontend.mixed_precision import MixedPrecision, MixedPrecisionError, call_model
from spmdc.frontend.program import ExportError


def test_policy_spellings():
    assert MixedPrecision.parse(None) is None and MixedPrecision.parse("none") is None
    assert MixedPrecision.parse("bf16") == MixedPrecision(torch.bfloat16, torch.float32)
    assert MixedPrecision.parse("FP16").param_dtype == torch.float16
    # FSDP2's policy: reduce_dtype None means float32 here (spmdc reduces in float32)
    p = MixedPrecision.parse(MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    assert p == MixedPrecision(torch.bfloat16, torch.float32)
    assert MixedPrecision.parse(MixedPrecisionPolicy()) is None


@pytest.mark.parametrize("spec,match", [
    ("bf17", "unknown mixed precision 'bf17'"),
    (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16), "reduces gradients in float32"),
    (MixedPrecisionPolicy(param_dtype=torch.bfloat16, output_dtype=torch.float32), "output_dtype"),
    (3, "got int"),
])
def test_what_spmdc_cannot_run_exactly_is_refused(spec, match):
    with pytest.raises(MixedPrecisionError, match=match):
        MixedPrecision.parse(spec)


def test_the_program_casts_each_parameter_once_and_returns_float32_gradients():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x, y = torch.randn(4, 8), torch.randn(4, 4)
    module = capture(model, (x,), train=True, loss_fn=lambda o, t: F.mse_loss(o.float(), t), loss_inputs=(y,),
                     mixed_precision="bf16")
    func = next(op for op in module.body.ops if op.name == "func.func")
    params = [a for i, a in enumerate(func.args) if "spmdc.param" in func.arg_attrs(i)]
    assert len(params) == 4
    for p in params:   # float32 storage, used through one cast to bf16
        assert p.type.element_type == "f32"
        assert [u.owner.name for u in p.uses] == ["tensor.cast"]
        assert p.uses[0].owner.result.type.element_type == "bf16"
    grads = [v for i, v in enumerate(func.return_op.operands) if "spmdc.grad_of" in func.res_attrs(i)]
    assert len(grads) == 4 and all(g.type.element_type == "f32" for g in grads)
    assert any(op.name == "tensor.matmul" and op.result.type.element_type == "bf16" for op in func.walk())


class _MixesBuffer(nn.Module):
    """A float32 buffer in a matmul with activations of cast (bf16) parameters: torch's matmul does not promote."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("basis", torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) @ self.basis


def test_a_model_mixing_buffers_and_cast_parameters_is_refused_with_the_reason():
    torch.manual_seed(0)
    model, x, y = _MixesBuffer(), torch.randn(4, 8), torch.randn(4, 4)
    with pytest.raises(RuntimeError):   # eagerly, under the same policy, it fails too
        call_model(model, (x,), {}, MixedPrecision.parse("bf16"))
    with pytest.raises(ExportError, match="under mixed precision bfloat16 .* buffers"):
        capture(model, (x,), train=True, loss_fn=lambda o, t: F.mse_loss(o.float(), t), loss_inputs=(y,),
                mixed_precision="bf16")


def test_a_dtype_mix_without_a_policy_is_refused_naming_the_op():
    torch.manual_seed(0)
    model = nn.Linear(8, 4).to(torch.float64)
    with pytest.raises(RuntimeError):   # eagerly too
        model(torch.randn(2, 8))
    with pytest.raises(ExportError, match=r"'aten.mm'.*different element types: f32, f64.*cast the model and its"):
        capture(model, (torch.randn(2, 8),))


@pytest.mark.parametrize("name", ["mlp", "gpt2-tiny", "llama-tiny"])
def test_every_tiny_built_in_workload_runs_under_bf16(name):
    """The built-ins keep their tables and masks in the activations' dtype (llama-tiny's rotary cos/sin and
    causal mask were float32: its attention's matmul failed under the policy, eagerly as in the capture)."""
    from spmdc.frontend.workloads import load_workload

    w = load_workload(name)
    out = call_model(w.model, tuple(w.inputs), dict(w.kwargs), MixedPrecision.parse("bf16"))
    assert out.dtype == torch.bfloat16
    module = capture(w.model, tuple(w.inputs), train=True, loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs),
                     mixed_precision="bf16")
    func = next(op for op in module.body.ops if op.name == "func.func")
    assert any(op.name == "tensor.matmul" and op.result.type.element_type == "bf16" for op in func.walk())
