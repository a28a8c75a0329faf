"""Compile a job for its whole world without starting a rank, and predict each rank role's cost.

    report = dry_run(model, (x,), mesh=Mesh.parse("dp=512,tp=8"), plan="fsdp+tp", train=True,
                     loss_fn=loss, optimizer="adamw", device=device_profile("h100"))
    for role in report.roles:
        role.ranks, role.prediction.memory.total, role.prediction.step_seconds

A **role** is a set of ranks whose programs have the same shapes everywhere: the same device
group (or the only mesh) and, for every tensor the global program lays out, the same local shape.
Ranks of one role differ only in which slice they hold, so their memory, collectives and time are
the same; the dry run partitions one rank of each role (the lowest) and predicts from its
program (:mod:`spmdc.api.predict`). An evenly divisible layout gives every rank of a mesh
one role, whatever its size; an uneven one (torch.chunk's last piece shorter) splits the ranks
along the axes that cut it.

A :class:`~spmdc.sharding.pipeline_plan.PipelinePlan` is predicted stage by stage over its
schedule (:mod:`spmdc.api.dry_run_pipeline`): roles are named ``stage<k>``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spmdc.api.predict import Prediction, group_calls, group_tables, predict

__all__ = ["DryRun", "Role", "dry_run"]


@dataclass
class Role:
    """Ranks that run one program shape, and its prediction."""

    group: str                 # "-" for one mesh, else the device group's name
    ranks: list[int]           # job ranks
    rank: int                  # the one compiled (lowest)
    mesh: Any
    prediction: Prediction
    ops: int = 0               # ops in its program

    def describe_ranks(self) -> str:
        r = self.ranks
        if len(r) > 1 and r == list(range(r[0], r[-1] + 1)):
            return f"{r[0]}-{r[-1]} ({len(r)})"
        shown = ", ".join(map(str, r[:6])) + (", ..." if len(r) > 6 else "")
        return f"{shown} ({len(r)})"


@dataclass
class DryRun:
    """Every role of the job, and what compiling took."""

    roles: list[Role]
    world: int
    program: str               # "train" or "forward"
    timings: dict[str, float] = field(default_factory=dict)


def whole_storage(module: Any, step: Any, optimizer: str | None) -> dict[int, int] | None:
    """Argument index → stored bytes when the optimizer makes every rank store each parameter whole
    (:class:`~spmdc.api.compiled_module.CompiledModule`: a class that is not elementwise, or a
    per-tensor one over pieces that are not whole-or-nothing); None when storage is the program's layout."""
    if optimizer is None:
        return None
    from spmdc.api.compiled_module import _whole_or_nothing
    from spmdc.compiler.compilation import main_function
    from spmdc.dialects.shard import SHARDING_ATTR
    from spmdc.runtime.optimizers import is_elementwise, is_per_tensor, optimizer_class

    cls = optimizer_class(optimizer)
    if is_elementwise(cls):
        return None
    func = main_function(module)
    params = [i for i, k in enumerate(step.arg_kinds) if k.startswith("param:") and i not in step.buffers]
    layouts = [func.arg_attrs(i).get(SHARDING_ATTR) for i in params]
    if is_per_tensor(cls) and all(s is None or _whole_or_nothing(s.placements) for s in layouts):
        return None
    out = {}
    for i in params:
        t = func.args[i].type
        out[i] = t.num_bytes // max(1, t.num_elements) * math.prod(step.arg_shapes[i])
    return out


def _by_group_calls(module: Any, tables: dict | None, ranks: list[int]) -> list[list[int]]:
    """``ranks`` (job ranks of one shape role) split by the cross-group collectives each issues
    (device groups: a rank's share of a split all-reduce depends on which slices it holds)."""
    if not tables:
        return [ranks]
    out: dict[tuple, list[int]] = {}
    for r in ranks:
        key = tuple(tuple(group_calls(op, table, r)) for op, table in tables.items())
        out.setdefault(key, []).append(r)
    return list(out.values())


def dry_run(model: Any, inputs: Sequence[Any], *, mesh: Any, plan: Any, device: Any, train: bool = False,
            loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
            optimizer: str | None = None, options: Any = None, target: str = "torch",
            max_roles: int = 64, jobs: int | None = None) -> DryRun:
    """Compile ``model`` under ``plan`` for every rank role (see the module doc) and predict each;
    more than ``max_roles`` shape roles (ragged layouts give every rank its own) are refused before
    any is partitioned, with their number.
    ``mesh``: the job's mesh (None for a plan with device groups); ``device``: a
    :class:`~spmdc.compiler.devices.DeviceProfile`; ``optimizer``: its name (``spmdc run --optimizer``);
    ``jobs``: a pipeline's stages compiled at a time, in forked workers (None: one per CPU)."""
    from spmdc.compiler.driver import compile_global, rank_module
    from spmdc.compiler.options import CompileOptions
    from spmdc.frontend.deferred_init import cpu_examples, is_meta_model
    from spmdc.ir.gc_pause import gc_paused
    from spmdc.ir.parser import parse_module
    from spmdc.passes.partition_roles import shape_roles
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.pipeline_plan import PipelinePlan

    opts = options if options is not None else CompileOptions(verify_each=False)   # (each stage's result is)
    if is_meta_model(model):   # (its example inputs, where a user built them on meta too: CPU ones of their shapes)
        inputs, loss_inputs, kwargs = cpu_examples((tuple(inputs), tuple(loss_inputs), dict(kwargs or {})))
    if opts.execution == "eager":
        raise ValueError("spmdc plan predicts compiled programs; eager execution (op by op) is not predicted")
    if isinstance(plan, PipelinePlan):
        if not train:
            raise ValueError(f"spmdc plan: pipeline plan '{plan.name}' runs training steps; its forward alone is "
                             "not a pipeline program (predict it without the pp axis)")
        from spmdc.api.dry_run_pipeline import pipeline_dry_run

        return pipeline_dry_run(model, inputs, plan=plan, device=device, loss_fn=loss_fn, loss_inputs=loss_inputs,
                                kwargs=kwargs, optimizer=optimizer, options=opts, target=target, max_roles=max_roles,
                                jobs=jobs)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    job = dict(train=train, loss_fn=loss_fn, loss_inputs=loss_inputs, kwargs=kwargs, options=opts)
    if isinstance(plan, HeteroPlan):
        from spmdc.compiler.device_groups import compile_groups

        steps = compile_groups(model, plan, inputs=list(inputs), **job)
        parts = [(g.name, steps[i], plan.virtual_mesh(i),
                  [(plan.virtual_rank(i, r), r) for r in g.ranks]) for i, g in enumerate(plan.groups)]
        world = plan.world
    else:
        step = compile_global(model, inputs, mesh=mesh, plan=plan, **job)
        parts = [("-", step, mesh, [(r, r) for r in range(mesh.size)])]
        world = mesh.size
    timings["global"] = time.perf_counter() - t
    timings["capture"] = sum(p[1].timings.get("total", 0.0) for p in parts)   # (each group captures)
    timings["export"] = sum(p[1].timings.get("export", 0.0) for p in parts)
    t = time.perf_counter()
    roles: list[Role] = []
    for group, step, vmesh, members in parts:
        job_rank = dict(members)
        with gc_paused():
            parsed = parse_module(step.global_ir, "<global>")
        shapes = shape_roles(parsed, vmesh, [v for v, _ in members])
        if len(shapes) > max_roles:
            raise ValueError(f"spmdc plan: the ranks of {'group ' + group if group != '-' else 'the mesh'} hold "
                             f"{len(shapes)} different sets of local shapes (uneven or ragged layouts), so as many "
                             f"programs would be partitioned; at most {max_roles} are (--max-roles N to allow more)")
        for virtual in shapes:
            module = rank_module(step, virtual[0], target, parsed=parsed)
            tables = group_tables(module) if isinstance(plan, HeteroPlan) else None
            for same in _by_group_calls(module, tables, [job_rank[v] for v in virtual]):
                pred = predict(module, step, vmesh, device, optimizer if train else None,
                               store=whole_storage(module, step, optimizer) if train else None, job_rank=same[0],
                               tables=tables)
                roles.append(Role(group, same, same[0], vmesh, pred, sum(1 for _ in module.walk())))
    timings["roles"] = time.perf_counter() - t
    return DryRun(roles, world, "train" if train else "forward", timings)
