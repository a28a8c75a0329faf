"""A whole training job through the compiled module, on 4 and 2 gloo ranks, against one device.

One 4-rank launch (:func:`training_job_workers.features_four`) and one 2-rank launch cover: the
``nn.Module`` surface (DTensor parameters and gradients, ``clip_grad_norm_``, a user's own AdamW
and LR scheduler), clipping in the program, gradient accumulation, a new batch size, local
batches, DCP through ``get_state_dict``, checkpoints that reshard (fsdp 4 → megatron 2, fsdp+tp
2×2 → dp 4 and → megatron 4), Adafactor and a Muon-style optimizer. Tolerances: gradients,
losses and parameters rtol 1e-5 / atol 1e-6 (a mean over shards adds in a different order than
one device); resumed losses rtol 1e-6; what a checkpoint restores: bitwise.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import rank_checks  # noqa: E402
import training_job_workers as W  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("ckpt"))
    return launch(W.features_four, 4, (tmp,), timeout_s=900), tmp


@pytest.fixture(scope="module")
def two(four):
    return launch(W.reshard_two, 2, (four[1],), timeout_s=600)


def close(got, want, rtol=RTOL, atol=ATOL):
    rank_checks.close(got, want, rtol, atol)


def grads_at_init(batch=8):
    model, x, y, _ = W.mlp_job(batch)
    F.mse_loss(model(x), y).backward()
    return model


def test_parameters_and_grads_are_dtensors_on_every_rank(four):
    res, _ = four
    for r in res.values():
        assert r["params_are_dtensors"] and r["grads_are_dtensors"]


def test_clip_grad_norm_on_module_parameters_is_the_global_norm(four):
    model = grads_at_init()
    want = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
    res, _ = four
    for r in res.values():
        close(r["clip_norm"], want)
        close(r["grad_full"], {n: p.grad for n, p in model.named_parameters()})


def test_own_optimizer_and_scheduler_on_module_parameters(four):
    model, x, y, _ = W.mlp_job()
    opt = torch.optim.AdamW(model.parameters(), **W.ADAMW)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    F.mse_loss(model(x), y).backward()
    opt.step()
    sched.step()
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()
    res, _ = four
    close(res[1]["own_optimizer_state"], model.state_dict())
    # the module goes on from there: a new batch size compiles a new program
    _, x2, y2, _ = W.mlp_job(batch=12)
    close(res[2]["bigger_batch_loss"], F.mse_loss(model(x2), y2))


@pytest.mark.matrix("one mesh", "clip")
def test_clipping_in_the_program_matches_clip_grad_norm(four):
    model, x, y, _ = W.mlp_job()
    losses, norms, state, _ = W.eager_steps(model, [(x, y)] * 2, lambda ps: torch.optim.SGD(ps, lr=0.1), clip=0.05)
    assert norms[0] > 0.05   # the clip is active
    res, _ = four
    for r in res.values():
        close(r["clip_losses"], losses)
        close(r["clip_norms"], norms)
        close(r["clip_state"], state)
    # the norm costs one scalar all-reduce per set of sharded axes — fc1.weight on {dp, tp}, fc1.bias on
    # {tp}, head on {dp}: 3; the gradients are still reduce-scattered, never gathered
    prog, base = res[0]["clip_program"], res[0]["noclip_program"]
    assert {k: prog[k] - base.get(k, 0) for k in prog if prog[k] != base.get(k, 0)} == {"comm.all_reduce": 3}
    assert set(prog) == set(base) and "comm.all_to_all" not in prog


@pytest.mark.matrix("one mesh", "accum")
def test_accumulation_equals_one_big_batch(four):
    model, xb, yb, _ = W.mlp_job(batch=32)
    losses, _, state, _ = W.eager_steps(model, [(xb, yb)] * 2, lambda ps: torch.optim.SGD(ps, lr=0.1))
    res, _ = four
    for r in res.values():
        close(r["accum_losses"], losses)
        close(r["accum_state"], state)
    # one step: 4 micro-batches gather parameters (8 each) and reduce their loss; the gradients
    # are reduced once, in one bucket
    issued, program = res[0]["accum_issued"], res[0]["accum_program"]
    assert not any("reduce_scatter" in k for k in program)   # the micro-batch program reduces nothing
    assert issued.get("comm.reduce_scatter_bucket") == 1 and "comm.reduce_scatter" not in issued
    for k, n in program.items():   # the rest: once per micro-batch
        assert issued[k] == 4 * n, (k, issued, program)
    assert program == {"comm.all_gather_bucket": program["comm.all_gather_bucket"], "comm.all_reduce": 1}


@pytest.mark.matrix("one mesh", "clip")
@pytest.mark.matrix("one mesh", "accum")
def test_accumulation_with_clipping(four):
    model, xb, yb, _ = W.mlp_job(batch=32)
    losses, norms, state, _ = W.eager_steps(model, [(xb, yb)] * 2, lambda ps: torch.optim.SGD(ps, lr=0.1),
                                            clip=0.05)
    res, _ = four
    for r in res.values():
        close(r["accum_clip_losses"], losses)
        close(r["accum_clip_norm"], norms[-1])
        close(r["accum_clip_state"], state)


def test_local_batches(four):
    model, x, y, _ = W.mlp_job()
    res, _ = four
    for r in res.values():
        close(r["local_loss"], F.mse_loss(model(x), y))


def test_dcp_state_dict_of_the_optimizer_is_sharded_and_right(four):
    model, x, y, _ = W.mlp_job()
    _, _, _, opt = W.eager_steps(model, [(x, y)] * 2, lambda ps: torch.optim.AdamW(ps, **W.ADAMW))
    names = [n for n, _ in model.named_parameters()]   # the optimizer's parameters are a copy's, in this order
    want = {n: opt.state[p]["exp_avg"] for n, p in zip(names, opt.param_groups[0]["params"])}
    res, _ = four
    for r in res.values():
        assert r["optim_keys"] == sorted(want)
        assert r["exp_avg_placements"] == "(Shard(dim=0),)"
        close(r["exp_avg_full"], want)


def _bitwise(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k


@pytest.mark.parametrize("target", ["to_dp4", "to_megatron4"])
def test_checkpoint_reshards_fsdp_tp_into_other_plans(four, target):
    res, _ = four
    saved, loaded = res[0]["ckpt"]["fsdptp"], res[0]["ckpt"][target]
    assert loaded["extra"] == {"step": 2}
    _bitwise(loaded["params"], saved["params"])
    _bitwise(loaded["exp_avg_sq"], saved["exp_avg_sq"])
    close(loaded["after"], saved["after"], rtol=1e-6, atol=0)


def test_checkpoint_of_four_ranks_loads_on_two(four, two):
    res, _ = four
    saved, loaded = res[0]["ckpt"]["fsdp4"], two[0]
    assert loaded["extra"] == {"step": 2}
    _bitwise(loaded["params"], saved["params"])
    _bitwise(loaded["exp_avg_sq"], saved["exp_avg_sq"])
    close(loaded["after"], saved["after"], rtol=1e-6, atol=0)


@pytest.mark.matrix("one mesh", "save/resume")
def test_checkpointed_run_matches_one_device(four):
    model, x, y, _ = W.mlp_job()
    losses, _, _, _ = W.eager_steps(model, [(x, y)] * 4, lambda ps: torch.optim.AdamW(ps, **W.ADAMW))
    res, _ = four
    for name in ("fsdp4", "fsdptp"):
        ck = res[0]["ckpt"][name]
        close(ck["before"] + ck["after"], losses)


@pytest.mark.parametrize("name,factory", [("adafactor", lambda ps: torch.optim.Adafactor(ps, lr=1e-2)),
                                          ("muon", lambda ps: W.Muon(ps, lr=2e-2))])
def test_optimizers_that_are_not_elementwise(four, name, factory):
    model, x, y, _ = W.mlp_job()
    losses, _, state, _ = W.eager_steps(copy.deepcopy(model), [(x, y)] * 3, factory)
    res, _ = four
    for r in res.values():
        close(r[name]["losses"], losses, rtol=1e-4, atol=1e-5)
        close(r[name]["state"], state, rtol=1e-4, atol=1e-5)


def test_a_matrix_optimizer_on_sharded_parameters_is_refused(four):
    res, _ = four
    msg = res[0]["refused"]
    assert msg is not None and "Adafactor" in msg and "not an elementwise optimizer" in msg


def test_meta_model_materializes_shards_bitwise_equal_to_one_device(four):
    g, tok, tgt = W.gpt2_job()
    torch.manual_seed(11)
    ref = g.GPT2(128, 16, 32, 4, 2)
    after = torch.rand(2)   # the generator goes on from where the construction left it
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    want_state = {k: v.clone() for k, v in ref.state_dict().items()}
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = g.lm_loss(ref(tok), tgt)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    res, _ = four
    model_bytes = sum(p.numel() * 4 for p in ref.parameters())
    for r in res.values():
        _bitwise(r["meta_state"], want_state)
        assert torch.equal(r["meta_after"], after)
        close(r["meta_losses"], losses)
        # start-up: at most one full parameter (or one draw piece) and its shard at a time, not the model
        largest = max(p.numel() * 4 for p in ref.parameters())
        assert r["meta_peak"] <= largest * 5 / 4 < model_bytes / 4
        assert r["meta_local_bytes"] <= model_bytes / 4 + 1024


def test_meta_model_with_an_init_function(four):
    model = W.mlp_job()[0]
    torch.manual_seed(3)
    W.reset_all(model)
    res, _ = four
    for r in res.values():
        _bitwise(r["init_fn_state"], model.state_dict())
    msg = res[0]["meta_refused"]
    assert "meta device" in msg and "deferred_init" in msg and "init=" in msg


def test_checkpoint_of_fsdp_loads_into_megatron_that_shards_attention(four):
    res, _ = four
    saved, loaded = res[0]["ckpt"]["gpt_fsdp"], res[0]["ckpt"]["gpt_megatron"]
    assert any("q_proj" in n for n in loaded["sharded"]) and any("c_fc" in n for n in loaded["sharded"])
    _bitwise(loaded["params"], saved["params"])
    _bitwise(loaded["exp_avg"], saved["exp_avg"])
    close(loaded["after"], saved["after"], rtol=1e-6, atol=0)


def test_a_checkpoint_of_another_model_is_refused_by_name(four):
    msg = four[0][0]["ckpt"]["wrong_model"]
    assert msg is not None and "lacks" in msg and "model.h.0.attn" in msg and "another model" in msg


def test_load_state_dict_takes_full_tensors_and_dtensors_of_another_layout(four):
    res, _ = four
    ck = res[0]["ckpt"]
    _bitwise(ck["load_full"], ck["fresh"])         # full tensors, cut to megatron's shards
    _bitwise(ck["load_dtensor"], ck["cmg_now"])    # fsdp DTensors, redistributed to megatron's


def test_two_dim_device_mesh_and_dcp_full_state_dict(four):
    model, x, y, _ = W.mlp_job()
    losses, _, state, _ = W.eager_steps(model, [(x, y)] * 2, lambda ps: torch.optim.AdamW(ps, **W.ADAMW))
    res, _ = four
    for r in res.values():
        close(r["devmesh2_losses"], losses)
        close(r["devmesh2_state"], state)
        _bitwise({k: v for k, v in r["dcp_full"].items()}, r["devmesh2_state"])


def test_eval_and_train_modes_compile_their_own_programs(four):
    torch.manual_seed(0)
    drop = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 6))
    _, x, _, _ = W.mlp_job()
    drop.eval()
    want_eval = drop(x)
    drop.train()
    torch.manual_seed(5)
    want_train = drop(x)
    res, _ = four
    for r in res.values():
        close(r["eval_out"], want_eval)
        close(r["train_out"], want_train)   # dropout on, the same masks as one device
        assert r["eval_programs"] == [("forward", (False,) * 4), ("forward", (True,) * 4)]   # every module's flag


def test_empty_shards_with_adamw_and_clipping(four):
    torch.manual_seed(0)
    thin = torch.nn.Sequential(torch.nn.Linear(12, 3), torch.nn.Tanh(), torch.nn.Linear(3, 6))
    _, x, y, _ = W.mlp_job()
    losses, _, state, _ = W.eager_steps(thin, [(x, y)] * 2, lambda ps: torch.optim.AdamW(ps, **W.ADAMW), clip=0.05)
    res, _ = four
    assert res[3]["empty_shard_rows"] == 0   # torch.chunk of 3 rows over 4 ranks: rank 3 holds none
    for r in res.values():
        close(r["empty_losses"], losses)
        close(r["empty_state"], state)


@pytest.mark.matrix("one mesh", "clip")
@pytest.mark.matrix("one mesh", "save/resume")
def test_the_documented_training_loop_matches_one_device_and_resumes(two):
    """docs/runtime.md's loop: meta init, local batches, own AdamW + cosine schedule, clipping,
    save at step 2; resumed from there it continues the uninterrupted run."""
    g, tok, tgt = W.gpt2_job()
    torch.manual_seed(0)
    model = g.GPT2(128, 16, 32, 4, 2)
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    losses = []
    for _ in range(4):
        loss = g.lm_loss(model(tok), tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(float(loss))
    for r in two.values():
        close(r["doc"]["whole"], losses)
        close(r["doc"]["resumed"], r["doc"]["whole"][2:], rtol=1e-6, atol=0)


@pytest.mark.matrix("one mesh", "clip")
@pytest.mark.matrix("one mesh", "accum")
def test_hf_model_with_keyword_labels_accumulates_and_clips(four):
    sys.path.insert(0, str(Path(__file__).parents[2] / "models"))
    import hf_tiny

    model = hf_tiny.build("llama")
    x, y = hf_tiny.batch()
    opt = torch.optim.AdamW(model.parameters(), **W.ADAMW)
    torch.manual_seed(0)
    losses = []
    for _ in range(2):   # 2 micro-batches, each loss / 2, then clip and step
        opt.zero_grad()
        total = 0.0
        for xs, ys in zip(x.chunk(2), y.chunk(2)):
            loss = model(xs, labels=ys).loss
            (loss / 2).backward()
            total += float(loss) / 2
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(total)
    res, _ = four
    for r in res.values():
        close(r["hf_losses"], losses)
        close(r["hf_state"], model.state_dict(), rtol=1e-4, atol=1e-5)
