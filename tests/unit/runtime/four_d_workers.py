"""Rank side of test_four_d.py: issue 26's 4-D job on 8 gloo ranks, resumed under fsdp on 4.

For each HuggingFace model (tests/models/hf_tiny.py at its defaults): 2 steps on the pipeline
``mesh="pp=2,dp=2,tp=2", plan="fsdp+tp"`` (bf16, checkpoint="blocks", clip_grad_norm, AdamW),
saved; then ranks 0-3 compile the same model with ``plan="fsdp"`` on a DeviceMesh ``dp=4`` over
them, load the checkpoint and train 2 more steps (ranks 4-7 wait).
"""

from __future__ import annotations

from typing import Any

import torch

BATCH, SEED, STEPS = 8, 0, 2
# HF GPT-2 (dropout on). HF Llama's run of the same job (same mesh, plan, options, steps and resume) is
# tests/unit/tools/test_run_cli.py::test_four_d_job_saved_and_resumed_under_fsdp_passes_check, judged
# against one device by --check with this test's rule (spmdc.tools.reference.judge_by_float32)
MODELS = {"gpt2": "tests/models/hf_tiny.py:gpt2"}
OPTIONS: dict[str, Any] = {"train": True, "mixed_precision": "bf16", "checkpoint": "blocks", "clip_grad_norm": 1.0,
                           "optimizer": ("adamw", {"lr": 1e-3})}


def _counts(m: Any) -> dict[str, int]:
    return dict(m.comm.stats.counts)


def optimizer_state(m: Any, group: Any = None) -> dict[str, torch.Tensor]:
    """``{fqn.stat: full tensor}`` of ``m``'s optimizer (exp_avg, exp_avg_sq, step), merged over the
    ranks of ``group`` (every one calls it; ranks holding the same entry agree bitwise)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict

    _, osd = get_state_dict(m.checkpoint_view().module, m.optimizer)
    mine = {f"{fqn}.{stat}": (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().clone()
            for fqn, stats in osd["state"].items() for stat, v in stats.items()}
    every: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, mine, group=group)
    merged: dict[str, torch.Tensor] = {}
    for d in every:
        for k, v in d.items():
            assert torch.equal(merged.setdefault(k, v), v), k
    return merged


def collective_axes(ir: str) -> list[str]:
    """``"op:axes"`` of every collective in a rank's programs (``comm.reduce_scatter_bucket_start:dp``)."""
    import re

    found = re.findall(r'(comm\.\w+) [^\n]*?\bax(?:is|es) = (\[[^\]]*\]|"[^"]*")', ir)
    return sorted({op + ":" + re.sub(r'[\[\]" ]', "", axes) for op, axes in found})


def _pipeline(name: str, path: str) -> tuple[dict[str, Any], Any]:
    import spmdc
    from spmdc.frontend.workloads import load_workload
    from spmdc.ir.printer import print_module

    w = load_workload(MODELS[name], batch=BATCH)
    pm = spmdc.compile(w.model, tuple(w.inputs), mesh="pp=2,dp=2,tp=2", plan="fsdp+tp", loss_fn=w.loss_fn,
                       loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs, **OPTIONS)
    pm.comm.stats.counts.clear()
    torch.manual_seed(SEED)   # as one device does before its first step
    losses = [float(pm.step(*w.inputs, *w.loss_inputs, **w.kwargs)) for _ in range(STEPS)]
    rng = torch.get_rng_state()   # one device's generator after step 2 (pipeline_rng ends every step there)
    ex = pm.pipeline   # the compiled module's pipeline executor
    stages = ex.plan.stages
    out = {"losses": losses, "stage": ex.stage, "stage_ranks": [list(s.ranks) for s in stages],
           "stage_mesh": [str(s.mesh) for s in stages], "stage_plan": [str(s.plan) for s in stages],
           "micro": ex.micro, "counts": _counts(pm), "draws": len(ex._rng.draws), "saved": optimizer_state(pm),
           "state": pm.full_state_dict(), "axes": collective_axes("\n".join(
               print_module(run.program.module) for run in (ex._programs.forward, ex._programs.backward) if run)),
           "param_dtypes": sorted({str(p.dtype) for p in pm.parameters()}),
           "wire": sorted({str(v.dtype) for v in ex.split.values.values() if v.dtype.is_floating_point})}
    out["rng"] = rng
    pm.save(path, extra={"step": STEPS})
    return out, rng


def _resumed(name: str, path: str, dm: Any, rng: Any) -> dict[str, Any]:
    import spmdc
    from spmdc.frontend.workloads import load_workload

    w = load_workload(MODELS[name], batch=BATCH)
    cm = spmdc.compile(w.model, tuple(w.inputs), mesh=dm, plan="fsdp", loss_fn=w.loss_fn,
                       loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs, **OPTIONS)
    torch.manual_seed(SEED + 1)   # another generator state: the checkpoint's must come back
    extra = cm.load(path)
    rng_restored = torch.equal(torch.get_rng_state(), rng)   # GPT-2's masks go on as one device's
    loaded = optimizer_state(cm, cm.group)
    cm.comm.stats.counts.clear()
    losses = [float(cm.step(*w.inputs, *w.loss_inputs, **w.kwargs)) for _ in range(STEPS)]
    return {"losses": losses, "extra": extra, "loaded": loaded, "rng_restored": rng_restored, "counts": _counts(cm),
            "state": cm.full_state_dict(), "param_dtypes": sorted({str(p.dtype) for p in cm.parameters()})}


def _hsdp_stages() -> dict[str, Any]:
    """hsdp inside pipeline stages: ``mesh="pp=2,rep=2,dp=2", plan="hsdp"`` (each stage of 4 ranks
    replicated over rep, sharded over dp), float32, AdamW, 2 steps of gpt2-tiny."""
    import spmdc
    from spmdc.frontend.workloads import load_workload

    torch.manual_seed(SEED)
    w = load_workload("gpt2-tiny", batch=BATCH)
    pm = spmdc.compile(w.model, tuple(w.inputs), mesh="pp=2,rep=2,dp=2", plan="hsdp", train=True,
                       loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs), optimizer=OPTIONS["optimizer"])
    losses = [float(pm.step(*w.inputs, *w.loss_inputs)) for _ in range(STEPS)]
    stages = pm.pipeline.plan.stages
    return {"losses": losses, "state": pm.full_state_dict(), "stage_mesh": [str(s.mesh) for s in stages],
            "stage_plan": [str(getattr(s.plan, "name", s.plan)) for s in stages],
            "layouts": {k: [str(p) for p in lay] for k, (_, lay, _) in pm.state_holdings().items()}}


def run(tmp: str) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    dist.init_process_group("gloo")
    try:
        dm = DeviceMesh("cpu", torch.arange(4), mesh_dim_names=("dp",))   # collective: every rank builds it
        out: dict[str, Any] = {}
        for name in MODELS:
            path = f"{tmp}/{name}"
            pipe, rng = _pipeline(name, path)
            out[name] = {"pipeline": pipe}
            if dist.get_rank() < 4:
                out[name]["fsdp"] = _resumed(name, path, dm, rng)
            if dist.get_rank() != 0:   # rank 0's view suffices (the gathered state, the full parameters)
                for part, key in (("pipeline", "saved"), ("pipeline", "state"), ("fsdp", "loaded"), ("fsdp", "state")):
                    out[name].get(part, {}).pop(key, None)
            dist.barrier()
        out["hsdp stages"] = _hsdp_stages()
        return out
    finally:
        dist.destroy_process_group()
