"""The module :func:`spmdc.compile` returns: an ``nn.Module`` whose parameters are DTensors.

    cm = spmdc.compile(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp",
                       train=True, loss_fn=F.mse_loss, loss_inputs=(y,), optimizer=("adamw", {"lr": 1e-3}))
    out = cm(x)                 # DTensor laid out as the program's output (cm(x, full=True): a tensor)
    loss = my_loss(out.full_tensor(), y); loss.backward()   # autograd through cm(x) (spmdc.api.autograd_call)
    loss = cm.step(x, y)        # forward + backward (+ clipping) + optimizer update; 0-d tensor

    loss = cm.backward(x, y)    # or: gradients into p.grad (DTensors, accumulating), then any optimizer
    torch.nn.utils.clip_grad_norm_(cm.parameters(), 1.0)
    opt.step(); opt.zero_grad()

Like FSDP2, the compiled module holds each parameter as an ``nn.Parameter`` wrapping a DTensor
in its storage layout, under the model's own names (``named_parameters()``, ``state_dict()``
give DTensors; tied weights appear under every name). So ``torch.optim`` optimizers, LR
schedulers, ``clip_grad_norm_`` and ``torch.distributed.checkpoint`` (``get_state_dict(cm, opt)``)
work on it unchanged, and an optimizer that is not elementwise (Adafactor, Muon) computes on the
global tensors DTensor presents, never silently on shards.

Programs are compiled per (forward | training step, every module's mode, input shapes): a new batch
size, ``cm.eval()`` or ``model.encoder.eval()`` compiles (collectively, on every rank) instead of failing
or running a stale program. The modes are the user's model's own flags, each submodule's kept as it is
(a frozen submodule in eval inside a model in training): ``cm.train(mode)`` / ``cm.eval()`` is
``model.train(mode)`` / ``model.eval()``, and ``cm.training`` / ``cm.<path>.training`` read the model's
flags. Each rank cuts its
shard of every parameter out of its own copy of ``model`` (ranks build the model with the same
initialization; see :mod:`spmdc.frontend.deferred_init` for models too big for one device).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from spmdc.api.mesh_executor import MeshExecutor
from spmdc.api.parameter_store import ParameterStore
from spmdc.api.parameter_store import is_dtensor as _is_dtensor
from spmdc.api.parameter_store import ragged as _ragged
from spmdc.api.program_cache import ProgramCache
from spmdc.api.subgroups import subgroup
from spmdc.compiler import Dump, RankProgram, split_example_inputs
from spmdc.compiler.options import CompileOptions
from spmdc.dialects.shard import Partial, RaggedShard, Replicate
from spmdc.runtime.dtensors import contiguous_stride, dtensor_parameter, mesh_of
from spmdc.runtime.executor import local_piece
from spmdc.runtime.gradients import clip_grads_
from spmdc.runtime.optimizers import is_elementwise, is_per_tensor, make_optimizer, optimizer_class
from spmdc.sharding.plan import Plan


class _Options:
    """What the programs are compiled with (kept off the nn.Module attribute machinery)."""

    def __init__(self, **kw: Any):
        self.__dict__.update(kw)


class CompiledModule(nn.Module):
    """The result of :func:`spmdc.compile` (see the module doc)."""

    def __init__(self, model: Any, example_inputs: Any, *, mesh: Any, plan: str | Plan = "fsdp",
                 train: bool = False, loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                 optimizer: Any = None, device_mesh: Any = None, device: str | None = None,
                 dump: Dump | None = None, example_kwargs: dict[str, Any] | None = None,
                 init: Callable[[Any], Any] | None = None, group: Any = None,
                 options: CompileOptions | None = None, **option_kw: Any):
        options = CompileOptions.of(options, "spmdc.compile", **option_kw)   # (every option checked there)
        if options.target == "triton":  # on CPU, interpret kernels (best before anything imports triton)
            from spmdc.codegen.cache import prepare_triton

            prepare_triton()
        import torch.distributed as dist

        super().__init__()
        self._init_args = {**_arguments(CompiledModule.__init__, locals()), "options": options}
        self._init_args.pop("option_kw", None)   # (what compile_args() gives back)
        object.__setattr__(self, "options", options)   # how its programs are compiled and run (frozen)
        from spmdc.sharding.pipeline_plan import PipelinePlan

        if not (dist.is_available() and dist.is_initialized()):
            what = "a pipeline" if isinstance(plan, PipelinePlan) else "spmdc.compile"
            raise RuntimeError(f"{what} needs an initialized torch.distributed job "
                               "(torchrun + dist.init_process_group)")

        object.__setattr__(self, "_pipeline", None)   # the pipeline executor (a pipeline plan), not a submodule
        if isinstance(plan, PipelinePlan):
            self._pipeline_setup(model, example_inputs, plan, loss_fn=loss_fn, loss_inputs=loss_inputs,
                                 optimizer=optimizer, example_kwargs=example_kwargs, device=device, dump=dump)
            return

        self._mesh_setup(plan, mesh, device_mesh, device, group)   # where: mesh, ranks, devices, collectives
        self._store = ParameterStore(self.mesh, self.rank, self.device_mesh, self.comm, self.device,
                                     group_axis=self._hetero is not None)   # every parameter's layout and shape
        self._input_check = self._make_input_check(options.inputs, options.check_inputs, options.execution)
        object.__setattr__(self, "_model", model)   # compiles new programs from it; not a submodule
        self._tape = _init_tape(model, init)       # a meta model: how to initialize it
        model_args, loss_args = split_example_inputs(example_inputs, loss_fn, loss_inputs)
        kwargs = dict(example_kwargs or {})
        if self._hetero is not None and options.inputs == "local":   # the groups' replicas' pieces, assembled
            model_args, loss_args, kwargs = self._local_examples(model_args, loss_args, kwargs)
        self._example = (tuple(model_args), tuple(loss_args), kwargs)   # what switch() compiles again from
        self._optimizer_spec = optimizer
        self._kw_names = list(kwargs)   # keyword inputs: the programs' last inputs, in this order
        self._opts = _Options(plan=plan, loss_fn=loss_fn, n_loss=len(loss_args), dump=dump, can_train=train)
        self.target = options.resolved_target()
        self._executor = MeshExecutor(self)   # runs this layout kind's programs (one mesh, device groups)
        group = None if self._hetero is not None else self.group   # (device groups compile job-wide)
        self._programs = ProgramCache(model, options, loss_fn, len(loss_args), self._kw_names, dump,
                                      self._executor._build_programs, modes_group=group)
        example = list(model_args) + list(loss_args) + list(kwargs.values())
        if train and options.grad_accum > 1 and self._tape is None:   # micro-batches must not change the loss
            from spmdc.api.micro_batches import check_micro_batch_mean

            check_micro_batch_mean(model, loss_fn, len(model_args), self._kw_names, example,
                                   self._executor._micro(example), first=self.members[0], group=self.group,
                                   eval_mode=True)
        if train:
            self._programs.get("train", example if options.grad_accum == 1 else self._executor._micro(example)[0],
                               forward_too=list(model_args) + list(kwargs.values()))
        else:
            self._programs.get("forward", list(model_args) + list(kwargs.values()))
        storage = self._programs.first()
        self.plan_name = storage.program.step.plan_name
        self._store.storage = self._storage_layouts(storage.program)
        self.optimizer_class = optimizer_class(optimizer) if train else None
        self.whole_parameters = self.optimizer_class is not None and not self._runs_locally(self.optimizer_class)
        if self.whole_parameters:   # the optimizer needs whole tensors: store every parameter whole
            self._store.storage = {k: tuple(Replicate() for _ in self.mesh.axis_names) for k in self._store.storage}
        self._install_parameters(model, storage.program)
        self.optimizer = make_optimizer(optimizer, list(self.parameters())) if train else None
        if self._tape is None:
            self.init_peak_bytes = None

    def _mesh_setup(self, plan: Any, mesh: Any, device_mesh: Any, device: str | None, group: Any) -> None:
        """One mesh or device groups: this rank's mesh and place in it (``mesh``, ``members``,
        ``rank``), its process group, DeviceMesh, device and collectives (a device group's: its
        virtual ``grp × axes`` mesh and the cross-group communicator)."""
        import torch.distributed as dist

        from spmdc.sharding.device_groups import HeteroPlan

        self._hetero = plan if isinstance(plan, HeteroPlan) else None
        world = dist.get_world_size()
        if self._hetero is not None:   # device groups, each its own mesh and plan (spmdc.runtime.group_comm)
            mesh, device_mesh, device = self._hetero_setup(self._hetero, mesh, device_mesh, device, self.options)
        own = getattr(plan, "mesh", None) if isinstance(plan, Plan) else None   # a plan file's 'mesh' key
        if mesh is None and device_mesh is None and own is not None:
            mesh = own
        if mesh is None and device_mesh is None:
            raise ValueError("spmdc.compile needs mesh= (a Mesh, 'dp=2,tp=2', {'dp': 2} or a named DeviceMesh), "
                             "unless the plan is a HeteroPlan with device groups or names its mesh")
        mesh, device_mesh = mesh_of(mesh, device_mesh)
        if own is not None and str(mesh) != own:
            raise ValueError(f"plan '{plan.name}' is for mesh {own} (its 'mesh' key), not {mesh}")
        # a DeviceMesh over some of the job's ranks is a device group: this module runs there
        members = device_mesh.mesh.flatten().tolist() if device_mesh is not None else list(range(world))
        # (a heterogeneous plan's virtual mesh is grp x the group's axes: its ranks run it at grp = g)
        if self._hetero is None and len(members) != mesh.size:
            raise ValueError(f"mesh {mesh} has {mesh.size} devices but "
                             + (f"the device mesh spans {len(members)} ranks" if device_mesh is not None
                                else f"the job has {world} ranks (pass device_mesh= over a group of them)"))
        if dist.get_rank() not in members:
            raise ValueError(f"rank {dist.get_rank()} is not in the device mesh (ranks {members}): compile on "
                             "the ranks of its group only")
        self.members = members
        # (``group``: a process group over ``members`` the caller made, e.g. spmdc.api.switch)
        if members == list(range(world)):
            self.group = None
        elif group is not None:
            self.group = group
        elif self._hetero is not None:   # every rank makes every group's, in the same order (torch's local-
            # synchronization groups are named by their ranks: a second module over the same ranks would
            # rendezvous under the first one's name)
            every = [dist.new_group(list(g.ranks)) for g in self._hetero.groups]
            self.group = every[self._hetero.group_of(dist.get_rank())]
        else:   # made by the members alone, once per set of ranks (see above: named by its ranks)
            self.group = subgroup(members)
        if device is None:
            device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        self.mesh, self.rank = mesh, members.index(dist.get_rank())   # this rank's place in the mesh
        if device_mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            device_mesh = init_device_mesh(device, mesh.shape, mesh_dim_names=mesh.axis_names)
        self.device_mesh = device_mesh
        self.device = torch.device(device, torch.cuda.current_device()) if device == "cuda" else torch.device(device)
        from spmdc.runtime.collectives import Collectives

        self.comm = Collectives(device_mesh)
        if self._hetero is not None:
            from spmdc.runtime.group_comm import HeteroComm

            g = self._hetero.group_of(dist.get_rank())
            self.rank = self._hetero.virtual_rank(g, dist.get_rank())
            self.comm = HeteroComm(device_mesh, g, len(self._hetero.groups), dist.get_rank())

    def _pipeline_setup(self, model: Any, example_inputs: Any, plan: Any, *, loss_fn: Callable | None,
                        loss_inputs: Sequence[Any], optimizer: Any, example_kwargs: dict[str, Any] | None,
                        device: str | None, dump: Dump | None) -> None:
        """A pipeline plan: the executor (:mod:`spmdc.api.pipeline_executor`) cuts the model into
        stages, compiles this rank's and builds the schedule; this module holds the stage's
        parameters under the model's names (every name of a tied one), on the stage's mesh, and
        the optimizer over them — the same parameter store and state interface as one mesh."""
        from spmdc.api.pipeline_executor import PipelineExecutor

        ex = PipelineExecutor(model, example_inputs, plan=plan, options=self.options, loss_fn=loss_fn,
                              loss_inputs=loss_inputs, example_kwargs=example_kwargs, device=device, dump=dump)
        object.__setattr__(self, "_pipeline", ex)
        self._executor = ex   # runs the schedule
        object.__setattr__(self, "_model", model)
        self._hetero, self._tape, self._programs = None, None, None
        self.mesh, self.device_mesh, self.device = plan.stages[ex.stage].mesh, ex.device_mesh, ex.device
        self.members, self.rank, self.comm, self.group = ex.members, ex.index, ex.comm, None
        self.target, self.plan_name, self._kw_names = ex.target, plan.name, list(ex._kw_names)
        self._opts = _Options(plan=plan, loss_fn=loss_fn, n_loss=ex._n_loss, dump=dump, can_train=True)
        held = {a: p for local, p in ex.params.items() for a in ex._aliases(local)}
        for name, _ in model.named_parameters(remove_duplicate=False):   # in the model's order
            if name in held:
                self._place(name, held[name], kind="param")
        self._store = ParameterStore(self.mesh, ex.index, ex.device_mesh, ex.comm, ex.device)
        for local, p in ex.params.items():
            fqn = _canonical(self, ex._aliases(local)[0])
            self._store.storage[fqn], self._store.shapes[fqn] = tuple(ex._storage[local]), tuple(p.shape)
        self.optimizer_class = optimizer_class(optimizer) if optimizer is not None else None
        self.whole_parameters = False
        if optimizer is not None and not self._runs_locally(self.optimizer_class):
            raise ValueError(f"pipeline plan '{plan.name}': {self.optimizer_class.__name__} is not an elementwise "
                             "optimizer and stage "f"{ex.stage} stores its parameters sharded; a pipeline does not "
                             "store them whole for it yet (use an elementwise optimizer, or one rank per stage)")
        self.optimizer = make_optimizer(optimizer, list(self.parameters()))
        self.init_peak_bytes = None

    @property
    def store(self) -> ParameterStore:
        """This rank's parameter store: each parameter's storage layout and global shape, and the
        moves between layouts (:mod:`spmdc.api.parameter_store`)."""
        return self._store

    @property
    def pipeline(self) -> Any:
        """The pipeline executor of a module compiled for a pipeline plan (its stage, split,
        schedule, programs: :class:`spmdc.api.pipeline_executor.PipelineExecutor`); None otherwise."""
        return self.__dict__.get("_pipeline")

    @property
    def kind(self) -> str:
        """The layout kind: ``"mesh"`` (one mesh), ``"groups"`` (device groups), ``"pipeline"``."""
        return "pipeline" if self.pipeline is not None else "groups" if self._hetero is not None else "mesh"

    @property
    def schedule_ir(self) -> str:
        """A pipeline plan: this rank's schedule (``pipe`` dialect) as it runs."""
        return self._need_pipeline("schedule_ir").schedule_ir

    def timeline(self, width: int = 6) -> str:
        """A pipeline plan: every rank's schedule as a time grid (where the bubbles are)."""
        return self._need_pipeline("timeline()").timeline(width)

    def set_schedule(self, schedule: str) -> None:
        """A pipeline plan: run the same stage programs under another schedule (every rank calls it)."""
        self._need_pipeline("set_schedule()").set_schedule(schedule)

    def _need_pipeline(self, what: str) -> Any:
        if self.pipeline is None:
            raise AttributeError(f"{what} is a pipeline plan's; this module's plan '{self.plan_name}' has no stages")
        return self.pipeline

    def _hetero_setup(self, hplan: Any, mesh: Any, device_mesh: Any, device: str | None,
                      options: CompileOptions) -> tuple[Any, Any, str]:
        """A heterogeneous plan: this rank's group's virtual mesh and DeviceMesh (every group's is
        built on every rank); what it does not support yet is refused by name."""
        import torch.distributed as dist

        from spmdc.runtime.group_comm import group_meshes

        if mesh is not None or device_mesh is not None:
            raise ValueError(f"plan '{hplan.name}' has device groups with their own meshes; pass mesh=None")
        if dist.get_world_size() != hplan.world:
            raise ValueError(f"plan '{hplan.name}' has {hplan.world} ranks in its groups but the job has "
                             f"{dist.get_world_size()}")
        if options.execution == "eager":
            raise ValueError("execution='eager' is not supported with a heterogeneous plan (device groups) yet")
        device = device or ("cuda" if dist.get_backend() == "nccl" else "cpu")
        meshes = group_meshes(hplan, device)
        g = hplan.group_of(dist.get_rank())
        return hplan.virtual_mesh(g), meshes[g], device

    def _local_examples(self, model_args: Any, loss_args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, dict]:
        """Device groups with ``inputs="local"``: the replicas (every group's data-parallel
        coordinates, group 0's first: :class:`~spmdc.runtime.input_check.LocalBatches`) and the
        global example batch assembled from this rank's pieces (every rank calls it)."""
        from spmdc.runtime.input_check import LocalBatches

        every = list(model_args) + list(loss_args) + list(kwargs.values())
        local = LocalBatches.for_groups(self._hetero.groups, ndim=every[0].dim() if every else 1,
                                        where=f"plan '{self._hetero.name}'", check=self.options.check_inputs)
        object.__setattr__(self, "_local_batches", local)
        names = [f"example input #{i}" for i in range(len(every))]
        full = [g.to(v.device) for g, v in zip(local.assemble(every, names, self.device, step=False), every)]
        n, m = len(model_args), len(loss_args)
        return full[:n], full[n:n + m], dict(zip(kwargs, full[n + m:]))

    def _make_input_check(self, inputs: str, enabled: bool, execution: str) -> Any:
        """The inputs' consistency check (:mod:`spmdc.runtime.input_check`): over the module's
        ranks on its mesh, or for device groups over every rank of the job (global batches)."""
        import torch.distributed as dist

        from spmdc.runtime.input_check import InputCheck

        where = "spmdc.eager" if execution == "eager" else "spmdc.compile"
        if self._hetero is not None:
            return InputCheck.for_groups(self._hetero.groups, "grp", rank=dist.get_rank(), device=self.device,
                                         enabled=enabled, where=where, hint=f"plan '{self._hetero.name}' has device "
                                         "groups: every rank of the job passes the same global batch (each group "
                                         "takes its share of it)")
        return InputCheck.for_mesh(dict(zip(self.mesh.axis_names, self.mesh.shape)), self.members, mode=inputs,
                                   me=self.rank, group=self.group, device=self.device, enabled=enabled, where=where)

    def _runs_locally(self, cls: type | None) -> bool:
        """Whether optimizer class ``cls`` updates the stored pieces exactly as one device would:
        elementwise ones always, per-tensor ones (Muon) when every rank holds each parameter whole
        or not at all (``fsdp_shard="whole"``)."""
        if is_elementwise(cls):
            return True
        return is_per_tensor(cls) and all(_whole_or_nothing(lay) for lay in self._store.storage.values())

    # -- modes: the user's model's own flags ------------------------------------------------------------
    @property
    def training(self) -> bool:   # type: ignore[override]
        """The user's model's ``training`` flag (its submodules keep their own)."""
        model = self.__dict__.get("_model")
        return True if model is None else model.training

    @training.setter
    def training(self, mode: bool) -> None:
        model = self.__dict__.get("_model")
        if model is not None:   # (nn.Module.__init__ sets it before the model is known: nothing to set)
            model.training = mode

    def train(self, mode: bool = True) -> CompiledModule:
        """``model.train(mode)`` on the user's model, as ``nn.Module.train`` does: every module's flag
        set to ``mode``; the next call runs the program compiled for the flags then (``cm.eval()`` too)."""
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        self._model.train(mode)
        return self

    def _storage_layouts(self, prog: RankProgram) -> dict[str, tuple[Any, ...]]:
        out = {}
        for i, kind in enumerate(prog.step.arg_kinds):
            if kind.startswith("param:") and i not in prog.step.buffers:
                layout = prog.arg_layouts[i]
                if any(isinstance(p, Partial) for p in layout):
                    raise ValueError(f"parameter '{kind[6:]}' is stored Partial {layout}; parameters must be S or R")
                out[kind[6:]] = layout
        return out

    # -- parameters and buffers, under the model's names ---------------------------------------------
    def _install_parameters(self, model: Any, prog: RankProgram) -> None:
        from torch.distributed.tensor import DTensor

        canonical = dict(model.named_parameters())
        replicated = tuple(Replicate() for _ in self.mesh.axis_names)
        values = self._materialize(model, canonical, replicated) if self._tape is not None else None
        params_by_id: dict[int, nn.Parameter] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            if id(p) not in params_by_id:
                first = next(n for n, q in canonical.items() if q is p)
                layout = self._store.storage.get(first, replicated)
                local = values[first] if values is not None else self._store.cut(p.detach(), layout)
                if _ragged(layout):   # no DTensor placement: this rank's piece itself (see _stored)
                    params_by_id[id(p)] = nn.Parameter(local, requires_grad=p.requires_grad)
                else:
                    dt = DTensor.from_local(local.detach(), self.device_mesh, self._store.dt(layout),
                                            run_check=False, shape=tuple(p.shape), stride=contiguous_stride(p.shape))
                    params_by_id[id(p)] = dtensor_parameter(dt, p.requires_grad)
                self._store.shapes[first] = tuple(p.shape)
                self._store.storage.setdefault(first, layout)
            self._place(name, params_by_id[id(p)], kind="param")
        persistent = set(model.state_dict().keys())
        for name, b in model.named_buffers(remove_duplicate=False):
            if b is not None:
                b = values[name] if values is not None and name in values else b.detach().to(self.device).clone()
            self._place(name, b, kind="buffer", persistent=name in persistent)

    def _materialize(self, model: Any, canonical: dict[str, Any], replicated: tuple) -> dict[str, Any]:
        """Replay a meta model's initialization: this rank's shard of every parameter (the full
        tensor of one parameter at a time; one drawn by a single normal_/uniform_ is drawn in pieces
        keeping this rank's rows), whole buffers. Sets :attr:`init_peak_bytes`."""
        from spmdc.frontend.deferred_init import kept_storages, replay

        first_of = {id(p): n for n, p in canonical.items()}
        out: dict[str, Any] = {}
        params = {n: first_of[id(p)] for n, p in model.named_parameters(remove_duplicate=False)}

        def layout(name: str) -> tuple:
            return self._store.storage.get(params[name], replicated)

        def keep(name: str, full: Any, rows: tuple[int, int] | None = None) -> None:
            if name in params:
                fqn = params[name]
                if fqn not in out:   # rows: already this rank's piece (a Shard(0) layout)
                    out[fqn] = full.to(self.device) if rows is not None else self._store.cut(full, layout(name))
            else:
                out[name] = full.to(self.device).clone()

        def rows(name: str) -> tuple[int, int] | None:
            """The rows this rank keeps of a parameter whose layout shards only dim 0."""
            lay = layout(name) if name in params else None
            if not lay or not all(p.is_replicate() or p.is_shard(0) for p in lay) or all(p.is_replicate() for p in lay):
                return None
            idx = local_piece(torch.arange(canonical[params[name]].shape[0]), lay, self.mesh, self.rank)
            return (int(idx[0]), int(idx[-1]) + 1) if idx.numel() else (0, 0)
        self.init_peak_bytes = replay(self._tape, kept_storages(model, self._tape), keep, rows=rows)
        for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
            if t is not None and t.device.type != "meta" and params.get(name, name) not in out:
                keep(name, t.detach())
        return out

    def _place(self, fqn: str, value: Any, kind: str, persistent: bool = True) -> None:
        *path, leaf = fqn.split(".")
        owner: nn.Module = self
        for i, part in enumerate(path):
            child = owner._modules.get(part)
            if child is None:
                child = _Submodule(self._model.get_submodule(".".join(path[:i + 1])))
                owner._modules[part] = child
            owner = child
        if kind == "param":
            owner._parameters[leaf] = value
        else:
            owner.register_buffer(leaf, value, persistent=persistent)

    def _param(self, fqn: str) -> nn.Parameter:
        return self.get_parameter(fqn)

    def sampler_args(self) -> tuple[int, int]:
        """``(num_replicas, rank)`` for this rank's ``DistributedSampler`` with ``inputs="local"``:
        the number of pieces the plan cuts the batch (dim 0 of the first input) into and this
        rank's piece — the data-parallel size and coordinate (e.g. ``(2, dp)`` on ``dp=2,tp=2``).
        Pipeline stages and device groups compiled with ``inputs="local"``: the job's data-parallel
        replicas (:class:`~spmdc.runtime.input_check.LocalBatches`; e.g. ``(2, dp)`` on 2 stages of
        ``dp=2``; ``(3, 2)`` on the tp=2 group after a dp=2 group)."""
        import torch.distributed as dist

        from spmdc.runtime.input_check import sampler_args

        local = self.pipeline._local if self.pipeline is not None else self.__dict__.get("_local_batches")
        if local is not None:   # pipeline stages / device groups: the job's data-parallel replicas
            return local.sampler_args(dist.get_rank())
        if self.pipeline is not None:
            raise ValueError(f"pipeline plan '{self.plan_name}': with inputs='global' every rank passes the global "
                             "batch, so no sampler is split per rank; compile with inputs='local' for per-rank pieces")
        if self._hetero is not None:
            raise ValueError(f"plan '{self._hetero.name}' has device groups: with inputs='global' every rank passes "
                             "the global batch, so no sampler is split per rank; compile with inputs='local' for "
                             "per-rank pieces")
        specs = self._executor._input_specs("train" if self._opts.can_train else "forward")
        axes = dict(zip(self.mesh.axis_names, self.mesh.shape))
        return sampler_args(specs[0][1], axes, self.mesh.coords(self.rank)) if specs else (1, 0)

    # -- the model-like surface: each layout kind's executor runs it ---------------------------------
    def forward(self, *inputs: Any, full: bool = False, **kwargs: Any) -> Any:
        """Inputs as tensors or DTensors; outputs in the model's own structure, as the ``outputs``
        option says (DTensors by default; ``full=True``: whole tensors), with a ``grad_fn`` under
        autograd: ``loss.backward()`` runs the compiled vjp program (:mod:`spmdc.api.autograd_call`)."""
        return self._executor.forward(*inputs, full=full, **kwargs)

    def backward(self, *batch: Any, **kwargs: Any) -> Any:
        """Forward and backward on ``batch`` (model inputs, loss inputs, keyword inputs): adds the
        gradients to each parameter's ``.grad`` (a DTensor laid out like the parameter), as
        ``loss.backward()`` would (clipped first under ``clip_grad_norm``); returns the loss (0-d
        tensor). ``grad_accum=N``: the batch in N micro-batches, the gradients reduced once. A
        pipeline plan: the global batch on every rank, this rank's stage's gradients."""
        return self._executor.backward(*batch, **kwargs)

    @property
    def last_grad_norm(self) -> Any:
        """Under ``clip_grad_norm``: the last backward's gradient norm before clipping (every rank's the same)."""
        return self._executor.last_grad_norm

    def step(self, *batch: Any, **kwargs: Any) -> Any:
        """One training step: fresh gradients for ``batch`` (clipped when compiled with
        ``clip_grad_norm``), the optimizer's update, gradients cleared. Returns the loss."""
        if self.optimizer is None:
            raise RuntimeError("step() needs an optimizer (spmdc.compile(..., optimizer=...)); or call "
                               "backward() and run your own optimizer on cm.parameters()")
        self.zero_grad(set_to_none=True)
        loss = self.backward(*batch, **kwargs)
        self.optimizer.step()
        self.zero_grad(set_to_none=True)
        return loss

    def clip_grad_norm_(self, max_norm: float, also: Any = ()) -> Any:
        """``torch.nn.utils.clip_grad_norm_`` over the whole model, for every layout kind: the
        2-norm of every gradient in ``p.grad`` across all the ranks that hold a piece of it (a
        pipeline: every stage's, a tied parameter once; device groups: each group holds the
        whole model), every gradient scaled by one coefficient. Returns the norm before clipping,
        the same on every rank; one all-reduce of one float32. Every rank of the module calls it.
        (torch's own function on ``cm.parameters()`` sees only this rank's pieces where they are
        not DTensors — a ragged shard — and only its stage under a pipeline plan.)

        ``also``: parameters outside the module clipped with it, in the same norm — the eager
        layers around a compiled trunk (``cm.clip_grad_norm_(1.0, also=head.parameters())``):
        plain tensors whose gradients are the same on every rank, or DTensors on this module's
        DeviceMesh. (torch's function refuses a mix of DTensor and plain gradients.)"""
        if not max_norm > 0:
            raise ValueError(f"clip_grad_norm_: max_norm must be > 0, got {max_norm!r}")
        extra = [p for p in also if p.grad is not None]
        if extra and (self.pipeline is not None or self._hetero is not None):
            raise NotImplementedError(f"clip_grad_norm_(also=...) on {self.kind} '{self.plan_name}': parameters "
                                      "outside the module are clipped with one mesh's modules only")
        if self.pipeline is not None:
            return self.pipeline._clip_grads(float(max_norm))
        own = 1 if self._hetero is not None else 0   # (a group's gradients: its mesh has no grp axis)
        grads = [(p.grad, self._store.storage[fqn][own:]) for fqn, p in self.named_parameters() if p.grad is not None]
        grads += [(p.grad, self._outside_layout(p.grad)) for p in extra]
        if not grads:   # still take part in the all-reduce (other ranks may hold gradients)
            grads = [(torch.zeros((), device=self.device), ())]
        return clip_grads_(grads, float(max_norm), self.comm, self.group)

    def _outside_layout(self, g: Any) -> tuple[Any, ...]:
        """The spmdc layout, on this module's mesh, of a gradient outside it (``clip_grad_norm_(also=)``)."""
        from torch.distributed.tensor import Shard as TorchShard

        if not _is_dtensor(g):
            return tuple(Replicate() for _ in self.mesh.axis_names)   # the same on every rank
        if g.device_mesh != self.device_mesh:
            raise ValueError(f"clip_grad_norm_(also=...): a DTensor gradient on DeviceMesh {g.device_mesh} is not on "
                             f"this module's ({self.device_mesh}); clip each mesh's parameters together")
        from spmdc.dialects.shard import Shard

        out: list[Any] = []
        for p in g.placements:
            if isinstance(p, TorchShard):
                out.append(Shard(p.dim))
            elif p.is_replicate():
                out.append(Replicate())
            else:
                raise ValueError(f"clip_grad_norm_(also=...): a gradient placed {p} (partial) has no norm until it "
                                 "is reduced")
        return tuple(out)

    def set_optimizer(self, optimizer: Any) -> Any:
        """Replace the optimizer (fresh state) over the module's parameters; returns it. One that
        is not elementwise needs the parameters stored whole: compile with it instead."""
        cls = optimizer_class(optimizer)
        if not self._runs_locally(cls) and not self.whole_parameters:
            raise ValueError(f"{cls.__name__ if cls else optimizer!r} is not an elementwise optimizer: it needs whole "
                             "parameters, which spmdc stores only when the optimizer is given to spmdc.compile "
                             "(optimizer=...); the parameters here are sharded")
        self.optimizer = make_optimizer(optimizer, list(self.parameters()))
        return self.optimizer

    def named_grads(self) -> Any:
        """``(name, p.grad)`` for parameters that have a gradient (DTensors)."""
        for n, p in self.named_parameters():
            if p.grad is not None:
                yield n, p.grad

    def _ragged_layout(self, key: str) -> tuple[Any, ...] | None:
        """The storage layout of state-dict key ``key`` when it is a ragged parameter (a plain
        tensor holding this rank's piece), else None."""
        try:
            fqn = _canonical(self, key)
        except (AttributeError, StopIteration):
            return None   # a buffer
        lay = self._store.storage.get(fqn)
        return lay if lay is not None and _ragged(lay) else None

    def placements(self) -> dict[str, tuple[Any, ...]]:
        """Storage placements per parameter (spmdc placements)."""
        return dict(self._store.storage)

    # -- state --------------------------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, Any]:
        """Full tensors (CPU) under the model's own keys; a collective every rank calls (a pipeline
        plan: every stage's, the whole model's, on every rank)."""
        if self.pipeline is not None:
            return self.pipeline.full_state_dict()
        out = {}
        for k, v in self.state_dict().items():
            lay = self._ragged_layout(k)
            full = v.detach() if lay is None else \
                self._store.full(v.detach(), lay, self._store.shapes[_canonical(self, k)])
            out[k] = (full.full_tensor() if _is_dtensor(full) else full).cpu().clone()   # never a view
        return out

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Full tensors (cut to this rank's shards) or DTensors in any layout (redistributed), in
        place, so an optimizer's references stay valid. A pipeline plan: the whole model's state
        (full tensors), each stage setting its own parameters."""
        state = state_dict
        if self.pipeline is not None:
            from torch.nn.modules.module import _IncompatibleKeys

            names = [n for n, _ in self._model.named_parameters(remove_duplicate=False)]
            missing, unexpected = [k for k in names if k not in state], []
            if strict and missing:
                raise RuntimeError(f"load_state_dict: missing keys {missing}")
            self.pipeline.load_full_state({k: v.full_tensor() if _is_dtensor(v) else v for k, v in state.items()})
            return _IncompatibleKeys(missing, unexpected)
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        with torch.no_grad():
            for k, v in state.items():
                if k not in own:
                    continue
                target = own[k]
                if _is_dtensor(v) and _is_dtensor(target) and v.device_mesh != target.device_mesh:
                    v = v.full_tensor()   # another mesh (a module of another plan): through the full tensor
                if _is_dtensor(target):
                    if _is_dtensor(v):
                        v = v.redistribute(target.device_mesh, target.placements)
                        target.to_local().copy_(v.to_local())
                    else:
                        layout = self._store.storage[_canonical(self, k)]
                        target.to_local().copy_(self._store.cut(v, layout))
                else:
                    v = v.full_tensor() if _is_dtensor(v) else v
                    lay = self._ragged_layout(k)
                    if lay is not None and tuple(v.shape) == self._store.shapes[_canonical(self, k)]:
                        v = self._store.cut(v, lay)   # a full tensor (else: this rank's piece, as state_dict() gives)
                    target.copy_(v)
        from torch.nn.modules.module import _IncompatibleKeys

        return _IncompatibleKeys(missing, unexpected)

    def save(self, path: str, optimizer: Any = None, extra: dict[str, Any] | None = None, *,
             model_only: bool = False) -> None:
        """Model and optimizer state to the directory ``path`` with torch.distributed.checkpoint,
        sharded as they are; a collective (device groups: every rank of the job; the first group
        writes, every group holding the whole model). The optimizer is ``optimizer``, else
        ``cm.optimizer``, else the one live optimizer over the module's parameters (``model_only``:
        none). Atomic: an interrupted save leaves the previous checkpoint at ``path`` whole."""
        from spmdc.runtime.checkpointing import save

        save(self.checkpoint_view(), path, optimizer, extra, model_only=model_only)

    def load(self, path: str, optimizer: Any = None, *, model_only: bool = False) -> dict[str, Any]:
        """Load what :meth:`save` wrote, under any plan and mesh (resharded by DCP), into the module
        and its optimizer (chosen as :meth:`save` does; ``model_only``: the model alone); the
        optimizer keeps its own settings. Returns the ``extra`` dict saved with it."""
        from spmdc.runtime.checkpointing import load

        return load(self.checkpoint_view(), path, optimizer, model_only=model_only)

    def checkpoint_view(self) -> Any:
        """This rank's part of the module as :mod:`spmdc.runtime.checkpointing` saves and loads it.
        Device groups: every rank agrees, the first group's ranks write (each group holds the whole
        model, so the checkpoint is a one-mesh one of that group's layout), each group reads."""
        import torch.distributed as dist

        from spmdc.runtime.checkpointing import CheckpointView

        if self.pipeline is not None:   # the stage's entries; which of them an earlier stage writes
            return self.pipeline.checkpoint_view(self.optimizer)
        view = CheckpointView(self, self.optimizer, self._opts.can_train, self.plan_name, str(self.mesh),
                              self.device, group=self.group, write_group=self.group, read_group=self.group)
        if self._hetero is None:
            return view
        ragged = next((k for k, lay in self._store.storage.items() if _ragged(lay)), None)
        if ragged is not None:
            raise NotImplementedError(f"checkpoints of plan '{self._hetero.name}' (device groups): parameter "
                                      f"'{ragged}' is stored ragged inside its group, which a group's checkpoint "
                                      "does not write yet; use an even fsdp_shard")
        first = self._hetero.group_of(dist.get_rank()) == 0
        view.group, view.writes, view.mesh = None, first, str(self._hetero.groups[0].mesh)
        return view

    # -- the training state tensor by tensor (spmdc.api.switch) -----------------------------------------
    def compile_args(self) -> dict[str, Any]:
        """What this module was compiled from: ``spmdc.compile``'s arguments (the user's model, the
        example inputs, every option), to compile the same model again under another plan."""
        return {**self._init_args, "device": self.device.type}

    def state_holdings(self) -> dict[str, tuple[Any, tuple[Any, ...], tuple[int, ...]]]:
        """Where this rank's module holds each parameter (and its optimizer state, laid out alike):
        ``{name: (MeshSpec of the ranks, layout on it, global shape)}`` — device groups: this rank's
        group's mesh and layout (every group holds the whole parameter)."""
        import torch.distributed as dist

        from spmdc.sharding.slices import MeshSpec

        if self.pipeline is not None:
            return self.pipeline.state_holdings()
        if self._hetero is not None:
            g = self._hetero.groups[self._hetero.group_of(dist.get_rank())]
            spec, own = MeshSpec(tuple(g.mesh.axis_names), tuple(g.mesh.shape), tuple(g.ranks)), 1
        else:
            spec, own = MeshSpec(tuple(self.mesh.axis_names), tuple(self.mesh.shape), tuple(self.members)), 0
        st = self._store
        return {fqn: (spec, tuple(lay[own:]), tuple(st.shapes[fqn])) for fqn, lay in st.storage.items()}

    def state_pieces(self, name: str) -> dict[str, Any]:
        """This rank's piece of parameter ``name`` (``"param"``) and of each optimizer state entry
        (tensors laid out like the parameter: their local pieces; scalars such as ``step`` as they are)."""
        return self._store.pieces(self.get_parameter(name), self.optimizer)

    def full_state_tensor(self, name: str, slot: str = "param") -> Any:
        """The whole value of parameter ``name`` or of its optimizer tensor ``slot``; a collective
        over the module's mesh (device groups: over each group's, every rank getting it; a
        pipeline: over the stage's)."""
        fqn = _canonical(self, name)
        return self._store.full_tensor(fqn, self.state_pieces(fqn)[slot])

    def load_state_piece(self, name: str, slot: str, value: Any, *, full: bool = False) -> None:
        """Set this rank's piece of parameter ``name`` (``slot="param"``, in place) or of its
        optimizer state entry ``slot`` from ``value``: this rank's piece, or with ``full=True`` the
        whole tensor (cut here). A non-tensor or 0-d ``value`` of an optimizer slot (``step``) is
        stored as it is."""
        fqn = _canonical(self, name)
        self._store.load_piece(fqn, self.get_parameter(fqn), self.optimizer, slot, value, full)

    def switch(self, plan: Any, mesh: Any = None, ranks: Sequence[int] | None = None, lost: Sequence[int] = (),
               **options: Any) -> Any:
        """This module's training state (parameters, optimizer state) moved to a new plan and mesh,
        device groups or pipeline stages — by one batched send/recv, without a checkpoint; every rank
        of the job calls it. Returns the new module (None on ranks outside ``ranks``, which then
        leave); see :mod:`spmdc.api.switch`."""
        from spmdc.api.switch import switch

        return switch(self, plan, mesh=mesh, ranks=ranks, lost=lost, **options)

    @property
    def last_run(self) -> Any:
        """The runner of the last program this rank ran (a ``RankRunner``, or an ``EagerRunner``
        under ``spmdc.eager``), None before the first call or for a pipeline plan."""
        return getattr(self._executor, "last_run", None)

    @property
    def eager_trace(self) -> list[str]:
        """``spmdc.eager(..., trace=True)``: the last call's ops, each with its operands' layouts,
        its results' layouts and the collectives it issued (empty otherwise)."""
        return list(getattr(self.last_run, "last_trace", []))

    @property
    def programs(self) -> dict[str, RankProgram]:
        """This rank's compiled programs, latest per kind (``forward``, ``train``): IR, code, layouts
        (a pipeline plan: its stage's forward, if it has one, and its backward)."""
        if self.pipeline is not None:
            progs = self.pipeline._programs
            return {k: r.program for k, r in (("forward", progs.forward), ("train", progs.backward)) if r is not None}
        return self._programs.latest()

    @property
    def program_cache(self) -> ProgramCache | None:
        """Every program compiled so far, by (kind, module modes, input shapes) (:mod:`spmdc.api.program_cache`;
        None for a pipeline plan, whose executor holds its stage's programs)."""
        return self._programs

    def extra_repr(self) -> str:
        if self.pipeline is not None:
            return f"pipeline plan={self.plan_name!r}, stage={self.pipeline.stage}, mesh={self.mesh}, rank={self.rank}"
        return f"mesh={self.mesh}, plan={self.plan_name!r}, rank={self.rank}"


class _Submodule(nn.Module):
    """The parameters and buffers under one module path of the user's model; its mode is that
    module's (``cm.encoder.eval()`` is ``model.encoder.eval()``, ``cm.encoder.training`` reads it)."""

    def __init__(self, mirrored: nn.Module):
        super().__init__()
        object.__setattr__(self, "_mirrored", mirrored)

    @property
    def training(self) -> bool:   # type: ignore[override]
        mirrored = self.__dict__.get("_mirrored")
        return True if mirrored is None else mirrored.training

    @training.setter
    def training(self, mode: bool) -> None:
        mirrored = self.__dict__.get("_mirrored")
        if mirrored is not None:   # (not yet known in nn.Module.__init__)
            mirrored.training = mode

    def train(self, mode: bool = True) -> _Submodule:
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        self._mirrored.train(mode)
        return self


def _arguments(fn: Callable, values: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``fn`` was called with, from its ``locals()`` before any is reassigned."""
    import inspect

    return {k: values[k] for k in inspect.signature(fn).parameters if k != "self" and k in values}


def _init_tape(model: Any, init: Callable[[Any], Any] | None) -> Any:
    """The recorded initialization of a meta model (spmdc.deferred_init, or ``init`` run on it now);
    None for a model with real tensors."""
    from spmdc.frontend.deferred_init import TAPE_ATTR, is_meta_model, record_init

    if not is_meta_model(model):
        if init is not None:
            raise ValueError("init= is for a model on the meta device; this model's tensors are real")
        return None
    if init is not None:
        return record_init(model, init)
    tape = getattr(model, TAPE_ATTR, None)
    if tape is None:
        names = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"]
        raise ValueError(f"the model's tensors are on the meta device ({names[0]!r} and {len(names) - 1} more) but "
                         "spmdc does not know how to initialize them: build the model with "
                         "spmdc.deferred_init(cls, *args), or pass init=fn (e.g. init=lambda m: m.reset_parameters())")
    return tape


def _whole_or_nothing(layout: Sequence[Any]) -> bool:
    """Whether every rank holds the whole tensor or none of it: replicated but for at most one
    ragged shard that gives its whole dim to one rank."""
    ragged = [p for p in layout if isinstance(p, RaggedShard)]
    return all(isinstance(p, (Replicate, RaggedShard)) for p in layout) and len(ragged) <= 1 \
        and all(sum(1 for u in p.units if u) <= 1 for p in ragged)


def _canonical(cm: CompiledModule, key: str) -> str:
    p = cm.get_parameter(key)
    return next(n for n, q in cm.named_parameters() if q is p)
