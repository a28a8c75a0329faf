"""Training options inside pipeline stages (spmdc.api.pipeline_executor) on 4 gloo ranks, one launch:
pp=2 x tp=2 (megatron in both stages) and a plan with data parallelism inside stage 0 (fsdp on dp=2,
tp=2 in stage 1); gpt2-tiny (tied embeddings: a parameter both stages share), llama-tiny and the
HuggingFace Llama of tests/models/hf_tiny.py; 3 optimizer steps, 2 micro-batches per round.

Each option alone and all together (bf16, checkpoint="blocks", clip_grad_norm=0.5, grad_accum=2)
against one device. float32 runs (AdamW) equal eager PyTorch on the whole batch: losses on every
rank, every parameter, and the gradient norm before clipping on every rank equals
``clip_grad_norm_``'s (rtol 1e-4, atol 1e-5). bf16 runs (SGD: AdamW would turn a rounding-sized
gradient difference into an lr-sized step) are compared with eager PyTorch under the same policy
(``spmdc.frontend.mixed_precision.call_model``: parameters and inputs cast to bf16, float32 master
weights) over the same micro-batches; both round to bf16, tensor parallelism sums partial products
in another order: losses and norms within rtol/atol 2e-2 (``spmdc run --check``'s mixed-precision
tolerance), each parameter at most 4x as far from eager bf16 as eager bf16 is from eager float32
(+ 1e-5). Boundary activations move in bf16, parameters stay float32. Clipping costs exactly one
all-reduce of one float32 per step on every rank; grad_accum=N runs the schedule N times (N times
its sends); checkpointing recomputes blocks in each stage's backward program. HF GPT-2 at its defaults
(dropout 0.1 in both stages) equals one device running the pipeline's micro-batches one after the
other — every mask drawn where one device draws it, the backward's recomputed forward (and the
checkpointed blocks') drawing the forward's — with and without data parallelism, clipping,
accumulation and checkpointing (rtol 1e-4, atol 1e-5; trained parameters atol 5e-5)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import pipeline_features_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

BF16_TOL = 2e-2
NOISE_FACTOR = 4.0


@pytest.fixture(scope="module")
def results() -> dict[int, Any]:
    return launch(W.run_cases, 4, (W.CASES,), timeout_s=900)


def one_device(workload: str, plan: dict, opts: dict[str, Any], optimizer: tuple,
               per_micro_batch: bool = False) -> dict[str, Any]:
    """Eager PyTorch on one device: the whole batch in float32 (the micro-batches' mean loss is its
    loss), or under bf16 the pipeline's micro-batches, each loss / their number, accumulated."""
    from spmdc.frontend.loss import extract_loss
    from spmdc.frontend.mixed_precision import MixedPrecision, call_model
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.optimizers import make_optimizer

    torch.manual_seed(0)
    w = load_workload(workload, batch=W.BATCH)
    model = w.model
    policy = MixedPrecision.parse(opts.get("mixed_precision"))
    n = plan["microbatches"] * opts.get("grad_accum", 1) if policy is not None or per_micro_batch else 1
    every = [*w.inputs, *w.loss_inputs, *w.kwargs.values()]
    pieces = [[t.chunk(n)[k] for t in every] for k in range(n)]
    optim = make_optimizer(optimizer, list(model.parameters()))
    losses, norms = [], []
    for _ in range(W.STEPS):
        optim.zero_grad()
        total = 0.0
        for piece in pieces:
            a, b = len(w.inputs), len(w.inputs) + len(w.loss_inputs)
            out = call_model(model, tuple(piece[:a]), dict(zip(w.kwargs, piece[b:])), policy)
            loss = w.loss_fn(out, *piece[a:b]) if w.loss_fn else extract_loss(out)
            (loss / n).backward()
            total += loss.item() / n
        if opts.get("clip_grad_norm"):
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), opts["clip_grad_norm"])))
        optim.step()
        losses.append(total)
    return {"losses": losses, "norms": norms,
            "state": {k: v.detach() for k, v in model.named_parameters(remove_duplicate=False)}}


def _cells(name: str) -> list[Any]:
    """The matrix cells a case covers: its options, and dropout for the HF GPT-2 cases."""
    opts = W.CASES[name][2]
    feats = [f for key, f in (("mixed_precision", "bf16"), ("clip_grad_norm", "clip"), ("grad_accum", "accum"),
                              ("checkpoint", "act. ckpt")) if opts.get(key)]
    feats += ["dropout"] if name in W.PER_MICRO_BATCH else []
    return [pytest.mark.matrix("pipeline", f) for f in feats]


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=_cells(n)) for n in W.CASES])
def test_matches_one_device(results, name):
    workload, plan, opts, optimizer = W.CASES[name]
    ref = one_device(workload, plan, opts, optimizer, per_micro_batch=name in W.PER_MICRO_BATCH)
    low = opts.get("mixed_precision") is not None
    tol = (BF16_TOL, BF16_TOL) if low else (1e-4, 1e-5)
    for r in range(4):
        got = results[r][name]
        close(got["losses"], ref["losses"], *tol)
        if opts.get("clip_grad_norm"):
            close(got["norms"], ref["norms"], *tol)
            assert got["norms"] == results[0][name]["norms"]   # the same norm on every rank
    if not low:   # trained parameters: atol 5e-5, see test_pipeline_fanout.STATE_ATOL (gpt2's h.1.attn.k_proj.bias,
        close(results[0][name]["state"], ref["state"], tol[0], 5e-5)   # a zero-gradient bias: 1.6e-5 here)
        return
    # bf16: each parameter is as far from eager bf16 as at most NOISE_FACTOR times eager bf16's own
    # distance from eager float32 (+ 1e-5): the size of bf16 rounding, as spmdc run --check judges noise
    fp32 = one_device(workload, plan, {k: v for k, v in opts.items() if k != "mixed_precision"}, optimizer)
    for k, want in ref["state"].items():
        mine = (results[0][name]["state"][k].double() - want.double()).abs().max().item()
        own = (fp32["state"][k].double() - want.double()).abs().max().item()
        assert mine <= NOISE_FACTOR * own + 1e-5, (k, mine, own)


def test_bf16_moves_bf16_keeps_fp32_parameters(results):
    for name, (_, _, opts, _) in W.CASES.items():
        for r in range(4):
            got = results[r][name]
            assert got["param_dtypes"] == ["torch.float32"]
            want = ["torch.bfloat16"] if opts.get("mixed_precision") else ["torch.float32"]
            assert got["wire"] == want, (name, got["wire"])


def test_clipping_costs_one_scalar_all_reduce(results):
    """Against grad_accum=2 on the same plan and model (per step: the programs' collectives and the
    sends twice, the tied gradients' all-reduce and the loss broadcast once): clipping adds one
    all-reduce of 4 bytes and nothing else."""
    for r in range(4):
        clip, accum = results[r]["gpt2 clip"], results[r]["gpt2 accum"]
        assert clip["counts"]["all_reduce"] == accum["counts"]["all_reduce"] + 1
        assert clip["bytes"]["all_reduce"] == accum["bytes"]["all_reduce"] + 4
        assert clip["counts"]["broadcast"] == accum["counts"]["broadcast"] == 1
        assert set(clip["counts"]) == set(accum["counts"])
        for k in clip["counts"]:
            if k not in ("all_reduce", "broadcast"):   # in-program collectives, send, recv: once per round
                assert 2 * clip["counts"][k] == accum["counts"][k], k


def test_tied_gradients_are_summed_piece_by_piece_where_the_stages_agree(results):
    """gpt2-tiny's wte/lm_head, read by both stages: under pp=2 x tp=2 (megatron in both stages: the same
    mesh, the same layout) each rank all-reduces its own piece with the one rank at its place in the other
    stage; with fsdp on dp=2 in stage 0 and megatron on tp=2 in stage 1 (the layouts differ) the whole
    gradient over the four ranks. Both equal one device (above). (Pieces smaller than the whole, fsdp in
    both stages: test_plan_predictions' pp=2,dp=2 case, whose measured bytes the dry run predicts.)"""
    whole = 256 * 16 * 4   # gpt2-tiny's wte: 256 x 16 float32
    for r in range(4):
        (pieces, ranks, local), = results[r]["gpt2 accum"]["tied"].values()
        assert pieces and ranks == 2
        assert results[r]["gpt2 accum"]["bytes"]["all_reduce"] == local
        (pieces, ranks, local), = results[r]["gpt2 dp-stage all fp32"]["tied"].values()
        assert not pieces and ranks == 4
        assert results[r]["gpt2 dp-stage all fp32"]["bytes"]["all_reduce"] == whole + 4   # (+ clipping's norm)


def test_replicated_gradients_are_reduced_once_per_step(results):
    """dp (replicated storage) in both stages, grad_accum=2 rounds of 2 micro-batches: the stages'
    training programs leave their gradients unreduced; each rank sums its 4 micro-batches' and
    all-reduces them over dp once per step: what its collectives move over dp in a step is its
    stage's trained gradients once (at most 10 % more: what the programs reduce themselves, the
    loss per micro-batch, a position embedding's gradient summed over the batch), not 4 times.
    The tied embedding's piece is summed between the stages after it (2 ranks), clipping adds 4
    bytes. Equal to one device above; under bf16 too."""
    for name in ("gpt2 dp-stages all fp32", "gpt2 dp-stages bf16"):
        for r in range(4):
            got = results[r][name]
            moved = sum(v for k, v in got["bytes"].items() if k.startswith("comm."))
            assert got["grad_bytes"] <= moved < 1.1 * got["grad_bytes"], (name, r, got["bytes"], got["grad_bytes"])
    for r in range(4):
        got = results[r]["gpt2 dp-stages all fp32"]
        (pieces, ranks, local), = got["tied"].values()
        assert pieces and ranks == 2 and got["bytes"]["all_reduce"] == local + 4


def test_grad_accum_runs_the_schedule_n_times(results):
    for r in range(4):
        got = results[r]["gpt2 accum"]
        assert got["grad_accum"] == 2 and got["sends"] == 2 * got["ir_sends"] > 0


def test_checkpoint_recomputes_blocks_in_every_stage(results):
    for r in range(4):
        assert results[r]["gpt2 ckpt"]["recompute"] > 0
        assert results[r]["gpt2 clip"]["recompute"] == 0
        # blocks/2 counts the whole model's blocks: h.0 in stage 0 recomputes, h.1 in stage 1 does not
        half = results[r]["gpt2 ckpt/2"]
        assert (half["recompute"] > 0) == (half["stage"] == 0), (r, half["stage"], half["recompute"])


def test_refusals_name_the_option_on_every_rank(results):
    for r in range(4):
        got = results[r]["refused"]
        assert "grad_accum=3 rounds of 2 micro-batches split every input along dim 0 into 6 pieces" \
            in got["grad_accum=3"]
        assert "option checkpoint='layers': expected 'blocks' (recompute every repeated block) or 'blocks/K'" \
            in got["checkpoint='layers'"]
        assert "option clip_grad_norm=0.0: expected a finite positive number" in got["clip_grad_norm=0"]


def test_dropout_draws_in_both_stages(results):
    """HF GPT-2's dropouts are on (the model under test is as shipped) and replayed on every rank;
    the other workloads draw nothing."""
    for name in W.CASES:
        for r in range(4):
            assert (results[r][name]["draws"] > 0) == (name in W.PER_MICRO_BATCH), name


@pytest.mark.matrix("pipeline", "clip")
def test_user_loop_with_torch_optimizer_and_global_clip_matches_one_device(results):
    """Own loop on a pipeline module: torch.optim.AdamW over cm.parameters(), cm.backward, the global
    cm.clip_grad_norm_(0.5) over both stages (a tied weight once), opt.step(); equals one device with
    clip_grad_norm_ (rtol 1e-4, atol 1e-5). Each rank's parameters are its stage's, under the model's names."""
    ref = one_device("gpt2-tiny", W.PP_DP, {"clip_grad_norm": 0.5}, W.OPT)
    stage_names = []
    for r in range(4):
        got = results[r]["user loop"]
        assert got["kind"] == "pipeline"
        close(got["losses"], ref["losses"])
        close(got["norms"], ref["norms"])
        stage_names.append(set(got["names"]))
    assert stage_names[0] == stage_names[1] and stage_names[2] == stage_names[3]
    assert stage_names[0] != stage_names[2]   # each stage holds its own parameters
    assert "wpe.weight" in stage_names[0] - stage_names[2] and "ln_f.weight" in stage_names[2] - stage_names[0]
    state = results[0]["user loop"]["state"]
    close({k: state[k] for k in ref["state"]}, ref["state"])

