"""``spmdc.compile``: a model compiled for a mesh, called like the model inside a torch.distributed job.

    # every rank (torchrun, one process per rank), after dist.init_process_group(...)
    cm = spmdc.compile(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp",
                       train=True, loss_fn=F.mse_loss, loss_inputs=(y,),
                       optimizer=("adamw", {"lr": 1e-3}))
    out = cm(x)                 # DTensor laid out as the program's output (cm(x, full=True): a tensor)
    loss = my_loss(out.full_tensor(), y); loss.backward()   # autograd through cm(x) (spmdc.api.autograd_call)
    loss = cm.step(x, y)        # forward + backward + optimizer update; 0-d tensor

Compilation (capture + plan + global sharding passes) runs once per program (forward on
rank 0, training step on rank 1) and is broadcast, so every rank partitions the very same
global program (:mod:`spmdc.api.compile_shared`). See
:mod:`spmdc.api.compiled_module` for the object and :mod:`spmdc.runtime.optimizers`
for the optimizer specs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spmdc.api.compiled_module import CompiledModule
from spmdc.compiler import Dump
from spmdc.compiler.options import CompileOptions
from spmdc.runtime.dtensors import dtensor_placements
from spmdc.runtime.launcher import preload_in_ranks
from spmdc.runtime.optimizers import OPTIMIZERS, Optimizer, make_optimizer
from spmdc.sharding.plan import Plan

__all__ = ["OPTIMIZERS", "CompiledModule", "Optimizer", "compile", "dtensor_placements", "eager", "make_optimizer",
           "sampler_args"]


def compile(model: Any, example_inputs: Any, *, mesh: Any = None, plan: str | Plan = "fsdp", train: bool = False,
            loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (), optimizer: Any = None,
            device_mesh: Any = None, device: str | None = None, dump: Dump | None = None,
            example_kwargs: dict[str, Any] | None = None, init: Callable[[Any], Any] | None = None,
            options: CompileOptions | None = None, **option_kw: Any) -> Any:
    """Compile ``model`` for ``mesh`` under ``plan``; call on every rank of an initialized job.

    How to compile is one :class:`~spmdc.compiler.options.CompileOptions` (``options=``), with any
    keyword options replaced (``clip_grad_norm=1.0``): every option below is a field there, checked
    once, whatever the layout kind — one mesh, device groups, pipeline stages.

    ``example_inputs``: the model's positional inputs (or ``((inputs...), (loss inputs...))``);
    ``loss_fn(output, *loss_inputs)`` gives the loss for ``train=True``; ``optimizer`` see the
    module doc. ``device_mesh`` reuses an existing DeviceMesh (axis names must match ``mesh``).
    ``target``: ``"torch"`` (aten calls) or ``"triton"`` (fused regions as Triton kernels; on
    CPU under the Triton interpreter); default Triton on GPUs, aten on CPUs. ``bucket`` (default on): one
    all-gather / reduce-scatter / gradient all-reduce per model block instead of one per
    parameter (SimpleFSDP; ``bucket=False`` for per-parameter collectives). ``overlap`` (default
    on): collectives are issued asynchronously and reordered so that communication runs while
    the previous block computes (``schedule-collectives``), prefetching only while the program's
    estimated peak memory stays under ``memory_cap`` bytes per rank (0: no cap).
    ``mixed_precision``: ``"bf16"`` / ``"fp16"`` (or FSDP2's ``MixedPrecisionPolicy``): each
    parameter's shard is cast before it is gathered and the model computes in that dtype;
    gradients are reduced and parameters and optimizer state kept in float32.
    ``dump``: write the IR after every pass and the generated code (:class:`spmdc.compiler.Dump`).
    ``example_kwargs``: keyword model inputs (``{"labels": y}`` for a HuggingFace model that computes
    its loss); pass the same keywords to ``cm(...)`` / ``cm.step(...)``. ``rng``: ``"eager"`` —
    dropout masks and every random op draw exactly what single-device PyTorch draws from its
    default generator (each rank draws whole tensors and keeps its piece) — or ``"philox"``
    (counter-based: each rank draws only its piece; the same numbers on any mesh and plan,
    not eager's). Seed with ``torch.manual_seed`` on every rank, as for one device.
    ``checkpoint``: ``"blocks"`` recomputes every repeated block (``layers.N``) in the backward;
    ``torch.utils.checkpoint`` calls in the model are kept either way.
    ``mesh`` may be a ``torch.distributed.DeviceMesh`` with named dims (it is then the device mesh).
    ``plan`` may be a :class:`~spmdc.sharding.device_groups.HeteroPlan` (device groups, each with its own
    mesh and plan, the batch split across them; ``mesh`` is then None): heterogeneous data
    parallelism, see docs/runtime.md. A ``mesh`` with a ``pp`` axis (``"pp=2,dp=2,tp=2"``) and a
    one-mesh ``plan`` is a pipeline: stage ``k`` the ranks whose ``pp`` coordinate is ``k``, each running
    ``plan`` on the other axes, the repeated blocks cut evenly, 1F1B over as many micro-batches as
    stages (another schedule: ``plan=PipelinePlan.from_mesh(mesh, plan, schedule=..., microbatches=...)``).
    ``clip_grad_norm``: each step clips the gradients to that global norm (inside the program: one
    all-reduce of a scalar); ``cm.last_grad_norm`` is the norm before clipping. ``grad_accum=N``:
    each step splits its batch into N micro-batches along dim 0 and reduces the gradients once.
    ``inputs="local"``: each rank passes its own piece of the batch (a DistributedSampler's with
    ``num_replicas, rank = spmdc.sampler_args(cm)``), laid out as the plan's inputs (even pieces);
    the default, ``inputs="global"``, passes the whole batch on every rank. ``check_inputs`` (default
    on): the first call of every program (and after a shape change) checks, by one checksum
    all-gather, that the ranks that must pass the same tensor do — all ranks for global inputs,
    the ranks holding the same piece for local ones — and refuses on every rank otherwise
    (:mod:`spmdc.runtime.input_check`); later calls cost nothing.
    A model on the meta device (``spmdc.deferred_init(cls, *args)``, or any meta model with
    ``init=fn`` run on it, e.g. ``init=lambda m: m.apply(m._init_weights)``) is captured from fake
    tensors and each rank materializes only its shards, bitwise equal to the single-device
    initialization (:mod:`spmdc.frontend.deferred_init`). ``fuse_collectives`` (default on):
    per-rank rewrites that defer and merge reductions (``fuse-collectives``).
    """
    from spmdc.sharding.pipeline_plan import PipelinePlan

    options = CompileOptions.of(options, "spmdc.compile", **option_kw)
    chosen = None
    if isinstance(plan, str) and plan == "auto":   # the layout search, its choice the same on every rank
        from spmdc.api.auto_choice import choose_on_ranks

        chosen = choose_on_ranks(model, example_inputs, mesh=mesh, train=train, loss_fn=loss_fn,
                                 loss_inputs=loss_inputs, optimizer=optimizer, example_kwargs=example_kwargs,
                                 options=options)
        (mesh, plan), device_mesh = chosen.plan(), None
    mesh, plan = _pp_stages(mesh, plan)
    common = dict(train=train, loss_fn=loss_fn, loss_inputs=loss_inputs, optimizer=optimizer, device=device,
                  dump=dump, example_kwargs=example_kwargs, options=options)
    if isinstance(plan, PipelinePlan):   # stages over device groups (spmdc.api.pipeline_executor)
        cm = _pipeline(model, example_inputs, plan, mesh=mesh, device_mesh=device_mesh, init=init, **common)
    else:
        for what, given in (("pp_schedule", options.pp_schedule), ("microbatches", options.microbatches)):
            if given is not None:
                raise ValueError(f"spmdc.compile: {what}={given!r} is for a pipeline plan (stages, or a mesh with a "
                                 f"'pp' axis); plan {getattr(plan, 'name', plan)!r} has none (grad_accum= splits the "
                                 "batch)")
        cm = CompiledModule(model, example_inputs, mesh=mesh, plan=plan, device_mesh=device_mesh, init=init, **common)
    cm.auto_plan = chosen   # plan="auto": the chosen candidate (its label(), plan_file()); else None
    return cm


def _pp_stages(mesh: Any, plan: Any) -> tuple[Any, Any]:
    """A mesh with a ``pp`` axis (size 2 or more) and a one-mesh preset: ``(None, the pipeline plan)``,
    stage ``k`` the ranks whose ``pp`` coordinate is ``k``
    (:meth:`~spmdc.sharding.pipeline_plan.PipelinePlan.from_mesh`); anything else as given. A
    DeviceMesh must number its ranks row-major from 0 (``init_device_mesh``'s), as the stages do."""
    from spmdc.sharding.mesh import _is_device_mesh
    from spmdc.sharding.pipeline_plan import split_pp_axis

    new_mesh, new_plan = split_pp_axis(mesh, plan)
    if new_mesh is None and mesh is not None and _is_device_mesh(mesh):
        ranks = mesh.mesh.flatten().tolist()
        if ranks != list(range(len(ranks))):
            raise ValueError(f"a DeviceMesh with a 'pp' axis must hold ranks 0..{len(ranks) - 1} row-major "
                             f"(as init_device_mesh does), got {ranks}: the pipeline stages number ranks so")
    return new_mesh, new_plan


def _pipeline(model: Any, example_inputs: Any, plan: Any, *, mesh: Any, train: bool, device_mesh: Any, init: Any,
              **kw: Any) -> Any:
    """The compiled module of a pipeline plan (its executor: :mod:`spmdc.api.pipeline_executor`); what
    pipelines do not support is refused by name (here the layout's; the options' in the executor)."""
    from spmdc.api.compiled_module import _init_tape
    from spmdc.frontend.deferred_init import TAPE_ATTR

    for what, bad in (("mesh= (each stage has its own mesh in the plan; pass mesh=None)", mesh is not None),
                      ("device_mesh=", device_mesh is not None), ("train=False (a pipeline trains)", not train)):
        if bad:
            raise ValueError(f"pipeline plan '{plan.name}': {what} is not supported with a pipeline plan yet")
    tape = _init_tape(model, init)   # a meta model: how each stage materializes its tensors
    if init is not None:   # (recorded now, kept on the model as spmdc.deferred_init keeps its constructor's)
        object.__setattr__(model, TAPE_ATTR, tape)
    return CompiledModule(model, example_inputs, mesh=None, plan=plan, train=True, **kw)


def sampler_args(cm: Any = None, *, mesh: Any = None, plan: Any = "fsdp", rank: int | None = None,
                 ndim: int = 2) -> tuple[int, int]:
    """``(num_replicas, rank)`` for this rank's ``torch.utils.data.DistributedSampler`` when the
    module takes local batches (``inputs="local"``): the data-parallel size and this rank's
    data-parallel coordinate — the number of pieces the plan cuts the batch dim into and this
    rank's piece (on ``dp=2,tp=2`` under fsdp+tp: ``(2, dp coordinate)``; both tp ranks of a pair,
    and the ranks of one replica on every pipeline stage, get the same).

    Either of the module ``spmdc.compile`` returned (``sampler_args(cm)``), or before compiling,
    of the layout it will be compiled with (a DataLoader is usually built first)::

        num_replicas, rank = spmdc.sampler_args(mesh="dp=2,tp=2", plan="fsdp+tp")
        sampler = DistributedSampler(dataset, num_replicas=num_replicas, rank=rank)

    ``mesh``/``plan`` as :func:`compile` takes them (a mesh with a ``pp`` axis, a PipelinePlan, a
    HeteroPlan with ``mesh=None``); ``rank``: the job rank (default this process's); ``ndim``: the
    first input's number of dims (``sp`` splits a 3-D input's dim 1, not its batch)."""
    if cm is not None:
        if not isinstance(cm, CompiledModule):
            raise TypeError(f"spmdc.sampler_args takes the module spmdc.compile returned, got {type(cm).__name__}")
        return cm.sampler_args()
    import torch.distributed as dist

    from spmdc.runtime.dtensors import mesh_of
    from spmdc.runtime.input_check import LocalBatches, _coords, batch_axes
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.pipeline_plan import PipelinePlan

    if rank is None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    mesh, plan = _pp_stages(mesh, plan)
    if isinstance(plan, PipelinePlan):
        return LocalBatches.for_stages(plan.stages, ndim=ndim, where="spmdc.sampler_args").sampler_args(rank)
    if isinstance(plan, HeteroPlan):
        return LocalBatches.for_groups(plan.groups, ndim=ndim, where="spmdc.sampler_args").sampler_args(rank)
    if mesh is None:
        raise ValueError("spmdc.sampler_args needs the module (sampler_args(cm)) or mesh= (and plan=) it is "
                         "compiled with")
    m, _ = mesh_of(mesh, None)
    if not 0 <= rank < m.size:
        raise ValueError(f"spmdc.sampler_args: rank {rank} is not on mesh {m} ({m.size} ranks)")
    axes = dict(zip(m.axis_names, m.shape))
    coords = _coords(axes, rank)
    n, r = 1, 0
    for ax in batch_axes(plan, m, ndim):
        n, r = n * axes[ax], r * axes[ax] + coords[ax]
    return n, r


def eager(model: Any, example_inputs: Any, *, mesh: Any, plan: str | Plan = "fsdp", hints: bool = True,
          trace: bool = False, **kwargs: Any) -> CompiledModule:
    """:func:`compile`'s module, run op by op (:mod:`spmdc.api.eager`): each op of the global
    program is dispatched at run time — its operands' layouts as they are, its strategy from the
    rule table, redistributions issued on the spot, the op run on local pieces. For stepping
    through a plan: ``trace=True`` records, per op, the layouts in and out and the collectives it
    issued (``cm.eager_trace``, the last call's). ``hints`` (default on): results take the layouts
    sharding propagation chose, so the run issues the compiled program's collectives in its order
    and computes bitwise what it computes without per-rank collective rewrites
    (``compile(..., bucket=False, overlap=False, fuse_collectives=False)``); ``hints=False``:
    DTensor's forward rule, each op deciding from its operands alone. Takes :func:`compile`'s
    keyword arguments (``bucket``, ``overlap``, ``target`` do not apply)."""
    for k in ("bucket", "overlap", "target", "memory_cap", "fuse_collectives"):
        if k in kwargs:
            raise TypeError(f"spmdc.eager runs the global program op by op: '{k}' is an option of the compiled "
                            "program (spmdc.compile)")
    names = CompileOptions.names()
    base = CompileOptions.of(kwargs.pop("options", None), "spmdc.eager",
                             **{k: kwargs.pop(k) for k in list(kwargs) if k in names})
    options = base.replace(execution="eager", eager_hints=hints, eager_trace=trace, bucket=False, overlap=False,
                           fuse_collectives=False)
    return compile(model, example_inputs, mesh=mesh, plan=plan, options=options, **kwargs)


preload_in_ranks(__name__)   # (ranks running a compiled module start with this imported: spmdc.runtime.launcher)
