"""Rank side of test_input_check.py: ranks fed the wrong data, on 4 gloo ranks (one launch).

Every case is a (compile, call) pair; refusals are caught and returned per rank, so one launch
runs them all and the test can compare the message of every rank."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

MESH = {"dp": 2, "tp": 2}
SGD = ("sgd", {"lr": 0.1})
ROWS = 16
COUNTED = ("all_gather_into_tensor", "all_gather", "all_reduce", "reduce_scatter_tensor", "broadcast",
           "all_to_all_single", "all_gather_object", "broadcast_object_list", "isend", "irecv",
           "batch_isend_irecv", "reduce_scatter")


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """The data set: ROWS samples (inputs 12 wide, targets 6 wide)."""
    g = torch.Generator().manual_seed(3)
    return torch.randn(ROWS, 12, generator=g), torch.randn(ROWS, 6, generator=g)


class Net(torch.nn.Module):
    """Two linear layers named as the tensor-parallel presets expect (fc1 column-, fc2 row-parallel)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 32)
        self.fc2 = torch.nn.Linear(32, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Net()


def sampler_batches(num_replicas: int, rank: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """What a DataLoader over a DistributedSampler(num_replicas, rank) gives this rank, in order."""
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    ds = TensorDataset(*data())
    sampler = DistributedSampler(ds, num_replicas=num_replicas, rank=rank, shuffle=False)
    return [(x, y) for x, y in DataLoader(ds, batch_size=batch, sampler=sampler)]


def _refusal(fn: Callable[[], Any]) -> str | None:
    """The message of the ValueError ``fn`` raises, or None when it runs."""
    try:
        fn()
    except ValueError as e:
        return str(e)
    return None


class DistCalls:
    """Counts calls of torch.distributed's collectives and point-to-point ops (patched in place)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.n = 0
        self._saved = {name: getattr(dist, name) for name in COUNTED}
        for name, fn in self._saved.items():
            setattr(dist, name, self._counting(fn))

    def _counting(self, fn: Callable) -> Callable:
        def call(*a: Any, **k: Any) -> Any:
            self.n += 1
            return fn(*a, **k)
        return call

    def restore(self) -> None:
        import torch.distributed as dist

        for name, fn in self._saved.items():
            setattr(dist, name, fn)


def one_mesh_cases(rank: int) -> dict[str, Any]:
    """fsdp+tp on dp=2,tp=2: global mode fed pieces, a world-size sampler in local mode, the
    recipe, the check off, the counts, a shape change, eager mode."""
    import spmdc

    out: dict[str, Any] = {}
    xg, yg = data()
    x8, y8 = xg[:8], yg[:8]
    world = sampler_batches(4, rank, 2)          # DistributedSampler defaults: every rank its own piece
    xw, yw = world[0]
    kw = dict(mesh=MESH, plan="fsdp+tp", train=True, loss_fn=F.mse_loss, optimizer=SGD)

    # -- global (the default) fed the pieces of a world-size sampler: every entry point refuses ------
    cm = spmdc.compile(model(), (x8,), loss_inputs=(y8,), **kw)
    out["global_step"] = _refusal(lambda: cm.step(xw, yw))
    out["global_backward"] = _refusal(lambda: cm.backward(xw, yw))
    out["global_forward"] = _refusal(lambda: cm(xw))
    out["global_checks"] = cm._input_check.collectives
    # the whole batch on every rank: accepted; the program (compiled by spmdc.compile) is checked once
    calls = DistCalls()
    per_step = []
    try:
        for _ in range(3):
            before = calls.n
            out.setdefault("global_ok_losses", []).append(float(cm.step(x8, y8)))
            per_step.append(calls.n - before)
    finally:
        calls.restore()
    out["global_ok_calls"] = per_step
    out["global_ok_checks"] = cm._input_check.collectives
    # compiled at the pieces' shape, so only the values differ
    cms = spmdc.compile(model(), (xw,), loss_inputs=(yw,), **kw)
    out["global_same_shape"] = _refusal(lambda: cms.step(xw, yw))

    # -- the check off: it runs, on the wrong batch -------------------------------------------------
    cmo = spmdc.compile(model(), (xw,), loss_inputs=(yw,), check_inputs=False, **kw)
    out["off_loss"] = float(cmo.step(xw, yw))
    out["off_state"] = cmo.full_state_dict()
    out["off_checks"] = cmo._input_check.collectives

    # -- local mode under fsdp+tp with a world-size sampler: the tp pair holds different pieces -----
    xl, yl = sampler_batches(4, rank, 4)[0]       # the recipe's batch size, the sampler's defaults
    cml = spmdc.compile(model(), (xl,), loss_inputs=(yl,), inputs="local", **kw)
    out["local_world"] = _refusal(lambda: cml.step(xl, yl))

    # -- the recipe: num_replicas, rank = spmdc.sampler_args(cm) -----------------------------------
    out["sampler_args"] = spmdc.sampler_args(cml)
    n, r = out["sampler_args"]
    batches = sampler_batches(n, r, 4)
    out["recipe_losses"] = [float(cml.step(x, y)) for x, y in batches[:2] + batches[:1]]
    out["recipe_checks"] = cml._input_check.collectives
    out["recipe_state"] = cml.full_state_dict()
    # a shape already checked is not checked again (zero cost per step): wrong pieces pass here ...
    out["later_unchecked"] = _refusal(lambda: cml.backward(xl, yl))
    # ... but a new shape is a new program: checked again
    out["new_shape"] = _refusal(lambda: cml.step(*sampler_batches(4, rank, 3)[0]))
    # unequal pieces (a last short batch on some ranks): refused, not a hang
    rows = 6 if r == 0 else 5
    out["unequal"] = _refusal(lambda: cml.step(xg[:rows], yg[:rows]))

    # -- eager mode: the same check --------------------------------------------------------------------
    cme = spmdc.eager(model(), (x8,), mesh=MESH, plan="fsdp+tp", train=True, loss_fn=F.mse_loss,
                      loss_inputs=(y8,), optimizer=SGD)
    out["eager_step"] = _refusal(lambda: cme.step(xw[:1].expand(8, 12).contiguous() + rank, y8))
    out["eager_ok_loss"] = float(cme.step(x8, y8))
    return out


HETERO = {"name": "two-groups", "groups": [
    {"name": "a", "ranks": [0, 1], "mesh": "tp=2", "plan": "megatron", "share": 1},
    {"name": "b", "ranks": [2, 3], "mesh": "tp=2", "plan": "megatron", "share": 1}]}
PIPELINE = {"name": "two-stages", "microbatches": 2, "stages": [
    {"ranks": [0, 1], "mesh": "dp=2", "plan": "dp", "modules": ["fc1"]},
    {"ranks": [2, 3], "mesh": "dp=2", "plan": "dp", "modules": ["fc2"]}]}


def groups_cases(rank: int) -> dict[str, Any]:
    """Device groups and pipeline stages: the global batch must be the same on every rank of the job."""
    import spmdc
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.pipeline_plan import PipelinePlan

    out: dict[str, Any] = {}
    xg, yg = data()
    x8, y8 = xg[:8], yg[:8]
    per_group = sampler_batches(2, rank // 2, 8)[0]   # each group its own "global" batch
    cmh = spmdc.compile(model(), (x8,), plan=HeteroPlan.from_dict(HETERO), train=True, loss_fn=F.mse_loss,
                        loss_inputs=(y8,), optimizer=SGD)
    out["hetero_refused"] = _refusal(lambda: cmh.step(*per_group))
    out["hetero_loss"] = float(cmh.step(x8, y8))
    try:   # the forward's output is split across the groups: refused by name, never a wrong tensor
        cmh(x8, full=True)
        out["hetero_forward"] = None
    except NotImplementedError as e:
        out["hetero_forward"] = str(e)
    pm = spmdc.compile(model(), (x8,), plan=PipelinePlan.from_dict(PIPELINE), train=True, loss_fn=F.mse_loss,
                       loss_inputs=(y8,), optimizer=SGD)
    out["pipeline_refused"] = _refusal(lambda: pm.step(*per_group))
    out["pipeline_loss"] = float(pm.step(x8, y8))
    out["pipeline_checks"] = pm.pipeline._input_check.collectives
    pmo = spmdc.compile(model(), (x8,), plan=PipelinePlan.from_dict(PIPELINE), train=True, loss_fn=F.mse_loss,
                        loss_inputs=(y8,), optimizer=SGD, check_inputs=False)
    out["pipeline_off_loss"] = float(pmo.step(*per_group))
    return out


def input_cases() -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        return one_mesh_cases(rank) | groups_cases(rank)
    finally:
        dist.destroy_process_group()
