"""Mixtures of experts capture exactly (forward and training step, interpreter vs eager: outputs
rtol 1e-5 / atol 1e-6, loss and gradients rtol 1e-4 / atol 1e-6): the hand-written MoE of
tests/models/moe.py with an expert that gets no token (sorted-segment and dense per-expert forms),
``torch._grouped_mm`` and HuggingFace's grouped-matmul custom op with their backward, and a clear
refusal for ``bincount`` (a result size known only at run time). The HuggingFace MoE families
(Mixtral, Qwen2-MoE, DeepSeek-V3) are in test_capture_hf.py."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))

import moe  # noqa: E402
from capture_helpers import check_ir, check_train  # noqa: E402

from spmdc.frontend.aten import UnsupportedOpError  # noqa: E402
from spmdc.frontend.capture import capture_program  # noqa: E402
from spmdc.runtime.interpreter import interpret  # noqa: E402


@pytest.mark.parametrize("form", ["moe", "moe_dense"])
def test_hand_written_moe_with_a_starved_expert_matches_eager(form):
    model, (args, target), loss_fn = getattr(moe, form)()
    model.eval()
    fwd = capture_program(model, args)
    check_ir(fwd.module)
    logits, aux = interpret(fwd.module, fwd.arguments(*args))
    with torch.no_grad():
        want_logits, want_aux = model(*args)
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(aux, want_aux, rtol=1e-5, atol=1e-6)
    names = {op.name for op in fwd.module.walk()}
    assert {"tensor.topk", "tensor.histc"} <= names
    if form == "moe":
        assert "tensor.sort" in names and "tensor.index_put" in names   # dispatch, combine (index_add)

    model.train()
    train = capture_program(model, args, train=True, loss_fn=loss_fn, loss_inputs=target)
    check_ir(train.module)
    check_train(train, model, args, loss_fn, target)
    # the starved expert (3) received no token: its weights' gradient is exactly zero, the others' is not
    model.zero_grad()
    loss_fn(model(*args), *target).backward()
    w_up = model.blocks[0].moe.experts.gate_up_proj.grad
    assert torch.count_nonzero(w_up[3]) == 0 and all(torch.count_nonzero(w_up[e]) > 0 for e in range(3))


class GroupedMM(nn.Module):
    """Two grouped matmuls over rows grouped by ``offs`` (one group empty), as torch._grouped_mm users
    write them, or through HuggingFace's fallback custom op."""

    def __init__(self, hf: bool, dtype: torch.dtype):
        super().__init__()
        self.hf = hf
        self.w1 = nn.Parameter((torch.randn(3, 8, 16) * 0.3).to(dtype))   # (E, K, N): 16-byte aligned strides
        self.w2 = nn.Parameter((torch.randn(3, 16, 8) * 0.3).to(dtype))

    def mm(self, x, w, offs):
        if self.hf:
            import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

            return torch.ops.transformers.grouped_mm_fallback(x, w, offs)
        return torch._grouped_mm(x, w, offs=offs)

    def forward(self, x, offs):
        return self.mm(torch.relu(self.mm(x, self.w1, offs)), self.w2, offs)


# torch._grouped_mm runs on CPU in bf16 only (and accumulates in f32, where spmdc's per-group
# torch.matmul rounds like bf16 matmul): bf16 tolerance 2e-2 there, f32 tolerances for HF's op
CASES = [(False, torch.bfloat16, 2e-2, 2e-2), (True, torch.float32, 1e-5, 1e-6)]


@pytest.mark.parametrize("hf,dtype,rtol,atol", CASES, ids=["torch._grouped_mm", "transformers.grouped_mm_fallback"])
def test_grouped_matmuls_and_their_gradients_match_eager(hf, dtype, rtol, atol):
    torch.manual_seed(0)
    model = GroupedMM(hf, dtype)
    x, offs = torch.randn(12, 8).to(dtype), torch.tensor([5, 5, 12], dtype=torch.int32)   # expert 1: no row
    target = torch.randn(12, 8).to(dtype)
    fwd = capture_program(model, (x, offs))
    check_ir(fwd.module)
    (got,) = interpret(fwd.module, fwd.arguments(x, offs))
    with torch.no_grad():
        torch.testing.assert_close(got, model(x, offs), rtol=rtol, atol=atol)
    assert sum(op.name == "tensor.grouped_matmul" for op in fwd.module.walk()) == 2

    def loss_fn(y, t):
        return ((y.float() - t.float()) ** 2).mean()

    train = capture_program(model, (x, offs), train=True, loss_fn=loss_fn, loss_inputs=(target,))
    names = [op.name for op in train.module.walk()]
    assert names.count("tensor.grouped_matmul_wgrad") == 2
    got = interpret(train.module, train.arguments(x, offs, target))
    model.zero_grad()
    loss = loss_fn(model(x, offs), target)
    loss.backward()
    torch.testing.assert_close(got[0], loss.detach(), rtol=max(rtol, 1e-4), atol=atol)
    grads = dict(zip([o.fqn for o in train.info.outputs if o.kind == "gradient"],
                     [g for o, g in zip(train.info.outputs, got) if o.kind == "gradient"]))
    assert set(grads) == {"w1", "w2"}
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=max(rtol, 1e-4), atol=max(atol, 1e-5))
        assert torch.count_nonzero(grads[name][1]) == 0   # the empty group's weights get no gradient


def test_bincount_is_refused_with_what_to_use_instead():
    class Count(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))

        def forward(self, ids):
            return torch.bincount(ids, minlength=4) * self.w   # the counts of 4 experts, weighted

    with pytest.raises(UnsupportedOpError) as err:
        capture_program(Count(), (torch.tensor([0, 1, 1, 3]),))
    msg = str(err.value)
    assert "aten.bincount" in msg and "known only at run time" in msg and "torch.histc" in msg
    assert "sym_size" not in msg and "operator" not in msg.split("rewrite")[0]
