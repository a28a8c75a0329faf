"""Rank side of test_eager_state.py: an eager-mode run (spmdc.eager) handed to compiled programs and
back, by a checkpoint and by a run-time switch, on 4 gloo ranks.

* ``checkpoints``: llama-tiny, 6 AdamW steps — eager fsdp+tp on dp=2,tp=2 (steps 1-2) → save →
  compiled fsdp on dp=4 (3-4) → save → a new eager fsdp+tp module (5-6);
* ``switches``: HF GPT-2 at its defaults (dropout on; fsdp+tp and megatron store its fused
  ``c_attn`` strided, ``SS(1, 3)`` on tp) — eager fsdp+tp (1-2) → ``switch("megatron", "tp=4",
  execution="compiled")`` (3-4) → ``switch("fsdp+tp", "dp=2,tp=2", execution="eager")`` (5-6).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

LR, STEPS = 1e-3, 2   # AdamW; lr 1e-3: where a gradient is near zero, 1/sqrt(v) turns summation-order rounding into
#                        parameter differences in proportion to lr (as in test_switch_kinds)
HF_GPT2 = str(Path(__file__).resolve().parents[2] / "models" / "hf_tiny.py") + ":gpt2"
EAGER = ({"dp": 2, "tp": 2}, "fsdp+tp")
SWITCHES = (("megatron", "tp=4", "compiled"), ("fsdp+tp", "dp=2,tp=2", "eager"))


def llama() -> tuple[Any, tuple[Any, Any], Any]:
    from spmdc.examples.llama_tiny import factory

    model, ((x,), (y,)), loss = factory(batch=4)   # seeded: the same weights every call
    return model, (x, y), loss


def gpt2() -> Any:
    from spmdc.frontend.workloads import load_workload

    torch.manual_seed(0)
    return load_workload(HF_GPT2, batch=4)


def _entries(path: str) -> dict[str, Any]:
    from spmdc.runtime.checkpointing import read_metadata

    md = read_metadata(path)
    return {k: tuple(m.size) if hasattr(m, "size") else None for k, m in md.state_dict_metadata.items()
            if k != "spmdc"}


def _optim(m: Any) -> dict[str, dict[str, torch.Tensor]]:
    return {n: {s: m.full_state_tensor(n, s) for s in ("exp_avg", "exp_avg_sq")} for n in m.state_holdings()}


def checkpoints(tmp: str) -> dict[str, Any]:
    import spmdc

    _, (x, y), loss = llama()
    kw = dict(train=True, loss_fn=loss, loss_inputs=(y,), optimizer=("adamw", {"lr": LR}))
    mesh, plan = EAGER
    out: dict[str, Any] = {"losses": [], "execution": [], "extra": []}
    first = spmdc.eager(llama()[0], (x,), mesh=mesh, plan=plan, **kw)
    second = spmdc.compile(llama()[0], (x,), mesh={"dp": 4}, plan="fsdp", **kw)
    third = spmdc.eager(llama()[0], (x,), mesh=mesh, plan=plan, **kw)
    for k, m in enumerate((first, second, third)):
        if k:
            out["extra"].append(m.load(f"{tmp}/step{2 * k}"))
        out["losses"] += [float(m.step(x, y)) for _ in range(STEPS)]
        out["execution"].append((m.options.execution, type(m.programs["train"]).__name__))
        if k < 2:
            m.save(f"{tmp}/step{2 * (k + 1)}", extra={"step": 2 * (k + 1)})
    out["entries"] = {"eager": _entries(f"{tmp}/step2"), "compiled": _entries(f"{tmp}/step4")}
    out["state"] = third.full_state_dict()
    out["optim"] = _optim(third)
    out["steps"] = {n: float(third.state_pieces(n)["step"]) for n in third.state_holdings()}
    return out


def switches() -> dict[str, Any]:
    import spmdc

    w = gpt2()
    mesh, plan = EAGER
    m = spmdc.eager(w.model, tuple(w.inputs), mesh=mesh, plan=plan, train=True, loss_fn=w.loss_fn,
                    loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs, optimizer=("adamw", {"lr": LR}))
    out: dict[str, Any] = {"losses": [], "execution": [], "reports": [], "strided": []}
    torch.manual_seed(1)   # dropout's draws: the one-device run's stream
    for k in range(len(SWITCHES) + 1):
        if k:
            new_plan, new_mesh, execution = SWITCHES[k - 1]
            m = m.switch(new_plan, mesh=new_mesh, execution=execution)
            r = m.switch_report
            out["reports"].append({"tensors": r.tensors, "streamed": r.streamed, "bytes_total": r.bytes_total})
        out["strided"].append(sorted(n for n, (_, lay, _) in m.state_holdings().items()
                                     if any(type(p).__name__ == "StridedShard" for p in lay)))
        out["losses"] += [float(m.step(*w.inputs, *w.loss_inputs, **w.kwargs)) for _ in range(STEPS)]
        out["execution"].append((m.options.execution, type(m.programs["train"]).__name__,
                                 m.options.bucket, m.options.overlap))
    out["state"] = m.full_state_dict()
    out["optim"] = _optim(m)
    out["steps"] = {n: float(m.state_pieces(n)["step"]) for n in m.state_holdings()}
    return out


def run(tmp: str) -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        out = {"checkpoints": checkpoints(tmp)}
        dist.barrier()
        out["switches"] = switches()
        if dist.get_rank():
            for case in out.values():
                case.pop("state"), case.pop("optim")
        return out
    finally:
        dist.destroy_process_group()
