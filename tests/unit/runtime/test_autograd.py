"""Autograd through ``cm(x)`` (spmdc.api.autograd_call): one 4-rank gloo launch runs every case
(:data:`autograd_workers.CASES`); each is compared here with the same loop in plain PyTorch.

* PyTorch's FSDP2 tutorial loop (own loss on the output, ``loss.backward()``, AdamW + cosine
  schedule, ``clip_grad_norm_`` — torch's on ``cm.parameters()`` and ``cm.clip_grad_norm_``),
  with ``fully_shard`` replaced by ``spmdc.compile``, under fsdp, fsdp+tp and megatron, outputs
  as DTensors or full tensors, dropout on: the losses equal plain PyTorch's and FSDP2's (rtol
  1e-5), the clipped norms too, the parameters after 10 steps (rtol 1e-4, atol 1e-5).
* ``inputs="local"`` with DistributedSampler pieces: each rank's own loss on its own output
  piece; the mean of the replicas' losses and the parameters equal one device on the whole batch.
* Eager layers before (an embedding: its gradient comes through the module's input) and after
  one or two compiled modules (the FSDP2 loop with an eager head on a compiled trunk, clipped
  together: ``cm.clip_grad_norm_(..., also=head.parameters())``); gradient accumulation by
  repeated backward; ``no_grad`` and ``inference_mode`` (no graph, no vjp program); BatchNorm's
  statistics updated once per forward; a frozen parameter; spmdc.eager; the refusals.
* ``autograd_activations``: 'saved' (the default; every case above) runs the forward once, the
  backward resumes the suspended vjp program; 'recompute' runs the forward program and then the
  whole vjp program. The collectives per step differ by exactly the forward program's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import autograd_workers as W  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def ranks():
    return launch(W.autograd_cases, 4, timeout_s=900)


def close(a, b, rtol=RTOL, atol=ATOL):
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def same_state(got, want):
    assert set(got) == set(want)
    for k in want:
        close(got[k], want[k])


@pytest.mark.parametrize("case", ["fsdp_full", "fsdp_tp_dtensor", "fsdp_tp_full_cmclip", "megatron_full",
                                  "fsdp_tp_recompute"])
def test_fsdp2_loop_equals_plain_pytorch_and_fsdp2(ranks, case):
    plain, fsdp2 = ranks[0]["plain"], ranks[0]["fsdp2"]
    close(torch.tensor(fsdp2["losses"]), torch.tensor(plain["losses"]), rtol=1e-5, atol=0)   # (the reference)
    for r in range(4):
        got = ranks[r][case]
        close(torch.tensor(got["losses"]), torch.tensor(plain["losses"]), rtol=1e-5, atol=0)
        close(torch.tensor(got["losses"]), torch.tensor(fsdp2["losses"]), rtol=1e-5, atol=0)
        close(torch.tensor(got["norms"]), torch.tensor(plain["norms"]), rtol=1e-5, atol=0)
        same_state(got["state"], plain["state"])
    assert min(plain["norms"]) > W.MAX_NORM   # every step clipped
    assert ranks[0][case]["grad_fn"] == "CompiledCallBackward"
    assert ranks[0][case]["vjp_programs"] == 1   # one vjp program, reused for every step


@pytest.mark.parametrize("case", ["head_fsdp", "head_fsdp_tp"])
def test_fsdp2_loop_with_an_eager_head_on_a_compiled_trunk(ranks, case):
    plain = ranks[0]["head_plain"]
    assert min(plain["norms"]) > W.MAX_NORM
    for r in range(4):
        got = ranks[r][case]
        close(torch.tensor(got["losses"]), torch.tensor(plain["losses"]), rtol=1e-5, atol=0)
        close(torch.tensor(got["norms"]), torch.tensor(plain["norms"]), rtol=1e-5, atol=0)   # head + trunk: one norm
        same_state(got["state"], plain["state"])


def test_local_pieces_train_as_one_device_on_the_whole_batch(ranks):
    want = ranks[0]["local_plain"]
    by_replica = {}
    for r in range(4):
        got = ranks[r]["local_fsdp_tp"]
        assert got["shapes"] == [("Tensor", (8, 6))]
        assert got["before_compile"] == got["sampler"]   # this rank's piece of the output, a plain tensor
        by_replica.setdefault(got["sampler"][1], got["losses"])
        assert by_replica[got["sampler"][1]] == got["losses"]   # the tp pair: one replica, one loss
        same_state(got["state"], want["state"])
    assert sorted(by_replica) == [0, 1] and ranks[0]["local_fsdp_tp"]["sampler"] == (2, 0)
    mean = (torch.tensor(by_replica[0]) + torch.tensor(by_replica[1])) / 2
    close(mean, torch.tensor(want["losses"]), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", ["sandwich", "sandwich_two"])
def test_eager_layers_around_compiled_modules(ranks, case):
    for r in range(4):
        got = ranks[r][case]
        for loss, ref in got["losses"]:
            assert loss == pytest.approx(ref, rel=1e-5)
        for name, (g, want) in got["grads"].items():
            close(g, want), name
        same_state(got["state"], got["ref_state"])


@pytest.mark.parametrize("case", ["local_sandwich", "local_sandwich_dp4"])
def test_local_pieces_through_eager_layers(ranks, case):
    for r in range(4):
        for name, (g, want) in ranks[r][case]["grads"].items():
            close(g, want), name


def test_repeated_backward_accumulates(ranks):
    for r in range(4):
        for name, (g, want) in ranks[r]["accumulate"]["grads"].items():
            close(g, want), name


def test_no_grad_and_inference_mode_run_the_forward_only(ranks):
    got = ranks[0]["evaluation"]
    assert got["no_grad"] == (True, False, False)
    a, b, want = got["out"]
    close(a, want)
    close(b, want)
    assert got["programs"] == ["forward"]


def test_batchnorm_statistics_once_per_forward(ranks):
    got = ranks[1]["batchnorm"]
    assert got["is_tensor"]
    for name, (buf, want) in got["buffers"].items():
        close(buf, want), name
    for name, (g, want) in got["grads"].items():
        close(g, want), name


def test_frozen_parameter_gets_no_gradient(ranks):
    got = ranks[2]["frozen"]
    assert got["fc1_grad"] is None
    assert set(got["grads"]) == {"fc1.bias", "fc2.weight", "fc2.bias"}
    for name, (g, want) in got["grads"].items():
        close(g, want), name


def test_eager_execution_under_autograd(ranks):
    for name, (g, want) in ranks[3]["eager"]["grads"].items():
        close(g, want), name


def test_hf_gpt2_model_output_and_own_loss(ranks):
    for r in range(4):
        got = ranks[r]["hf_gpt2"]
        assert got["type"] == "CausalLMOutputWithCrossAttentions"   # the model's own output class
        assert got["loss"][0] == pytest.approx(got["loss"][1], rel=1e-5)
        for name, (g, want) in got["grads"].items():
            close(g, want), name


def test_bf16_autograd_matches_the_fused_backward(ranks):
    got = ranks[0]["bf16"]
    assert got["dtypes"] == ["torch.float32"]   # gradients kept in float32
    for name, (g, fused, fp32) in got["grads"].items():
        close(g, fused, rtol=2e-2, atol=2e-3), name
        close(g, fp32, rtol=5e-2, atol=5e-3), name


def test_refusals_name_the_option(ranks):
    got = ranks[0]["refusals"]
    assert "clip_grad_norm=1.0" in got["clip"] and "cm.clip_grad_norm_" in got["clip"]
    assert "outputs" in got["bad_option"] and "'local'" in got["bad_option"]
    assert "pipeline plan" in got["pipeline"] and "loss.backward()" in got["pipeline"]
    assert "device groups" in got["groups"]
    for mode in ("saved", "recompute"):   # never the gradients of a forward that did not run
        assert "input #0 changed in place between cm(x) and its backward" in got[f"input_{mode}"]
        assert "parameter 'fc2.bias' changed in place" in got[f"parameter_{mode}"]


def test_sampler_args_before_compiling():
    import spmdc
    from spmdc.sharding.device_groups import HeteroPlan

    def every(**kw):
        return [spmdc.sampler_args(rank=r, **kw) for r in range(4)]

    assert every(mesh="dp=2,tp=2", plan="fsdp+tp") == [(2, 0), (2, 0), (2, 1), (2, 1)]   # a tp pair: one piece
    assert every(mesh="pp=2,dp=2", plan="fsdp") == [(2, 0), (2, 1), (2, 0), (2, 1)]      # one replica per stage
    assert every(mesh="rep=2,dp=2", plan="hsdp") == [(4, 0), (4, 1), (4, 2), (4, 3)]
    assert every(mesh="tp=4", plan="megatron") == [(1, 0)] * 4
    assert every(plan=HeteroPlan.from_dict(W.GROUPS)) == [(3, 0), (3, 0), (3, 1), (3, 2)]   # tp=2 + dp=2 groups
    with pytest.raises(ValueError, match="rank 5 is not on mesh dp=2"):
        spmdc.sampler_args(mesh="dp=2", rank=5)
    with pytest.raises(ValueError, match="needs the module"):
        spmdc.sampler_args(plan="fsdp")


@pytest.mark.parametrize("case", ["activations_fsdp", "activations_megatron", "activations_eager"])
def test_saved_activations_run_the_forward_once_and_equal_recompute(ranks, case):
    """autograd_activations='saved' (the default): the vjp program suspends before its backward, so
    a training step issues exactly the collectives of one vjp program run; 'recompute' issues the
    forward program's on top. Both give one device's gradients, also for a double backward
    (retain_graph=True: the saved run's forward half again, with the forward's random numbers)."""
    for r in range(4):
        saved, recompute = ranks[r][case]["saved"], ranks[r][case]["recompute"]
        for got in (saved, recompute):
            for key in ("first", "twice"):
                for a, want in got[key].values():
                    close(a, want)
        assert saved["kinds"] == ["forward", "vjp:1:0:saved"] and saved["suspends"] == ["vjp:1:0:saved"]
        assert recompute["kinds"] == ["forward", "vjp:1:0"] and recompute["suspends"] == []
        assert saved["forward"] == recompute["forward"] and saved["forward"]
        extra = {k: recompute["step"].get(k, 0) - saved["step"].get(k, 0) for k in recompute["step"]}
        assert {k: v for k, v in extra.items() if v} == saved["forward"]
