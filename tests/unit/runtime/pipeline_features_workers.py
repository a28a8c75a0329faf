"""Rank side of test_pipeline_features.py: training options inside pipeline stages on 4 gloo ranks."""

from __future__ import annotations

from typing import Any

import torch

STEPS = 3
BATCH = 8
OPT = ("adamw", {"lr": 0.01})
# bf16 cases train with SGD: AdamW would turn a rounding-sized gradient difference into an lr-sized step
SGD = ("sgd", {"lr": 0.1})
HF_LLAMA = "tests/models/hf_tiny.py:llama"
HF_GPT2 = "tests/models/hf_tiny.py:gpt2"


def stage(ranks: list[int], mesh: str, plan: str) -> dict[str, Any]:
    return {"ranks": ranks, "mesh": mesh, "plan": plan}


PP_TP = {"microbatches": 2, "stages": [stage([0, 1], "tp=2", "megatron"), stage([2, 3], "tp=2", "megatron")]}
# data parallelism inside stage 0 (fsdp: gradients reduce-scattered there), tensor parallelism in stage 1
PP_DP = {"microbatches": 2, "stages": [stage([0, 1], "dp=2", "fsdp"), stage([2, 3], "tp=2", "megatron")]}
# data parallelism with replicated storage in both stages: each stage's gradients summed over the step's
# micro-batches unreduced, all-reduced once per step; the tied embedding summed piece by piece between them
PP_DP_REP = {"microbatches": 2, "stages": [stage([0, 1], "dp=2", "dp"), stage([2, 3], "dp=2", "dp")]}
ALL = {"mixed_precision": "bf16", "checkpoint": "blocks", "clip_grad_norm": 0.5, "grad_accum": 2}
ALL_FP32 = {k: v for k, v in ALL.items() if k != "mixed_precision"}

# name -> (workload, plan, options, optimizer); llama-tiny mixes fp32 rotary tables with bf16 activations in one
# matmul, which fails eagerly under bf16 too: it runs the float32 options only
CASES: dict[str, tuple[str, dict, dict[str, Any], tuple]] = {
    "gpt2 clip": ("gpt2-tiny", PP_TP, {"clip_grad_norm": 0.5}, OPT),
    "gpt2 accum": ("gpt2-tiny", PP_TP, {"grad_accum": 2}, OPT),
    "gpt2 ckpt": ("gpt2-tiny", PP_TP, {"checkpoint": "blocks"}, OPT),
    # every 2nd block of the whole model: h.0 (stage 0) recomputes, h.1 (stage 1) does not
    "gpt2 ckpt/2": ("gpt2-tiny", PP_TP, {"checkpoint": "blocks/2"}, OPT),
    "gpt2 bf16": ("gpt2-tiny", PP_TP, {"mixed_precision": "bf16"}, SGD),
    "gpt2 dp-stage all fp32": ("gpt2-tiny", PP_DP, ALL_FP32, OPT),
    "llama-tiny all fp32": ("llama-tiny", PP_TP, ALL_FP32, OPT),
    "hf-llama all": (HF_LLAMA, PP_TP, ALL, SGD),
    # HF GPT-2 at its defaults: dropout 0.1 (embeddings, attention, residuals) in both stages; SGD: its key
    # bias has a zero gradient in exact arithmetic (softmax ignores a shift shared by all keys), which AdamW
    # would turn from rounding noise into lr-sized steps
    "hf-gpt2 dropout": (HF_GPT2, PP_TP, {}, SGD),
    "hf-gpt2 dropout all fp32": (HF_GPT2, PP_DP, ALL_FP32, SGD),
    "gpt2 dp-stages all fp32": ("gpt2-tiny", PP_DP_REP, ALL_FP32, OPT),
    "gpt2 dp-stages bf16": ("gpt2-tiny", PP_DP_REP, {"mixed_precision": "bf16"}, SGD),
}
# cases whose one-device reference runs the pipeline's micro-batches one after the other (a gradient-
# accumulation loop): dropout masks are drawn per micro-batch, in that order
PER_MICRO_BATCH = {"hf-gpt2 dropout", "hf-gpt2 dropout all fp32"}


def run_case(name: str, workload: str, plan: dict, opts: dict[str, Any], optimizer: tuple) -> dict[str, Any]:
    import spmdc
    from spmdc.dialects.pipe import SendOp
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.pipeline_plan import PipelinePlan

    torch.manual_seed(0)
    w = load_workload(workload, batch=BATCH)
    pm = spmdc.compile(w.model, tuple(w.inputs), mesh=None,
                       plan=PipelinePlan.from_dict(plan), train=True, loss_fn=w.loss_fn,
                       loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs, optimizer=optimizer, **opts)
    pm.comm.stats.counts.clear()
    pm.comm.stats.bytes.clear()
    losses, norms = [], []
    for _ in range(STEPS):
        losses.append(float(pm.step(*w.inputs, *w.loss_inputs, **w.kwargs)))
        norms.append(None if pm.last_grad_norm is None else float(pm.last_grad_norm))
    ops = list(pm.pipeline._rank_function(pm.pipeline.rank).body.ops)
    back = pm.pipeline._programs.backward.program
    return {"losses": losses, "norms": norms, "state": pm.full_state_dict(), "stage": pm.pipeline.stage,
            "counts": {k: v / STEPS for k, v in pm.comm.stats.counts.items()},
            "bytes": {k: v / STEPS for k, v in pm.comm.stats.bytes.items()},
            "sends": pm.pipeline.last_messages, "ir_sends": sum(len(op.peers) for op in ops if isinstance(op, SendOp)),
            "recompute": back.step.global_ir.count("spmdc.recompute"),
            "wire": sorted({str(v.dtype) for v in pm.pipeline.split.values.values() if v.dtype.is_floating_point}),
            "param_dtypes": sorted({str(p.dtype) for p in pm.parameters()}),
            "grad_accum": pm.pipeline.accum, "microbatches": pm.pipeline.micro, "draws": len(pm.pipeline._rng.draws),
            "grad_bytes": sum(p.to_local().numel() * p.to_local().element_size() for n, p in pm.named_parameters()
                              if p.requires_grad),
            "tied": {name: (pieces, torch.distributed.get_world_size(group) if group is not None else 1,
                            p.to_local().numel() * p.to_local().element_size())
                     for name, (_, group, pieces) in pm.pipeline._shared_groups.items()
                     for p in [pm.pipeline.params.get(name)] if p is not None}}


def user_loop(workload: str = "gpt2-tiny", max_norm: float = 0.5) -> dict[str, Any]:
    """The training loop an FSDP2 user writes, on a pipeline module compiled without an optimizer:
    torch's AdamW over ``cm.parameters()`` (this rank's stage's), ``cm.backward`` for the
    gradients, ``cm.clip_grad_norm_`` for the global norm over every stage, ``opt.step()``."""
    import spmdc
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.pipeline_plan import PipelinePlan

    torch.manual_seed(0)
    w = load_workload(workload, batch=BATCH)
    cm = spmdc.compile(w.model, tuple(w.inputs), mesh=None, plan=PipelinePlan.from_dict(PP_DP), train=True,
                       loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs))
    opt = torch.optim.AdamW(cm.parameters(), lr=OPT[1]["lr"])
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        losses.append(float(cm.backward(*w.inputs, *w.loss_inputs)))
        norms.append(float(cm.clip_grad_norm_(max_norm)))
        opt.step()
    return {"losses": losses, "norms": norms, "state": cm.full_state_dict(), "kind": cm.kind,
            "names": sorted(n for n, _ in cm.named_parameters())}


def refusals() -> dict[str, str]:
    """Options a pipeline cannot run as asked, refused by name on every rank before compiling."""
    import spmdc
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.pipeline_plan import PipelinePlan

    w = load_workload("gpt2-tiny", batch=BATCH)
    out = {}
    for name, opts in (("grad_accum=3", {"grad_accum": 3}), ("checkpoint='layers'", {"checkpoint": "layers"}),
                       ("clip_grad_norm=0", {"clip_grad_norm": 0.0})):
        try:
            spmdc.compile(w.model, tuple(w.inputs), mesh=None, plan=PipelinePlan.from_dict(PP_TP), train=True,
                          loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs), optimizer=OPT, **opts)
            out[name] = ""
        except ValueError as e:
            out[name] = str(e)
    return out


def run_cases(cases: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        out: dict[str, Any] = {"refused": refusals(), "user loop": user_loop()}
        out.update({name: run_case(name, *case) for name, case in cases.items()})
        return out
    finally:
        dist.destroy_process_group()
