"""Rank side of ``test_module_modes_ranks.py``: frozen submodules in eval mode on 4 gloo ranks."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))
import frozen_parts as FP  # noqa: E402

LR = 0.1
STEP_CASES = {"fsdp": ({"dp": 4}, "fsdp"), "fsdp+tp": ({"dp": 2, "tp": 2}, "fsdp+tp"),
              "megatron": ({"tp": 4}, "megatron")}
PIPELINE = {"microbatches": 2, "stages": [{"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp", "modules": ["enc", "bn"]},
                                          {"ranks": [2, 3], "mesh": "dp=2", "plan": "fsdp", "modules": ["head"]}]}
HETERO = {"groups": [{"ranks": [0, 1], "mesh": "tp=2", "plan": "megatron", "share": 1},
                     {"ranks": [2, 3], "mesh": "tp=2", "plan": "megatron", "share": 1}]}
SEED = 7   # the dropout draws of the forward with the encoder switched to training mode


def flags(model: Any) -> dict[str, bool]:
    return {name: m.training for name, m in model.named_modules()}


def hf_job() -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The HuggingFace GPT-2 backbone in eval inside a wrapper in training mode, and a batch."""
    ids = torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(3))
    return FP.wrapped_gpt2(), ids, torch.randn(4, 4, generator=torch.Generator().manual_seed(4))


def frozen_job() -> tuple[Any, torch.Tensor, torch.Tensor]:
    return (FP.frozen_parts(), *FP.batch())


def _step_case(make: Any, job: Any = frozen_job) -> dict[str, Any]:
    """Flags after compiling, then gradients (cm.backward) and one SGD step (cm.step) on one batch."""
    model, x, y = job()
    cm = make(model, x, y)
    res: dict[str, Any] = {"flags": flags(model)}
    res["loss_backward"] = cm.backward(x, y).detach()
    res["grads"] = {n: g.full_tensor() for n, g in cm.named_grads()}
    cm.zero_grad(set_to_none=True)
    res["loss_step"] = cm.step(x, y).detach()
    res["state"] = cm.full_state_dict()
    res["flags_after_step"] = flags(model)
    return res


def _compiled(mesh: Any, plan: Any, eager: bool = False) -> Any:
    import spmdc

    def make(model: Any, x: Any, y: Any) -> Any:
        return (spmdc.eager if eager else spmdc.compile)(model, (x,), mesh=mesh, plan=plan, train=True,
                                                         loss_fn=F.mse_loss, loss_inputs=(y,),
                                                         optimizer=("sgd", {"lr": LR}))
    return make


def _modes_case() -> dict[str, Any]:
    """cm.train()/cm.eval(), flags changed on the model or through cm after compiling, and ranks whose
    flags differ; a forward-only module under fsdp on dp=4."""
    import torch.distributed as dist

    import spmdc

    model = FP.frozen_parts()
    x, _ = FP.batch()
    cm = spmdc.compile(model, (x,), mesh={"dp": 4}, plan="fsdp")
    res: dict[str, Any] = {"start": (cm.training, cm.enc.training, cm.bn.training, cm.head.training)}
    res["out_start"] = cm(x, full=True)
    cm.eval()
    res["after_eval"] = flags(model)
    res["cm_after_eval"] = (cm.training, cm.enc.training, cm.head.fc1.training)
    res["out_eval"] = cm(x, full=True)
    cm.train()
    res["after_train"] = flags(model)
    model.enc.eval()
    model.bn.eval()
    res["out_back"] = cm(x, full=True)   # the first program again
    res["programs_back"] = len(cm.program_cache)
    model.enc.train()   # on the user's model, after compiling: a new program, dropout on
    torch.manual_seed(SEED)
    res["out_enc_train"] = cm(x, full=True)
    res["programs_enc_train"] = len(cm.program_cache)
    cm.enc.eval()       # through the compiled module's submodule: the user's model's flags
    res["after_sub_eval"] = flags(model)
    res["out_sub_eval"] = cm(x, full=True)
    res["programs_end"] = len(cm.program_cache)
    model.head.act.eval()   # a new program on every rank, and rank 1's flags differ from the others'
    if dist.get_rank() == 1:
        model.head.fc1.eval()
    try:
        cm(x, full=True)
        res["mismatch"] = None
    except ValueError as e:
        res["mismatch"] = str(e)
    model.head.train()
    return res


def _pipeline_case() -> dict[str, Any]:
    import spmdc
    from spmdc.sharding.pipeline_plan import PipelinePlan

    model = FP.frozen_parts()
    x, y = FP.batch()
    pm = spmdc.compile(model, ((x,), (y,)), mesh=None, plan=PipelinePlan.from_dict(PIPELINE), train=True,
                       loss_fn=F.mse_loss, optimizer=("sgd", {"lr": LR}))
    res: dict[str, Any] = {"flags": flags(model), "loss_step": pm.step(x, y).detach()}
    res["state"] = pm.full_state_dict()
    model.enc.train()   # the stages were cut with enc in eval: refused, not run stale
    try:
        pm.step(x, y)
        res["changed"] = None
    except ValueError as e:
        res["changed"] = str(e)
    return res


def _hetero_case() -> dict[str, Any]:
    from spmdc.sharding.device_groups import HeteroPlan

    res = _step_case(_compiled(None, HeteroPlan.from_dict(HETERO)))
    return res


def modes_four() -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        for name, (mesh, plan) in STEP_CASES.items():
            out[name] = _step_case(_compiled(mesh, plan))
        out["eager"] = _step_case(_compiled({"dp": 2, "tp": 2}, "fsdp+tp", eager=True))
        out["hf"] = _step_case(_compiled({"dp": 4}, "fsdp"), hf_job)
        out["modes"] = _modes_case()
        out["pipeline"] = _pipeline_case()
        out["hetero"] = _hetero_case()
    finally:
        dist.destroy_process_group()
    return out
