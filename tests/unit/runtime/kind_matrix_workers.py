"""Rank side of test_kind_matrix.py: training options under eager execution and device groups (and one mesh's
bf16) on 4 gloo ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

STEPS = 2
BATCH = 4
# SGD throughout: under bf16 AdamW would turn a rounding-sized gradient difference into an lr-sized step,
# and HF GPT-2's key bias has a zero gradient in exact arithmetic (softmax ignores a shift shared by all keys)
SGD = ("sgd", {"lr": 0.1})
HF_GPT2 = str(Path(__file__).resolve().parents[2] / "models" / "hf_tiny.py") + ":gpt2"   # dropout 0.1, Conv1D

EAGER = {"mesh": "dp=2,tp=2", "plan": "fsdp+tp"}   # also the one-mesh case's
# two device groups of 2 ranks, the batch split 2 + 2: megatron tp=2 and fsdp dp=2
GROUPS = {"name": "tp-and-fsdp", "groups": [
    {"name": "tp", "ranks": [0, 1], "mesh": "tp=2", "plan": "megatron", "share": 1},
    {"name": "fsdp", "ranks": [2, 3], "mesh": "dp=2", "plan": "fsdp", "share": 1}]}
# fsdp in both groups (as examples/hetero_fsdp.yaml), the batch split 2 + 2: HF GPT-2's tied wte/lm_head
# gradient (two partial sums added) is reduced within each group before it moves across them
FSDP_GROUPS = {"name": "fsdp-fsdp", "groups": [
    {"name": "a", "ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp", "share": 1},
    {"name": "b", "ranks": [2, 3], "mesh": "dp=2", "plan": "fsdp", "share": 1}]}

# name -> (layout kind, workload, options)
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "eager bf16": ("eager", "gpt2-tiny", {"mixed_precision": "bf16"}),
    # float32 options together, one compilation each (each named feature is a cell of the matrix)
    "eager clip accum ckpt": ("eager", "gpt2-tiny", {"clip_grad_norm": 0.5, "grad_accum": 2, "checkpoint": "blocks"}),
    "eager hf-gpt2 dropout": ("eager", HF_GPT2, {}),
    "eager ckpt/2": ("eager", "gpt2-tiny", {"checkpoint": "blocks/2"}),   # (h.0 recomputes, h.1 does not)
    # one mesh: compiled fsdp+tp on dp=2,tp=2 (test_simple_fsdp.py judges bf16 against FSDP2, not one device)
    "mesh bf16": ("one mesh", "gpt2-tiny", {"mixed_precision": "bf16"}),
    "groups bf16": ("device groups", "gpt2-tiny", {"mixed_precision": "bf16"}),
    "groups clip ckpt": ("device groups", "gpt2-tiny", {"clip_grad_norm": 0.5, "checkpoint": "blocks"}),
    "groups hf-gpt2 fsdp dropout": ("device groups", HF_GPT2, {"groups": FSDP_GROUPS}),
    # micro-batches of 4 (2 rows per group, one per dp rank): the tied gradient stays a partial sum across
    # the groups until the step's one reduction (it was reduce-scattered per micro-batch, then refused)
    "groups hf-gpt2 fsdp accum dropout": ("device groups", HF_GPT2, {"groups": FSDP_GROUPS, "grad_accum": 2,
                                                                     "batch": 2 * BATCH}),
}


def build(kind: str, workload: str, opts: dict[str, Any]) -> tuple[Any, Any]:
    """The module of one case (seed 0, as the one-device reference builds it) and its workload."""
    import spmdc
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.device_groups import HeteroPlan

    torch.manual_seed(0)
    opts = dict(opts)
    w = load_workload(workload, batch=opts.pop("batch", BATCH))
    groups = opts.pop("groups", GROUPS)
    kw = dict(train=True, loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs,
              optimizer=SGD, **opts)
    if kind == "eager":
        return spmdc.eager(w.model, tuple(w.inputs), **EAGER, **kw), w
    if kind == "one mesh":
        return spmdc.compile(w.model, tuple(w.inputs), **EAGER, **kw), w
    return spmdc.compile(w.model, tuple(w.inputs), mesh=None, plan=HeteroPlan.from_dict(groups), **kw), w


def run_case(kind: str, workload: str, opts: dict[str, Any]) -> dict[str, Any]:
    cm, w = build(kind, workload, opts)
    torch.manual_seed(1)   # dropout draws: the stream one device draws from
    losses, norms = [], []
    for _ in range(STEPS):
        losses.append(float(cm.step(*w.inputs, *w.loss_inputs, **w.kwargs)))
        norms.append(None if cm.last_grad_norm is None else float(cm.last_grad_norm))
    prog = cm.programs["train"]
    return {"losses": losses, "norms": norms, "state": cm.full_state_dict(),
            "param_dtypes": sorted({str(p.dtype) for p in cm.parameters()}),
            "recompute": prog.step.global_ir.count("spmdc.recompute"),
            "eager": type(cm.last_run).__name__ == "EagerRunner"}


def run_cases(cases: dict[str, Any]) -> dict[str, Any]:
    from rank_checks import run_cases_in_gloo

    return run_cases_in_gloo(run_case, cases)
