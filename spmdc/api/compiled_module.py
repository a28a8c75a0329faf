"""The module :func:`spmdc.compile` returns: an ``nn.Module`` whose parameters are DTensors.

    cm = spmdc.compile(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp",
                       train=True, loss_fn=F.mse_loss, loss_inputs=(y,), optimizer=("adamw", {"lr": 1e-3}))
    out = cm(x)                 # DTensor laid out as the program's output (cm(x, full=True): a tensor)
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
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn as nn

from spmdc.api.compile_shared import compile_shared
from spmdc.compiler import Dump, RankProgram, compile_rank, split_example_inputs
from spmdc.compiler.options import CompileOptions
from spmdc.dialects.shard import Partial, RaggedShard, Replicate
from spmdc.frontend.deferred_init import fake_parameters
from spmdc.frontend.export import ModuleModes, module_flags
from spmdc.runtime.collectives import CountingComm
from spmdc.runtime.dtensors import contiguous_stride, dtensor_placements, mesh_of
from spmdc.runtime.executor import RankRunner, local_piece, to_full
from spmdc.runtime.gradients import clip_grads_, reduce_gradients
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
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("spmdc.compile needs an initialized torch.distributed job "
                               "(torchrun + dist.init_process_group)")
        from spmdc.sharding.device_groups import HeteroPlan

        self._hetero = plan if isinstance(plan, HeteroPlan) else None
        world = dist.get_world_size()
        if self._hetero is not None:   # device groups, each its own mesh and plan (spmdc.runtime.group_comm)
            mesh, device_mesh, device = self._hetero_setup(self._hetero, mesh, device_mesh, device, options)
        if mesh is None and device_mesh is None:
            raise ValueError("spmdc.compile needs mesh= (a Mesh, 'dp=2,tp=2', {'dp': 2} or a named DeviceMesh), "
                             "unless the plan is a HeteroPlan with device groups")
        mesh, device_mesh = mesh_of(mesh, device_mesh)
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
        self.group = None if members == list(range(world)) else group if group is not None else \
            dist.new_group(members, use_local_synchronization=True)
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
        self._input_check = self._make_input_check(options.inputs, options.check_inputs, options.execution)
        object.__setattr__(self, "_model", model)   # compiles new programs from it; not a submodule
        self._tape = _init_tape(model, init)       # a meta model: how to initialize it
        model_args, loss_args = split_example_inputs(example_inputs, loss_fn, loss_inputs)
        kwargs = dict(example_kwargs or {})
        self._example = (tuple(model_args), tuple(loss_args), kwargs)   # what switch() compiles again from
        self._optimizer_spec = optimizer
        self._kw_names = list(kwargs)   # keyword inputs: the programs' last inputs, in this order
        self._opts = _Options(plan=plan, loss_fn=loss_fn, n_loss=len(loss_args), dump=dump, can_train=train)
        self.target = options.resolved_target()
        self._runners: dict[tuple, RankRunner] = {}
        example = list(model_args) + list(loss_args) + list(kwargs.values())
        if train and options.grad_accum > 1 and self._tape is None:   # micro-batches must not change the loss
            from spmdc.api.micro_batches import check_micro_batch_mean

            check_micro_batch_mean(model, loss_fn, len(model_args), self._kw_names, example, self._micro(example),
                                   first=members[0], group=self.group, eval_mode=True)
        if train:
            self._runner("train", example if options.grad_accum == 1 else self._micro(example)[0], compile_now=True,
                         forward_too=list(model_args) + list(kwargs.values()))
        else:
            self._runner("forward", list(model_args) + list(kwargs.values()), compile_now=True)
        storage = next(iter(self._runners.values()))
        self.plan_name = storage.program.step.plan_name
        self._storage = self._storage_layouts(storage.program)
        self.optimizer_class = optimizer_class(optimizer) if train else None
        self.whole_parameters = self.optimizer_class is not None and not self._runs_locally(self.optimizer_class)
        if self.whole_parameters:   # the optimizer needs whole tensors: store every parameter whole
            self._storage = {k: tuple(Replicate() for _ in self.mesh.axis_names) for k in self._storage}
        self._install_parameters(model, storage.program)
        self.optimizer = make_optimizer(optimizer, list(self.parameters())) if train else None
        self.last_grad_norm: Any = None
        if self._tape is None:
            self.init_peak_bytes = None

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
        for what, bad in (("execution='eager'", options.execution == "eager"),
                          ("inputs='local'", options.inputs == "local")):
            if bad:
                raise ValueError(f"{what} is not supported with a heterogeneous plan (device groups) yet")
        device = device or ("cuda" if dist.get_backend() == "nccl" else "cpu")
        meshes = group_meshes(hplan, device)
        g = hplan.group_of(dist.get_rank())
        return hplan.virtual_mesh(g), meshes[g], device

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

    def _dt(self, layout: Sequence[Any]) -> tuple[Any, ...]:
        """DTensor placements of a layout on this module's DeviceMesh (a heterogeneous plan's
        group mesh has no ``grp`` axis: values there are whole per group)."""
        if self._hetero is not None:
            if not isinstance(layout[0], Replicate):
                raise ValueError(f"a value laid out {layout[0]} across device groups has no DTensor on one group's "
                                 "mesh (outputs of a heterogeneous plan's forward are split across the groups)")
            layout = layout[1:]
        return dtensor_placements(layout)

    def _runs_locally(self, cls: type | None) -> bool:
        """Whether optimizer class ``cls`` updates the stored pieces exactly as one device would:
        elementwise ones always, per-tensor ones (Muon) when every rank holds each parameter whole
        or not at all (``fsdp_shard="whole"``)."""
        if is_elementwise(cls):
            return True
        return is_per_tensor(cls) and all(_whole_or_nothing(lay) for lay in self._storage.values())

    # -- programs ---------------------------------------------------------------------------------
    def _signature(self, tensors: Sequence[Any]) -> tuple:
        return tuple((tuple(t.shape), str(t.dtype)) for t in tensors)

    def _runner(self, kind: str, tensors: Sequence[Any], compile_now: bool = False,
                forward_too: Sequence[Any] | None = None) -> RankRunner:
        """The program for ``kind`` ("forward" / "train" / "train_partial") in the current mode at
        these global input shapes, compiled (on every rank together) the first time."""
        flags = module_flags(self._model)   # every module's own mode
        key = (kind, flags, self._signature(tensors))
        if key in self._runners:
            return self._runners[key]
        self._same_modes_everywhere(ModuleModes.of(self._model))
        # a new shape: capture it from global tensors (local batches arrive as DTensors; every rank
        # is here together, as each program is compiled collectively)
        tensors = [t.full_tensor() if _is_dtensor(t) else t for t in tensors]
        if forward_too is not None:
            forward_too = [t.full_tensor() if _is_dtensor(t) else t for t in forward_too]
        o, opts = self._opts, self.options
        n_model = len(tensors) - (o.n_loss if kind != "forward" else 0) - len(self._kw_names)
        kw = dict(zip(self._kw_names, tensors[len(tensors) - len(self._kw_names):]))
        model_in = list(tensors[:n_model])
        jobs = []
        if kind == "forward" or forward_too is not None:
            fwd_in, fwd_kw = model_in, kw
            if kind != "forward":   # the forward of the whole batch (a training step may take micro-batches)
                n_fwd = len(forward_too) - len(self._kw_names)
                fwd_in, fwd_kw = list(forward_too)[:n_fwd], dict(zip(self._kw_names, list(forward_too)[n_fwd:]))
            jobs.append(dict(inputs=fwd_in, train=False, dump=o.dump, kwargs=fwd_kw, options=opts))
        if kind != "forward":
            jobs.append(dict(inputs=model_in, train=True, loss_fn=o.loss_fn, dump=o.dump, kwargs=kw,
                             loss_inputs=list(tensors[n_model:n_model + o.n_loss]),
                             options=opts if kind == "train" else opts.replace(clip_grad_norm=None),
                             partial_grads=kind == "train_partial"))
        model = self._model   # captured with every module in the mode the user set
        with fake_parameters(model) if self._tape is not None else nullcontext():
            if self._hetero is not None:
                from spmdc.api.compile_shared import compile_groups_shared

                steps = compile_groups_shared(model, jobs, self._hetero)
            else:
                steps = compile_shared(model, jobs, self.mesh, o.plan, self.group, self.members)
        for job, step in zip(jobs, steps):
            if opts.execution == "eager":
                from spmdc.api.eager import EagerRunner, eager_program

                runner: Any = EagerRunner(eager_program(step, self.rank), self.comm, device=self.device,
                                          hints=opts.eager_hints, trace=opts.eager_trace)
            else:
                prog = compile_rank(step, self.rank, self.target, o.dump)
                if self._hetero is not None:
                    self.comm.register(prog.module)   # its cross-group subgroups (collective)
                runner = RankRunner(prog, self.comm, device=self.device)
            sig = self._signature(job["inputs"] + job.get("loss_inputs", []) + list(job["kwargs"].values()))
            name = "forward" if not job["train"] else kind
            self._runners[(name, flags, sig)] = runner
        return self._runners[key]

    def _same_modes_everywhere(self, modes: ModuleModes) -> None:
        """Refuse to compile when the model's modes differ between the ranks compiling together (one
        rank's capture serves them all)."""
        import torch.distributed as dist

        group = None if self._hetero is not None else self.group   # device groups compile job-wide
        every: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(every, modes, group=group)
        if any(m != modes for m in every):
            ranks = dist.get_process_group_ranks(group) if group is not None else range(len(every))
            seen = "; ".join(f"rank {r}: {m.describe()}" for r, m in zip(ranks, every) if m != every[0])
            raise ValueError(f"the model's module modes differ between ranks (rank {list(ranks)[0]}: "
                             f"{every[0].describe()}; {seen}): set them alike on every rank before calling")

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
        self._shapes: dict[str, tuple[int, ...]] = {}
        values = self._materialize(model, canonical, replicated) if self._tape is not None else None
        params_by_id: dict[int, nn.Parameter] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            if id(p) not in params_by_id:
                first = next(n for n, q in canonical.items() if q is p)
                layout = self._storage.get(first, replicated)
                local = values[first] if values is not None else self._cut(p.detach(), layout)
                if _ragged(layout):   # no DTensor placement: this rank's piece itself (see _stored)
                    params_by_id[id(p)] = nn.Parameter(local, requires_grad=p.requires_grad)
                else:
                    dt = DTensor.from_local(local, self.device_mesh, self._dt(layout), run_check=False,
                                            shape=tuple(p.shape), stride=contiguous_stride(p.shape))
                    params_by_id[id(p)] = nn.Parameter(dt, requires_grad=p.requires_grad)
                self._shapes[first] = tuple(p.shape)
                self._storage.setdefault(first, layout)
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
            return self._storage.get(params[name], replicated)

        def keep(name: str, full: Any, rows: tuple[int, int] | None = None) -> None:
            if name in params:
                fqn = params[name]
                if fqn not in out:   # rows: already this rank's piece (a Shard(0) layout)
                    out[fqn] = full.to(self.device) if rows is not None else self._cut(full, layout(name))
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

    def _cut(self, full: Any, layout: Sequence[Any]) -> Any:
        return local_piece(full.detach(), layout, self.mesh, self.rank).to(self.device).clone()

    def _param(self, fqn: str) -> nn.Parameter:
        return self.get_parameter(fqn)

    # -- tensors in and out ----------------------------------------------------------------------
    def _global(self, x: Any, what: str) -> Any:
        """A user input as a global value (DTensors and, with ``inputs="local"``, this rank's
        batch piece laid out as the plan's inputs say)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{what}: expected a tensor or DTensor, got {type(x).__name__}")
        return x

    def _local_arg(self, x: Any, layout: Sequence[Any], shape: tuple[int, ...], what: str) -> Any:
        from torch.distributed.tensor import DTensor

        if isinstance(x, DTensor):
            if tuple(x.shape) != tuple(shape):
                raise ValueError(f"{what}: shape {tuple(x.shape)} differs from the program's {tuple(shape)}")
            if self._hetero is not None:
                x = x.full_tensor()   # a DTensor on some group's mesh: the global value
            else:
                return x.redistribute(self.device_mesh, self._dt(layout)).to_local().to(self.device)
        return self._cut(x, layout)

    def _dtensor(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        from torch.distributed.tensor import DTensor

        return DTensor.from_local(local, self.device_mesh, self._dt(layout), run_check=False,
                                  shape=tuple(shape), stride=contiguous_stride(shape))

    def _stored(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        """A parameter-like value as the module holds it: a DTensor, or for a ragged layout (which
        DTensor cannot express) this rank's piece as a plain tensor."""
        return local if _ragged(layout) else self._dtensor(local, layout, shape)

    def _relayout(self, local: Any, src: Sequence[Any], dst: Sequence[Any], shape: tuple[int, ...]) -> Any:
        if tuple(src) == tuple(dst):
            return local
        if _ragged(src) or _ragged(dst):   # through the full value (no collective from R)
            return local_piece(self._full(local, src, shape), dst, self.mesh, self.rank).to(self.device)
        return self._dtensor(local, src, shape).redistribute(self.device_mesh, self._dt(dst)).to_local()

    def _full(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        if all(isinstance(p, Replicate) for p in layout):
            return local.clone()
        return to_full(local, tuple(shape), tuple(layout), self.comm)

    def _inputs(self, tensors: Sequence[Any], kwargs: dict[str, Any], kind: str) -> list[Any]:
        """Positional inputs then keyword inputs (compiled order), as global tensors or DTensors."""
        if set(kwargs) != set(self._kw_names):
            raise TypeError(f"the compiled program takes keyword inputs {self._kw_names or 'none'}, "
                            f"got {sorted(kwargs) or 'none'}")
        values = list(tensors) + [kwargs[n] for n in self._kw_names]
        for i, v in enumerate(values):
            self._global(v, f"input #{i}")
        self._check_inputs(kind, values)
        if self.options.inputs == "local":
            values = self._from_local(values, kind)
        return values

    def _input_specs(self, kind: str, n: int | None = None) -> list[tuple[str, tuple[Any, ...]]]:
        """(name, layout) of each input of ``kind``'s programs (any program of a kind has the same
        plan layouts), after checking that ``n`` inputs were given (unless None)."""
        runner = next((r for k, r in self._runners.items() if k[0].startswith(kind)), None) \
            or next(iter(self._runners.values()))
        prog = runner.program
        at = [i for i, k in enumerate(prog.step.arg_kinds) if k.startswith("input:")]
        specs = [(f"input #{j} ('{prog.step.arg_kinds[i][6:]}')", tuple(prog.arg_layouts[i])) for j, i in enumerate(at)]
        if n is not None and len(specs) != n:
            raise TypeError(f"the compiled program takes {len(specs)} input tensors, got {n}")
        return specs

    def _check_inputs(self, kind: str, values: list[Any]) -> None:
        """On the first call of each program (per kind, mode and input shapes): the inputs are the
        same on the ranks that must pass the same tensor — one checksum collective, then nothing."""
        check = self._input_check
        if not check.enabled:
            return
        key = (kind, module_flags(self._model), tuple((tuple(v.shape), str(v.dtype), _is_dtensor(v))
                                                       for v in values))
        if key in check.seen:
            return
        specs = self._input_specs(kind, len(values))
        check(key, values, [n for n, _ in specs], [lay for _, lay in specs])

    def sampler_args(self) -> tuple[int, int]:
        """``(num_replicas, rank)`` for this rank's ``DistributedSampler`` with ``inputs="local"``:
        the number of pieces the plan cuts the batch (dim 0 of the first input) into and this
        rank's piece — the data-parallel size and coordinate (e.g. ``(2, dp)`` on ``dp=2,tp=2``)."""
        from spmdc.runtime.input_check import sampler_args

        if self._hetero is not None:
            raise ValueError(f"plan '{self._hetero.name}' has device groups: every rank passes the global batch "
                             "(inputs='local' is not supported there), so no sampler is split per rank")
        specs = self._input_specs("train" if self._opts.can_train else "forward")
        axes = dict(zip(self.mesh.axis_names, self.mesh.shape))
        return sampler_args(specs[0][1], axes, self.mesh.coords(self.rank)) if specs else (1, 0)

    def _from_local(self, values: list[Any], kind: str) -> list[Any]:
        """``inputs="local"``: each tensor is this rank's piece of the global input, split like the
        plan's input layout (a DistributedSampler's batch: even pieces along the batch dim)."""
        from torch.distributed.tensor import DTensor

        layouts = [lay for _, lay in self._input_specs(kind, len(values))]
        return [v if isinstance(v, DTensor) else
                DTensor.from_local(v.to(self.device), self.device_mesh, self._dt(lay), run_check=False)
                for v, lay in zip(values, layouts)]

    def _args(self, run: RankRunner, inputs: Sequence[Any]) -> list[Any]:
        prog = run.program
        args, it = [], iter(inputs)
        n_inputs = sum(1 for k in prog.step.arg_kinds if k.startswith("input:"))
        if len(inputs) != n_inputs:
            raise TypeError(f"the compiled program takes {n_inputs} input tensors, got {len(inputs)}")
        with torch.no_grad():
            for i, kind in enumerate(prog.step.arg_kinds):
                name = kind.split(":", 1)[1]
                if kind.startswith("input:"):
                    args.append(self._local_arg(next(it), prog.arg_layouts[i], prog.step.arg_shapes[i],
                                                f"input '{name}'"))
                elif i in prog.step.buffers:
                    args.append(self.get_buffer(name))
                else:
                    p = self._param(name)
                    args.append(self._relayout(_local(p), self._storage[name], prog.arg_layouts[i],
                                               self._shapes[name]))
        return args

    # -- the model-like surface ----------------------------------------------------------------------
    def forward(self, *inputs: Any, full: bool = False, **kwargs: Any) -> Any:
        """Inputs as tensors or DTensors; outputs as DTensors (``full=True``: tensors)."""
        values = self._inputs(inputs, kwargs, "forward")
        run = self._runner("forward", values)
        if self._hetero is not None and any(not isinstance(lay[0], Replicate) for lay in run.program.res_layouts):
            raise NotImplementedError(f"cm(x) of a module on plan '{self._hetero.name}' (device groups): its "
                                      "outputs are split across the groups, which no DTensor or full tensor "
                                      "gathers yet; train with cm.step/cm.backward, or compile without groups "
                                      "for inference")
        self._last_run = run
        outs = run(self._args(run, values))
        res = []
        for out, layout, shape in zip(outs, run.program.res_layouts, run.program.step.res_shapes):
            res.append(self._full(out, layout, shape) if full else self._dtensor(out, layout, shape))
        return res[0] if len(res) == 1 else tuple(res)

    def _batch(self, batch: tuple, kwargs: dict[str, Any]) -> list[Any]:
        if not self._opts.can_train:
            raise RuntimeError("training needs spmdc.compile(..., train=True)")
        if len(batch) == 2 and all(isinstance(b, (tuple, list)) for b in batch):
            batch = tuple(batch[0]) + tuple(batch[1])
        return self._inputs(batch, kwargs, "train")

    def _train_program(self, kind: str, values: list[Any]) -> tuple[Any, dict[str, tuple[Any, Any]], Any]:
        """Run a training program: (loss, {fqn: (local gradient, its layout)}, gradient norm or None)."""
        run = self._runner(kind, values)
        self._last_run = run
        prog = run.program
        outs = run(self._args(run, values))
        loss, grads, norm = None, {}, None
        for i, (rkind, out) in enumerate(zip(prog.step.result_kinds, outs)):
            if rkind == "loss":
                loss = self._full(out, prog.res_layouts[i], prog.step.res_shapes[i])
            elif rkind == "grad_norm":
                norm = self._full(out, prog.res_layouts[i], prog.step.res_shapes[i])
            elif rkind.startswith("grad:"):
                grads[rkind[5:]] = (out, prog.res_layouts[i])
        return loss, grads, norm

    def _accumulate(self, grads: dict[str, Any]) -> None:
        """Add gradients (DTensors laid out like their parameters) into ``p.grad``."""
        for fqn, g in grads.items():
            p = self._param(fqn)
            if not p.requires_grad:
                continue
            p.grad = g if p.grad is None else p.grad + g

    def backward(self, *batch: Any, **kwargs: Any) -> Any:
        """Forward and backward on ``batch`` (model inputs, loss inputs, keyword inputs): adds the
        gradients to each parameter's ``.grad`` (a DTensor laid out like the parameter), as
        ``loss.backward()`` would; returns the loss (0-d tensor). With ``grad_accum=N`` the batch is
        split into N micro-batches along dim 0 and the gradients are reduced once."""
        values = self._batch(batch, kwargs)
        if self.options.grad_accum > 1:
            return self._backward_accumulated(values)
        loss, grads, norm = self._train_program("train", values)
        self.last_grad_norm = norm
        self._accumulate({fqn: self._stored(self._relayout(g, lay, self._storage[fqn], self._shapes[fqn]),
                                            self._storage[fqn], self._shapes[fqn])
                          for fqn, (g, lay) in grads.items()})
        return loss

    def _micro(self, values: list[Any]) -> list[list[Any]]:
        n = self.options.grad_accum
        for v in values:
            if v.dim() == 0 or v.shape[0] % n:
                raise ValueError(f"grad_accum={n} splits every input along dim 0, but an input has shape "
                                 f"{tuple(v.shape)}")
        pieces = [v.chunk(n, dim=0) if not _is_dtensor(v) else _dtensor_chunks(v, n) for v in values]
        return [[p[k] for p in pieces] for k in range(n)]

    def _backward_accumulated(self, values: list[Any]) -> Any:
        """N micro-batches through the program whose gradients stay unreduced (``P(sum)`` where the
        batch is split), summed locally, then one reduction per gradient; the loss and the
        gradients are the mean over micro-batches (one big batch, for a mean-reduced loss)."""
        n = self.options.grad_accum
        acc: dict[str, list[Any]] = {}
        losses = []
        for micro in self._micro(values):
            loss, grads, _ = self._train_program("train_partial", micro)
            losses.append(loss)
            for fqn, (g, lay) in grads.items():
                if fqn in acc:
                    acc[fqn][0] = acc[fqn][0] + g
                else:
                    acc[fqn] = [g.clone(), lay]
        def as_dtensor(fqn: str, g: Any, lay: Any) -> Any:
            return self._dtensor(g, lay, self._shapes[fqn])

        def stored(fqn: str, g: Any, lay: Any) -> Any:
            return self._stored(g, lay, self._shapes[fqn])

        def relayout(fqn: str, g: Any, src: Any, dst: Any) -> Any:
            return self._relayout(g, src, dst, self._shapes[fqn])

        mean = {fqn: (g / n, lay) for fqn, (g, lay) in acc.items()}
        if self._hetero is not None:   # within each group, then across the groups (spmdc.api.group_grads)
            if getattr(self, "_group_grads", None) is None:
                from spmdc.api.group_grads import GroupGradients

                self._group_grads = GroupGradients(self._hetero, self.comm, self._storage, self._shapes)
            reduced = {f: stored(f, g, self._storage[f])
                       for f, g in self._group_grads.reduce(mean, as_dtensor, relayout).items()}
        else:
            reduced = reduce_gradients(mean, self._storage, CountingComm(self.comm), as_dtensor, stored, relayout)
        if self.options.clip_grad_norm is not None:   # (a group's layouts without grp: it holds the whole gradient)
            own = 1 if self._hetero is not None else 0
            self.last_grad_norm = clip_grads_([(g, self._storage[f][own:]) for f, g in reduced.items()],
                                              self.options.clip_grad_norm, self.comm, self.group)
        self._accumulate(reduced)
        return torch.stack(losses).mean()

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
        lay = self._storage.get(fqn)
        return lay if lay is not None and _ragged(lay) else None

    def placements(self) -> dict[str, tuple[Any, ...]]:
        """Storage placements per parameter (spmdc placements)."""
        return dict(self._storage)

    # -- state --------------------------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, Any]:
        """Full tensors (CPU) under the model's own keys; a collective every rank calls."""
        out = {}
        for k, v in self.state_dict().items():
            lay = self._ragged_layout(k)
            full = self._full(v.detach(), lay, self._shapes[_canonical(self, k)]) if lay is not None else v.detach()
            out[k] = (full.full_tensor() if _is_dtensor(full) else full).cpu().clone()   # never a view
        return out

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Full tensors (cut to this rank's shards) or DTensors in any layout (redistributed), in
        place, so an optimizer's references stay valid."""
        state = state_dict
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
                        layout = self._storage[_canonical(self, k)]
                        target.to_local().copy_(self._cut(v, layout))
                else:
                    v = v.full_tensor() if _is_dtensor(v) else v
                    lay = self._ragged_layout(k)
                    if lay is not None and tuple(v.shape) == self._shapes[_canonical(self, k)]:
                        v = self._cut(v, lay)   # a full tensor (else: this rank's piece, as state_dict() gives)
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

        view = CheckpointView(self, self.optimizer, self._opts.can_train, self.plan_name, str(self.mesh),
                              self.device, group=self.group, write_group=self.group, read_group=self.group)
        if self._hetero is None:
            return view
        ragged = next((k for k, lay in self._storage.items() if _ragged(lay)), None)
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

        if self._hetero is not None:
            g = self._hetero.groups[self._hetero.group_of(dist.get_rank())]
            spec, own = MeshSpec(tuple(g.mesh.axis_names), tuple(g.mesh.shape), tuple(g.ranks)), 1
        else:
            spec, own = MeshSpec(tuple(self.mesh.axis_names), tuple(self.mesh.shape), tuple(self.members)), 0
        return {fqn: (spec, tuple(lay[own:]), tuple(self._shapes[fqn])) for fqn, lay in self._storage.items()}

    def state_pieces(self, name: str) -> dict[str, Any]:
        """This rank's piece of parameter ``name`` (``"param"``) and of each optimizer state entry
        (tensors laid out like the parameter: their local pieces; scalars such as ``step`` as they are)."""
        p = self.get_parameter(name)
        out = {"param": _local(p)}
        for k, v in (self.optimizer.state.get(p, {}) if self.optimizer is not None else {}).items():
            out[k] = v.to_local() if _is_dtensor(v) else v
        return out

    def full_state_tensor(self, name: str, slot: str = "param") -> Any:
        """The whole value of parameter ``name`` or of its optimizer tensor ``slot``; a collective
        over the module's mesh (device groups: over each group's, every rank getting it)."""
        fqn = _canonical(self, name)
        lay = tuple(self._storage[fqn][1:] if self._hetero is not None else self._storage[fqn])
        local = self.state_pieces(fqn)[slot]
        if all(isinstance(p, Replicate) for p in lay):
            return local.clone()
        return to_full(local, tuple(self._shapes[fqn]), lay, self.comm)

    def load_state_piece(self, name: str, slot: str, value: Any, *, full: bool = False) -> None:
        """Set this rank's piece of parameter ``name`` (``slot="param"``, in place) or of its
        optimizer state entry ``slot`` from ``value``: this rank's piece, or with ``full=True`` the
        whole tensor (cut here). A non-tensor or 0-d ``value`` of an optimizer slot (``step``) is
        stored as it is."""
        fqn = _canonical(self, name)
        p, lay, shape = self.get_parameter(fqn), self._storage[fqn], self._shapes[fqn]
        if slot != "param" and not (torch.is_tensor(value) and (full or value.dim() > 0)):
            self.optimizer.state.setdefault(p, {})[slot] = value
            return
        piece = self._cut(value, lay) if full else value.to(self.device)
        with torch.no_grad():
            if slot == "param":
                _local(p).copy_(piece)
            else:
                self.optimizer.state.setdefault(p, {})[slot] = self._stored(piece.clone(), lay, shape)

    def switch(self, plan: Any, mesh: Any = None, ranks: Sequence[int] | None = None, lost: Sequence[int] = (),
               **options: Any) -> Any:
        """This module's training state (parameters, optimizer state) moved to a new plan and mesh,
        device groups or pipeline stages — by one batched send/recv, without a checkpoint; every rank
        of the job calls it. Returns the new module (None on ranks outside ``ranks``, which then
        leave); see :mod:`spmdc.api.switch`."""
        from spmdc.api.switch import switch

        return switch(self, plan, mesh=mesh, ranks=ranks, lost=lost, **options)

    @property
    def eager_trace(self) -> list[str]:
        """``spmdc.eager(..., trace=True)``: the last call's ops, each with its operands' layouts,
        its results' layouts and the collectives it issued (empty otherwise)."""
        return list(getattr(getattr(self, "_last_run", None), "last_trace", []))

    @property
    def programs(self) -> dict[str, RankProgram]:
        """This rank's compiled programs, latest per kind (``forward``, ``train``): IR, code, layouts."""
        out = {}
        for (kind, _mode, _sig), run in self._runners.items():
            out["train" if kind.startswith("train") else kind] = run.program
        return out

    def extra_repr(self) -> str:
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


def _ragged(layout: Sequence[Any]) -> bool:
    return any(isinstance(p, RaggedShard) for p in layout)


def _whole_or_nothing(layout: Sequence[Any]) -> bool:
    """Whether every rank holds the whole tensor or none of it: replicated but for at most one
    ragged shard that gives its whole dim to one rank."""
    ragged = [p for p in layout if isinstance(p, RaggedShard)]
    return all(isinstance(p, (Replicate, RaggedShard)) for p in layout) and len(ragged) <= 1 \
        and all(sum(1 for u in p.units if u) <= 1 for p in ragged)


def _local(p: Any) -> Any:
    """A stored parameter's local piece (a DTensor's local tensor, or the plain piece itself)."""
    return p.to_local() if _is_dtensor(p) else p.detach()


def _is_dtensor(x: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(x, DTensor)


def _dtensor_chunks(x: Any, n: int) -> list[Any]:
    full = x.full_tensor()
    return [c for c in full.chunk(n, dim=0)]


def _canonical(cm: CompiledModule, key: str) -> str:
    p = cm.get_parameter(key)
    return next(n for n, q in cm.named_parameters() if q is p)
