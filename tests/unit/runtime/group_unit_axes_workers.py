"""Rank side of test_group_unit_axes.py: device groups of 2 and 1 ranks on 3 gloo ranks, the
one-rank group on a size-1 axis (``dp=1``: the default mesh of a one-rank group), under dp and
fsdp, with even and tiny uneven batch splits."""

from __future__ import annotations

from typing import Any

import torch

LR, STEPS = 0.1, 2
PAIR = {"ranks": [0, 1], "mesh": "dp=2"}
ONE = {"ranks": [2]}   # mesh: dp=1 (a one-rank group's default)
# name -> (batch, groups)
CASES: dict[str, tuple[int, list[dict[str, Any]]]] = {
    "fsdp1|fsdp2 1:2": (6, [{"ranks": [0], "mesh": "dp=1", "plan": "fsdp"},
                            {"ranks": [1, 2], "mesh": "dp=2", "plan": "fsdp", "share": 2}]),
    "dp2|dp1": (6, [{**PAIR, "plan": "dp"}, {**ONE, "plan": "dp"}]),
    "fsdp2|fsdp1": (6, [{**PAIR, "plan": "fsdp"}, {**ONE, "mesh": "dp=1", "plan": "fsdp"}]),
    "fsdp2|dp1 2:1 batch 3": (3, [{**PAIR, "plan": "fsdp", "share": 2}, {**ONE, "plan": "dp"}]),
}


def workload(batch: int) -> Any:
    from spmdc.frontend.workloads import load_workload

    torch.manual_seed(0)
    return load_workload("mlp", batch=batch)


def run() -> dict[str, Any]:
    import torch.distributed as dist

    import spmdc
    from spmdc.sharding.device_groups import HeteroPlan

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        for name, (batch, groups) in CASES.items():
            w = workload(batch)
            plan = HeteroPlan.from_dict({"name": "g", "groups": groups})
            m = spmdc.compile(w.model, tuple(w.inputs), mesh=None, plan=plan, train=True, loss_fn=w.loss_fn,
                              loss_inputs=tuple(w.loss_inputs), optimizer=("sgd", {"lr": LR}))
            losses = [float(m.step(*w.inputs, *w.loss_inputs)) for _ in range(STEPS)]
            out[name] = {"losses": losses, "state": m.full_state_dict(), "layouts": {
                k: [str(p) for p in lay] for k, (_, lay, _) in m.state_holdings().items()}}
            dist.barrier()
        out["batchnorm refused"] = batchnorm_refusal()
        return out
    finally:
        dist.destroy_process_group()


def batchnorm_refusal() -> str:
    """A model that updates buffers in training (BatchNorm) on device groups: refused by name at the
    first step (device groups do not apply buffer updates yet), never trained with stale statistics."""
    import spmdc
    from spmdc.sharding.device_groups import HeteroPlan

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    x, y = torch.randn(6, 4), torch.randn(6, 2)
    plan = HeteroPlan.from_dict({"name": "g", "groups": [{**PAIR, "plan": "dp"}, {**ONE, "plan": "dp"}]})
    m = spmdc.compile(model, (x,), mesh=None, plan=plan, train=True, loss_fn=torch.nn.functional.mse_loss,
                      loss_inputs=(y,), optimizer=("sgd", {"lr": LR}))
    try:
        m.step(x, y)
    except NotImplementedError as e:
        return str(e)
    return ""

