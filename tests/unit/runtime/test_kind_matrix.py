"""Training options under eager execution and device groups against one device (issue 26's matrix), one
4-rank gloo launch: ``spmdc.eager`` on dp=2,tp=2 under fsdp+tp, and a HeteroPlan of two groups of two
ranks (megatron on tp=2, fsdp on dp=2, the batch of 4 split 2 + 2; and fsdp on dp=2 in both groups, where HF
GPT-2's tied wte/lm_head gradient crosses the groups, also with grad_accum=2 on a batch of 8, against one device
accumulating the same micro-batches); 2 SGD steps of gpt2-tiny or of the
HuggingFace GPT-2 of tests/models/hf_tiny.py at its defaults (dropout 0.1). Also bf16 on one mesh
(compiled fsdp+tp, dp=2,tp=2): test_simple_fsdp.py judges its bf16 against FSDP2, not one device.

float32 runs (clip_grad_norm=0.5, grad_accum=2 and checkpoint="blocks" together, one compilation; dropout)
equal eager PyTorch on the whole batch: losses on every rank, every parameter, and the gradient norm
before clipping on every rank equals ``clip_grad_norm_``'s (rtol 1e-4, atol 1e-5); dropout masks are those
one device draws after the same seed. bf16 runs are judged as in test_pipeline_features.py: against eager
PyTorch under the same policy (``spmdc.frontend.mixed_precision.call_model``: parameters and inputs cast
to bf16, float32 master weights) on the whole batch; both round to bf16 but tensor parallelism and the
groups' split batch sum partial products in another order, so losses agree within rtol/atol 2e-2 (``spmdc
run --check``'s mixed-precision tolerance) and each parameter is at most 4x as far from eager bf16 as
eager bf16 is from eager float32 (+ 1e-5): the size of bf16 rounding. SGD throughout: AdamW divides by
sqrt(v) and turns a rounding-sized gradient difference into an lr-sized step.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import kind_matrix_workers as W  # noqa: E402
from rank_checks import close  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402

BF16_TOL = 2e-2
NOISE_FACTOR = 4.0
FEATURE = {"bf16": "bf16", "clip": "clip", "accum": "accum", "ckpt": "act. ckpt", "dropout": "dropout"}


def _marks(name: str) -> list[Any]:
    """A case's cells: its kind, and every feature its name lists ("eager clip accum ckpt": three)."""
    kind = W.CASES[name][0]
    return [pytest.mark.matrix(kind, FEATURE[word]) for word in name.split()[1:] if word in FEATURE]


PARAMS = [pytest.param(name, marks=_marks(name), id=name) for name in W.CASES]


@pytest.fixture(scope="module")
def results() -> dict[int, Any]:
    return launch(W.run_cases, 4, (W.CASES,), timeout_s=900)


def one_device(workload: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Eager PyTorch on one device, the whole batch (under ``opts``' mixed-precision policy if any):
    losses, gradient norms before clipping, parameters."""
    from spmdc.frontend.loss import extract_loss
    from spmdc.frontend.mixed_precision import MixedPrecision, call_model
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.optimizers import make_optimizer

    torch.manual_seed(0)
    w = load_workload(workload, batch=opts.get("batch", W.BATCH))
    model = w.model
    policy = MixedPrecision.parse(opts.get("mixed_precision"))
    optim = make_optimizer(W.SGD, list(model.parameters()))
    torch.manual_seed(1)
    losses, norms = [], []
    n = opts.get("grad_accum", 1)   # a user's accumulation loop: each micro-batch's loss / n, backward
    data = [x.chunk(n) for x in (*w.inputs, *w.loss_inputs, *w.kwargs.values())]
    a, b = len(w.inputs), len(w.inputs) + len(w.loss_inputs)
    for _ in range(W.STEPS):
        optim.zero_grad()
        loss = torch.zeros(())
        for k in range(n):
            micro = [d[k] for d in data]
            out = call_model(model, tuple(micro[:a]), dict(zip(w.kwargs, micro[b:])), policy)
            part = (w.loss_fn(out, *micro[a:b]) if w.loss_fn else extract_loss(out)) / n
            part.backward()
            loss = loss + part.detach()
        if opts.get("clip_grad_norm"):
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), opts["clip_grad_norm"])))
        optim.step()
        losses.append(float(loss.detach()))
    return {"losses": losses, "norms": norms, "state": {k: v.detach() for k, v in model.state_dict().items()}}


@pytest.mark.parametrize("name", PARAMS)
def test_matches_one_device(results, name):
    _, workload, opts = W.CASES[name]
    ref = one_device(workload, opts)
    low = opts.get("mixed_precision") is not None
    tol = (BF16_TOL, BF16_TOL) if low else (1e-4, 1e-5)
    for r in range(4):
        got = results[r][name]
        close(got["losses"], ref["losses"], *tol, f"rank {r} losses: ")
        if opts.get("clip_grad_norm"):
            assert min(ref["norms"]) > opts["clip_grad_norm"]   # clipping bites in every step
            close(got["norms"], ref["norms"], *tol, f"rank {r} norms: ")
    if not low:
        for r in range(4):   # every rank gathers the whole model
            close(results[r][name]["state"], ref["state"], *tol, f"rank {r} ")
        return
    fp32 = one_device(workload, {k: v for k, v in opts.items() if k != "mixed_precision"})
    for r in range(4):
        state = results[r][name]["state"]
        for k, want in ref["state"].items():
            mine = (state[k].double() - want.double()).abs().max().item()
            own = (fp32["state"][k].double() - want.double()).abs().max().item()
            assert mine <= NOISE_FACTOR * own + 1e-5, (r, k, mine, own)


def test_each_case_runs_as_asked(results):
    """Eager cases run op by op; checkpointing recomputes blocks; parameters stay float32 under bf16."""
    for name, (kind, _, opts) in W.CASES.items():
        for r in range(4):
            got = results[r][name]
            assert got["eager"] == (kind == "eager"), name
            assert (got["recompute"] > 0) == bool(opts.get("checkpoint")), name
            assert got["param_dtypes"] == ["torch.float32"], name
    for r in range(4):   # every 2nd block: half of gpt2-tiny's two blocks recomputes
        half, every = results[r]["eager ckpt/2"]["recompute"], results[r]["eager clip accum ckpt"]["recompute"]
        assert 0 < half < every, (half, every)

