"""``spmdc plan`` for pipeline plans: every stage compiled for its mesh, each rank role predicted over
the whole schedule, without starting a rank.

    report = dry_run(model, (x,), mesh=None, plan=PipelinePlan.from_mesh("pp=4,dp=128,tp=8", "fsdp+tp"), ...)
    [(role.group, role.ranks, role.prediction.memory.total) for role in report.roles]   # "stage0", ...

The model is cut into stages as :class:`~spmdc.api.pipeline_executor.PipelineExecutor` cuts it
(:func:`~spmdc.frontend.stages.split_stages` on micro-batch 0), and each stage's programs are the
ones its ranks compile (:func:`~spmdc.api.pipeline_executor.stage_jobs`): a forward (not on the
last stage) and a training program that recomputes the forward from the stashed inputs. A stage's
ranks are split into roles by local shapes (:func:`~spmdc.passes.partition_roles.shape_roles`) and
by what they send and receive (a replicated boundary value is sent by one rank of its stage); one
rank per shape role is partitioned. Per step, a rank of stage ``k`` runs each program once per
micro-batch; its prediction is

* **memory**: its parameters and optimizer state, and the step's peak found by walking its
  schedule (:func:`_schedule_peak`) as :class:`~spmdc.api.pipeline_step.StepState` holds things:
  a forward's inputs stashed until its backward, every send's buffer until the round ends, its
  gradients accumulated from its first backward on (each micro-batch's added in), each program's
  own liveness peak on top; or, when larger, the optimizer update after the last round;
* **collectives**: its programs' per micro-batch, times the micro-batches; the gradients its
  training program leaves unreduced (stored replicated where the batch is split: ``dp``,
  ``rep``), all-reduced once per step, one ``comm.all_reduce_bucket`` per mesh axis
  (:func:`_pending_bytes`); and on ``pp`` what the runtime records besides: ``recv`` and
  ``send`` (one message per source and destination rank, by the move tables the runtime
  builds: :func:`~spmdc.api.pipeline_boundaries.boundary_module`,
  :func:`~spmdc.passes.pipeline_schedule.pipeline_layout`), ``all_reduce`` (a tied weight's gradient
  summed over its stages as
  :meth:`~spmdc.api.pipeline_parameters.StageParameters._tie_groups` sums it: this rank's piece
  over one rank per stage where the stages' meshes and layouts agree, else the whole gradient over
  all their ranks; priced as such a call, a sync point) and ``broadcast`` (the step's loss);
* **time**: a stage's busy time is the micro-batches times its programs' predicted times (plus
  its receives) and the optimizer's update; the step is the busiest device group's time plus the
  fill and drain, ``(groups - 1)`` times the slowest stage's time per micro-batch (1F1B, GPipe and
  interleaved 1F1B alike); on ranks sharing cores the stages that wait free them
  (:func:`~spmdc.api.predict.pipeline_step`). That bubble is each role's ``bubble_seconds``.

Under interleaved 1F1B a device group holds several stages: its ranks' memory and time add up
over them.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["pipeline_dry_run"]


def _tensor_bytes(t: Any) -> int:
    return t.num_bytes if hasattr(t, "num_bytes") else 0


def _split(model: Any, inputs: Sequence[Any], plan: Any, *, loss_fn: Callable | None,
           loss_inputs: Sequence[Any], kwargs: Mapping[str, Any] | None, options: Any) -> tuple[Any, list]:
    """The stages as the executor cuts them, and micro-batch 0 (the job's inputs in order)."""
    from spmdc.api.micro_batches import chunks
    from spmdc.compiler.driver import split_example_inputs
    from spmdc.frontend.stages import auto_stages, split_stages

    model_args, loss_args = split_example_inputs(inputs, loss_fn, loss_inputs)
    kwargs = dict(kwargs or {})
    every = list(model_args) + list(loss_args) + list(kwargs.values())
    names = [f"input #{i}" for i in range(len(model_args) + len(loss_args))] + list(kwargs)
    mb0 = chunks(every, plan.microbatches, names)[0]
    n_in = len(model_args)
    modules = [list(s.modules) for s in plan.stages] if plan.stages[0].modules else auto_stages(model,
                                                                                              len(plan.stages))
    n_loss = n_in + len(loss_args)
    split = split_stages(model, mb0[:n_in], stages=modules, loss_fn=loss_fn, loss_inputs=mb0[n_in:n_loss],
                         kwargs=dict(zip(kwargs, mb0[n_loss:])),
                         mixed_precision=options.mixed_precision, checkpoint=options.checkpoint)
    return split, mb0


def _compile_stage(split: Any, k: int, spec: Any, mb0: list[Any], options: Any, meta: bool) -> list:
    """Stage ``k``'s CompiledSteps (forward first when it has one), as its ranks compile them."""
    from spmdc.api.pipeline_executor import stage_jobs
    from spmdc.compiler.driver import compile_global
    from spmdc.frontend.deferred_init import fake_parameters, is_meta_model

    module = split.stages[k].module
    steps = []
    for job in stage_jobs(split, k, mb0, options, fake=meta):   # (a meta model: boundary examples are fake tensors)
        if is_meta_model(module):   # (as the executor compiles a meta model's stage)
            with fake_parameters(module):
                steps.append(compile_global(module, mesh=spec.mesh, plan=spec.plan, **job))
        else:
            steps.append(compile_global(module, mesh=spec.mesh, plan=spec.plan, **job))
    return steps


def _local_inputs(split: Any, k: int, steps: list, modules: list) -> dict[str, int]:
    """Stage ``k``'s rank's boundary inputs per micro-batch, from its training program's local
    argument types: ``stash`` (its inputs, kept from a micro-batch's forward to its backward) and
    ``recv_grads`` (before a middle stage's backward, the output gradients it received)."""
    from spmdc.compiler.compilation import main_function

    train = steps[-1]
    func = main_function(modules[-1])
    inputs = [func.args[i].type for i, kind in enumerate(train.arg_kinds) if kind.startswith("input:")]
    n = len(split.stages[k].inputs)
    grads = inputs[n:] if k < len(split.stages) - 1 else []
    return {"stash": sum(_tensor_bytes(t) for t in inputs[:n]), "recv_grads": sum(_tensor_bytes(t) for t in grads)}


def _element_bytes(t: Any) -> int:
    return t.num_bytes // t.num_elements if getattr(t, "num_elements", 0) else 4


def _wire_bytes(split: Any, k: int, steps: list, modules: list, out: dict[tuple[int, bool], int]) -> None:
    """Bytes per element each boundary value (``(value, False)``) leaves stage ``k`` in (its forward
    result's type) and each gradient (``(value, True)``) it sends back (its ``grad_input`` result's)."""
    from spmdc.compiler.compilation import main_function
    from spmdc.dialects.attrs import BUFFER_UPDATE_ATTR

    stage = split.stages[k]
    if k < len(split.stages) - 1:
        fn = main_function(modules[0])
        kept = [r for r in range(len(steps[0].result_kinds))   # (buffer updates left out)
                if fn.res_attrs(r).get(BUFFER_UPDATE_ATTR) is None]
        for pos, v in enumerate(stage.outputs):
            out[(v, False)] = _element_bytes(fn.function_type.results[kept[pos]])
    fn = main_function(modules[-1])
    for r, kind in enumerate(steps[-1].result_kinds):
        if kind.startswith("grad_input:"):
            what, v = stage.inputs[int(kind.split(":")[1])]
            if what == "value":
                out[(v, True)] = _element_bytes(fn.function_type.results[r])


def _rank_traffic(split: Any, k: int, rank: int, moves: Any, wire: dict[tuple[int, bool], int],
                  index: dict | None = None) -> dict[str, int]:
    """What job rank ``rank`` of stage ``k`` sends and receives per micro-batch, by the move tables
    (:class:`~spmdc.passes.pipeline_schedule.PipelineLayout`), as
    :class:`~spmdc.api.pipeline_step.StepState` does: one message per (source, destination) pair.
    ``sent_forward``/``sent_backward``: bytes of its boundary outputs / input gradients (each
    send's buffer is kept until the round ends); ``recv``/``msgs``: bytes and messages received;
    ``sends``: messages sent; ``waits``: the receives it waits on (its activations, its output
    gradients: each a wait on a peer stage, :func:`~spmdc.api.predict.sync_points`). ``index``: a
    dict this fills with each table's per-rank sums (pass the same one for every rank of a job)."""
    from spmdc.api.pipeline_boundaries import diff_outputs
    from spmdc.sharding.slices import box_numel

    index = {} if index is None else index
    stage = split.stages[k]
    out = {"sent_forward": 0, "sent_backward": 0, "sends": 0, "recv": 0, "msgs": 0, "waits": 0}

    def sums(v: int, grad: bool) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """(source rank -> [elements, messages], destination rank -> [elements, messages])."""
        if (v, grad) not in index:
            sent: dict[int, list[int]] = {}
            got: dict[int, list[int]] = {}
            for plan in moves.moves(v, grad):
                for (src, dst), cells in plan.sends.items():
                    n = sum(box_numel(c) for c, _, _ in cells)
                    for table, r in ((sent, src), (got, dst)):
                        row = table.setdefault(r, [0, 0])
                        row[0] += n
                        row[1] += 1
            index[(v, grad)] = (sent, got)
        return index[(v, grad)]

    def walk(values: list[int], grad: bool, key: str | None) -> None:
        if key is None and any(sums(v, grad)[1].get(rank) for v in values):
            out["waits"] += 1   # (the stage waits for this round's messages: activations, or gradients)
        for v in values:
            sent, got = sums(v, grad)
            n, msgs = (sent if key else got).get(rank, (0, 0))
            nbytes = n * wire.get((v, grad), 4)
            if key:
                out[key] += nbytes
                out["sends"] += msgs
            else:
                out["recv"] += nbytes
                out["msgs"] += msgs

    inputs = [v for what, v in stage.inputs if what == "value"]
    walk(list(stage.outputs), False, "sent_forward")
    walk([v for v in inputs if split.values[v].differentiable], True, "sent_backward")
    walk(inputs, False, None)
    walk(diff_outputs(split, stage), True, None)
    return out


def _grad_bytes(module: Any, step: Any) -> tuple[int, int]:
    """(bytes of the training program's parameter gradients, of its largest one)."""
    from spmdc.compiler.compilation import main_function

    ret = list(main_function(module).body.ops)[-1]
    sizes = [_tensor_bytes(v.type) for k, v in zip(step.result_kinds, ret.operands) if k.startswith("grad:")]
    return sum(sizes), max(sizes, default=0)


def _pending_bytes(module: Any, step: Any, shared_here: set[str]) -> dict[str, tuple[int, int]]:
    """Per mesh axis, (bytes, how many) of the training program's gradients it leaves unreduced there
    (pending sums over replicated storage, :func:`~spmdc.api.pipeline_executor.stage_jobs`), which
    the runtime sums over the micro-batches and all-reduces once per step, one bucket per axis
    (:meth:`~spmdc.api.pipeline_executor.PipelineExecutor._sum_later`); ``shared_here``: parameters
    another stage of the same ranks also holds (reduced per micro-batch instead)."""
    from spmdc.api.pipeline_boundaries import program_layouts
    from spmdc.compiler.compilation import main_function
    from spmdc.runtime.gradients import summed_later

    args, res, arg_kinds, res_kinds = program_layouts(module, step, range(len(step.result_kinds)))
    storage = {kind[6:]: lay for kind, lay in zip(arg_kinds, args) if kind.startswith("param:")}
    types = main_function(module).function_type.results
    axes = step.mesh.axis_names
    out: dict[str, tuple[int, int]] = {}
    for r, (kind, lay) in enumerate(zip(res_kinds, res)):
        name = kind[5:]
        if not kind.startswith("grad:") or name in shared_here or name not in storage:
            continue
        for a in summed_later(tuple(lay), tuple(storage[name])) or []:
            nbytes, count = out.get(axes[a], (0, 0))
            out[axes[a]] = (nbytes + _tensor_bytes(types[r]), count + 1)
    return out


def _update_bytes(module: Any, step: Any, optimizer: str | None) -> int:
    from spmdc.api.predict import optimizer_transient
    from spmdc.compiler.compilation import main_function

    if optimizer is None:
        return 0
    func = main_function(module)
    trainable = [i for i, k in enumerate(step.arg_kinds) if k.startswith("param:") and i not in step.buffers]
    return optimizer_transient(optimizer, [_tensor_bytes(func.args[i].type) for i in trainable])


@dataclass
class _StageRole:
    """One role of one stage: its programs' predictions and what its schedule keeps alive."""

    key: Any                     # its shape role, then (with its traffic) its role
    preds: list[Any]             # per program (forward first), with the optimizer's state on the training one
    transient: list[tuple[int, int, int]]   # per program: (gradients, activations, collective buffers) at its peak
    traffic: dict[str, int]      # _local_inputs, then with _rank_traffic
    grads: int                   # its parameter gradients (accumulated over the micro-batches)
    largest_grad: int
    update: int                  # the optimizer update's temporaries
    ops: int
    pending: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)   # axis -> (bytes, gradients)
    # reduced once a step


@dataclass
class _StageResult:
    """One stage's part of the dry run (what a worker sends back)."""

    roles: dict[int, _StageRole]          # mesh index -> its role's facts (traffic without the boundary moves)
    layouts: dict[str, Any]               # "F" / "B": its programs' argument and result layouts
    wire: dict[tuple[int, bool], int]     # (value, gradient?) -> bytes per element it moves in
    timings: dict[str, float]


def _tied_calls(split: Any, plan: Any, model: Any, layouts: dict[int, dict[str, Any]]
                ) -> dict[int, list[tuple[int, dict[int, int]]]]:
    """Per stage, per trained parameter it shares with other stages: ``(ranks in its sum, bytes per
    mesh index)``, as :meth:`~spmdc.api.pipeline_parameters.StageParameters._tie_groups` sums it: one
    rank per stage with this rank's piece where :func:`~spmdc.api.pipeline_parameters.tied_by_pieces`,
    else the whole gradient over every rank of those stages."""
    from spmdc.api.pipeline_parameters import _param_layout, tied_by_pieces
    from spmdc.sharding.mesh import local_shape

    out: dict[int, list[tuple[int, dict[int, int]]]] = {}
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, stages in sorted(split.shared.items()):
        if name not in params or not params[name].requires_grad:
            continue
        p, stages = params[name], sorted(stages)
        specs = [plan.stages[k] for k in stages]
        lays = [_param_layout(layouts, k, name) for k in stages]
        whole = p.numel() * p.element_size()
        pieces = tied_by_pieces([s.mesh for s in specs], lays)
        for k, spec, lay in zip(stages, specs, lays):
            mesh = spec.mesh
            if pieces:
                ranks = len({s.ranks[0] for s in specs})   # (interleaved stages of one group: one rank)
                by_index = {}
                for i in range(mesh.size):
                    coords = tuple(mesh.coords(i).values())
                    by_index[i] = math.prod(local_shape(tuple(p.shape), lay, mesh.shape, coords)) * p.element_size()
            else:
                ranks = len({r for s in specs for r in s.ranks})
                by_index = dict.fromkeys(range(mesh.size), whole)
            out.setdefault(k, []).append((ranks, by_index))
    return out


def _schedule_peak(facts: dict[int, _StageRole], actions: list[tuple[str, int, int]], last: int,
                   stage_name: Callable[[int], str]) -> tuple[int, int, int, str]:
    """Walk a device group's schedule (``(kind, stage, mb)``) keeping what it holds alive, as
    :class:`~spmdc.api.pipeline_step.StepState` does: a forward's inputs stashed until its
    backward, every send's buffer until the round ends, a stage's gradients accumulated from its
    first backward on. Returns (gradients, activations, buffers, where) at the step's peak."""
    held = sends = 0   # stashed inputs, send buffers
    acc: dict[int, int] = {}   # stage -> its accumulated gradients
    best = (0, 0, 0, "")

    def seen(here: tuple[int, int, int], where: str) -> None:
        nonlocal best
        if sum(here) > sum(best[:3]):
            best = (*here, where)

    for kind, k, mb in actions:
        f = facts[k]
        t = f.traffic
        g, a, c = f.transient[0] if kind == "F" else f.transient[-1]
        inputs = t["stash"] if kind != "B" else 0          # (a backward's inputs are the stashed ones)
        grads_in = t["recv_grads"] if kind == "B" else 0   # (the output gradients it received)
        total = sum(acc.values())
        seen((total + g, held + inputs + a, sends + grads_in + c), f"{stage_name(k)} {kind}{mb}")
        if kind in ("B", "FB"):   # its gradients, each added into the accumulated ones (the last stage scales them)
            extra = f.largest_grad * (2 if k == last else 1)
            seen((total + f.grads + extra, held + inputs, sends), f"{stage_name(k)} {kind}{mb} (accumulation)")
            acc[k] = f.grads
            sends += t["sent_backward"]
        if kind == "F":
            held += t["stash"]
            sends += t["sent_forward"]
        elif kind == "B":
            held -= t["stash"]
    return best


def pipeline_dry_run(model: Any, inputs: Sequence[Any], *, plan: Any, device: Any, loss_fn: Callable | None,
                     loss_inputs: Sequence[Any], kwargs: Mapping[str, Any] | None, optimizer: str | None,
                     options: Any, target: str, max_roles: int, jobs: int | None = None) -> Any:
    """:func:`spmdc.api.dry_run.dry_run` of a PipelinePlan (training; see the module doc). ``jobs``: the
    stages compiled and predicted at a time, each in a forked worker (:mod:`spmdc.api.forked`; None:
    one per CPU; 1: here, one after the other)."""
    from spmdc.api.dry_run import DryRun, Role, whole_storage
    from spmdc.api.forked import available_cpus, forked_map
    from spmdc.api.pipeline_boundaries import boundary_module, program_layouts
    from spmdc.api.predict import (
        CommRow,
        MemoryBreakdown,
        Prediction,
        _add_call,
        all_reduce_seconds,
        pipeline_step,
        predict,
        step_memory,
    )
    from spmdc.compiler.compilation import main_function
    from spmdc.compiler.driver import rank_module
    from spmdc.frontend.deferred_init import is_meta_model
    from spmdc.ir.gc_pause import gc_paused
    from spmdc.ir.parser import parse_module
    from spmdc.passes.partition_roles import shape_roles
    from spmdc.passes.pipeline_schedule import pipeline_layout
    from spmdc.sharding.pipeline_plan import interleaved_actions, stage_actions

    timings: dict[str, float] = {}
    t = time.perf_counter()
    split, mb0 = _split(model, inputs, plan, loss_fn=loss_fn, loss_inputs=loss_inputs, kwargs=kwargs, options=options)
    meta = is_meta_model(model)
    timings["split"] = time.perf_counter() - t
    m, n, groups = plan.microbatches, len(plan.stages), plan.groups

    def actions(g: int) -> list[tuple[str, int, int]]:
        if plan.virtual_stages > 1:
            return list(interleaved_actions(groups, plan.virtual_stages, m, g))
        return [(kind, g, mb) for kind, mb in stage_actions(plan.schedule, n, m, g)]

    def shared_here(k: int) -> set[str]:   # parameters stage k shares with another stage of its ranks
        return {name for name, ks in split.shared.items()
                if k in ks and len({j for j in ks if j % groups == k % groups}) > 1}

    def stage(k: int) -> _StageResult:
        """Stage ``k`` compiled, its ranks split into roles, one rank per role partitioned and predicted."""
        spec = plan.stages[k]
        t0 = time.perf_counter()
        steps = _compile_stage(split, k, spec, mb0, options, meta)
        compiled = time.perf_counter() - t0
        with gc_paused():
            parsed = [parse_module(s.global_ir, "<global>") for s in steps]
        roles = shape_roles(parsed[-1], spec.mesh, range(spec.mesh.size))
        if len(roles) > max_roles:
            raise ValueError(f"spmdc plan: the ranks of stage {k} hold {len(roles)} different sets of local shapes "
                             f"(uneven or ragged layouts); at most {max_roles} are partitioned (--max-roles N)")
        out = _StageResult({}, {}, {}, {"global": compiled,
                                        "capture": sum(s.timings.get("total", 0.0) for s in steps),
                                        "export": sum(s.timings.get("export", 0.0) for s in steps)})
        for j, members in enumerate(roles):
            modules = [rank_module(s, members[0], target, parsed=p) for s, p in zip(steps, parsed)]
            preds = [predict(mod, s, spec.mesh, device, optimizer if s.name == "train" else None,
                             store=whole_storage(mod, s, optimizer) if s.name == "train" else None)
                     for mod, s in zip(modules, steps)]
            peaks = [step_memory(main_function(mod), s, None, device=device) for mod, s in zip(modules, steps)]
            grads, largest = _grad_bytes(modules[-1], steps[-1])
            fact = _StageRole(j, preds, [(p.gradients, p.activations, p.comm_buffers) for p in peaks],
                              _local_inputs(split, k, steps, modules), grads, largest,
                              _update_bytes(modules[-1], steps[-1], optimizer),
                              sum(1 for mod in modules for _ in mod.walk()),
                              _pending_bytes(modules[-1], steps[-1], shared_here(k)))
            if j == 0:   # (every role's arguments and results have the same global layouts)
                out.layouts["B"] = program_layouts(modules[-1], steps[-1])
                if len(steps) > 1:
                    out.layouts["F"] = program_layouts(modules[0], steps[0])
                _wire_bytes(split, k, steps, modules, out.wire)
            for i in members:
                out.roles[i] = fact
        out.timings["roles"] = time.perf_counter() - t0 - compiled
        return out

    # the stages are independent until their boundaries are matched: each in a worker of its own
    results = forked_map(stage, range(n), available_cpus() if jobs is None else jobs)
    stage_roles: list[dict[int, _StageRole]] = [r.roles for r in results]   # per stage: mesh index -> its facts
    layouts: dict[int, dict[str, Any]] = {k: r.layouts for k, r in enumerate(results)}   # per stage, per program
    wire: dict[tuple[int, bool], int] = {}             # (value, gradient?) -> bytes per element it moves in
    for r in results:
        wire.update(r.wire)
    for key in ("global", "capture", "export", "roles"):   # (the stages' own seconds, summed over the stages)
        timings[key] = sum(r.timings[key] for r in results)
    timings["stages"] = time.perf_counter() - t
    t = time.perf_counter()
    # what each rank sends and receives, by the tables the runtime moves boundary values by: ranks of
    # one shape role can differ (a replicated value is sent by one rank of its stage)
    moves = pipeline_layout(boundary_module(split, plan.stages, layouts))
    index: dict = {}
    for k, by_rank in enumerate(stage_roles):
        for i, fact in list(by_rank.items()):
            tr = {**fact.traffic, **_rank_traffic(split, k, plan.stages[k].ranks[i], moves, wire, index)}
            by_rank[i] = dataclasses.replace(fact, traffic=tr, key=(fact.key, tuple(sorted(tr.items()))))

    def recv_seconds(f: _StageRole) -> float:   # (each receive also waits on a peer stage: sync_us)
        return m * (f.traffic["msgs"] * device.latency_us * 1e-6 + f.traffic["recv"] / (device.inter_gbps * 1e9)
                    + f.traffic.get("waits", 0) * getattr(device, "sync_us", 0.0) * 1e-6)

    tied = _tied_calls(split, plan, model, layouts)   # stage -> (ranks summing, bytes) per tied parameter
    slowest = max(sum(p.step_seconds - p.update_seconds for p in f.preds) + recv_seconds(f) / m
                  for by_rank in stage_roles for f in by_rank.values())
    out_roles: list[Role] = []
    for g in range(groups):
        stages = [k for k in range(n) if k % groups == g]
        mesh = plan.stages[stages[0]].mesh
        keyed: dict[tuple, list[int]] = {}
        for i in range(mesh.size):
            keyed.setdefault(tuple(stage_roles[k][i].key for k in stages), []).append(i)
        for members in sorted(keyed.values(), key=lambda r: r[0]):
            i = members[0]
            facts = {k: stage_roles[k][i] for k in stages}
            mem = MemoryBreakdown()
            rows: dict[tuple[str, str], CommRow] = {}
            flops = hbm = seconds_c = seconds_m = 0.0
            kernels, overlapped, syncs = 0, False, 0
            for k, f in facts.items():
                trained = f.preds[-1].memory
                mem.parameters += trained.parameters
                mem.optimizer += trained.optimizer
                for p in f.preds:
                    for r in p.comm:
                        row = rows.setdefault((r.axes, r.kind), CommRow(r.axes, r.kind, bound=r.bound))
                        row.count += m * r.count
                        row.bytes += m * r.bytes
                        row.seconds += m * r.seconds
                    flops += m * p.flops
                    hbm += m * p.hbm_bytes
                    kernels += m * p.kernels
                    syncs += m * p.sync_points
                    seconds_c += m * p.compute_seconds
                    seconds_m += m * p.comm_seconds
                    overlapped = overlapped or p.overlapped
                tr = f.traffic
                syncs += m * tr.get("waits", 0)
                for kind, count, nbytes, secs in (("recv", tr["msgs"], tr["recv"], recv_seconds(f) / m),
                                                  ("send", tr["sends"], tr["sent_forward"] + tr["sent_backward"], 0.0)):
                    if count:   # (a send's time is its receiver's)
                        row = rows.setdefault(("pp", kind), CommRow("pp", kind))
                        row.count += m * count
                        row.bytes += m * nbytes
                        row.seconds += m * secs
                        seconds_m += m * secs
                for ranks, by_index in tied.get(k, []):   # a tied weight's gradient summed over its stages
                    if ranks < 2:
                        continue
                    nbytes = by_index[i]
                    row = rows.setdefault(("pp", "all_reduce"), CommRow("pp", "all_reduce"))
                    row.count += 1
                    row.bytes += nbytes
                    row.seconds += all_reduce_seconds(nbytes, ranks, device)
                    syncs += 1   # (it waits for the other stages' last backward)
            pending: dict[str, tuple[int, int]] = {}   # every stage's gradients reduced once: one bucket per axis
            for f in facts.values():
                for axis, (nbytes, count) in f.pending.items():
                    had = pending.get(axis, (0, 0))
                    pending[axis] = (had[0] + nbytes, had[1] + count)
            for axis, (nbytes, count) in sorted(pending.items(), key=lambda kv: mesh.axis_names.index(kv[0])):
                before = sum(r.seconds for r in rows.values())
                _add_call(rows, "comm.all_reduce_bucket", (axis,), nbytes, mesh, device, members=count)
                seconds_m += sum(r.seconds for r in rows.values()) - before
                syncs += 1   # (after the last backward, from the stage's own work)
            loss = rows.setdefault(("pp", "broadcast"), CommRow("pp", "broadcast"))   # the step's loss, to every rank
            loss.count, loss.bytes = 1, 4
            loss.seconds = device.latency_us * 1e-6
            seconds_m += sum(r.seconds for key, r in rows.items() if key in (("pp", "all_reduce"), ("pp", "broadcast")))
            grads, acts, bufs, where = _schedule_peak(facts, actions(g), n - 1, lambda k: f"stage {k}")
            total_grads = sum(f.grads for f in facts.values())
            update = sum(f.update for f in facts.values())
            if total_grads + update > grads + acts + bufs:   # the optimizer's update, after the last round
                mem.gradients, mem.optimizer_step, mem.peak_op = total_grads, update, "the optimizer's update"
            else:
                mem.gradients, mem.activations, mem.comm_buffers, mem.peak_op = grads, acts, bufs, where
            pred = Prediction(mem, sorted(rows.values(), key=lambda r: (r.axes, r.kind)), flops, hbm, kernels,
                              seconds_c, seconds_m, overlapped, overlap=device.overlap,
                              update_seconds=sum(f.preds[-1].update_seconds for f in facts.values()),
                              sync_points=syncs)
            spec = plan.stages[stages[0]]
            label = f"stage{stages[0]}" if len(stages) == 1 else "stages " + ",".join(map(str, stages))
            ops = sum(f.ops for f in facts.values())
            out_roles.append(Role(label, [spec.ranks[r] for r in members], spec.ranks[i], mesh, pred, ops))
    # every rank's step lasts the busiest one's, plus the fill and drain
    step = pipeline_step(max(r.prediction.step_seconds for r in out_roles), slowest, groups, device)
    for role in out_roles:
        role.prediction.bubble_seconds = step - role.prediction.step_seconds
        role.prediction.stage_seconds = slowest
    timings["assemble"] = time.perf_counter() - t
    world = sum(len(s.ranks) for s in plan.stages[:groups])
    return DryRun(out_roles, world, "train", timings)
