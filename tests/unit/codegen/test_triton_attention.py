"""Flash attention in Triton (TRITON_INTERPRET=1) against torch: the forward against
``F.scaled_dot_product_attention`` and the backward against autograd through it, with causal,
boolean and additive masks, grouped and broadcast key heads, odd sizes (rtol/atol 1e-5 in
fp32); and a captured training step on the triton target, whose attention runs in these
kernels, against the torch target."""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))

from codegen_helpers import FakeCollectives  # noqa: E402

from spmdc.codegen import triton_attention as attn  # noqa: E402
from spmdc.compiler import compile_rank, compile_step  # noqa: E402
from spmdc.runtime.collectives import CountingComm  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402

CASES = {  # b, h, hk, sq, sk, e, ev, causal, mask, enable_gqa
    "plain-odd-sizes": (2, 2, 2, 5, 7, 4, 3, False, None, False),
    "causal-two-blocks": (1, 2, 2, 20, 20, 8, 8, True, None, False),
    "bool-mask-gqa": (2, 4, 2, 9, 11, 5, 6, False, "bool", True),
    "additive-mask-one-key-head": (1, 4, 1, 6, 18, 4, 4, False, "add", False),
    "causal-and-bool-mask": (1, 2, 2, 17, 17, 4, 4, True, "bool", False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_kernels_match_torch_attention_and_its_autograd(name):
    b, h, hk, sq, sk, e, ev, causal, mask_kind, gqa = CASES[name]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, sq, e, generator=g, requires_grad=True)
    k = torch.randn(b, hk, sk, e, generator=g, requires_grad=True)
    v = torch.randn(b, hk, sk, ev, generator=g, requires_grad=True)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(b, 1, sq, sk, generator=g) > 0.3
        mask[..., 0] = True
    elif mask_kind == "add":
        mask = torch.randn(1, 1, sq, sk, generator=g)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=0.37,
                                          enable_gqa=gqa)
    do = torch.randn(want.shape, generator=g)
    want.backward(do)
    got = attn.attention_forward(q.detach(), k.detach(), v.detach(), mask, is_causal=causal, scale=0.37)
    torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-5)
    dq, dk, dv = attn.attention_backward(do, q.detach(), k.detach(), v.detach(), want.detach(), mask,
                                         is_causal=causal, scale=0.37, enable_gqa=gqa)
    for got_g, want_g in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        torch.testing.assert_close(got_g, want_g, rtol=1e-5, atol=1e-5)


class TinyAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).reshape(b, t, 8))


def test_training_step_on_the_triton_target_runs_flash_attention():
    torch.manual_seed(0)
    model, x, y = TinyAttention(), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    step = compile_step(model, (x,), mesh=Mesh({"dp": 1}), plan="dp", train=True, loss_fn=F.mse_loss,
                        loss_inputs=(y,))
    outs = {}
    for target in ("torch", "triton"):
        prog = compile_rank(step, 0, target=target)
        if target == "triton":
            assert "spmdc_attn.attention_forward(" in prog.source
            assert "spmdc_attn.attention_backward(" in prog.source
        outs[target] = prog.fn(list(step.arguments), CountingComm(FakeCollectives({"dp": 1})))
    for a, b in zip(outs["torch"], outs["triton"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
