"""The module-like object :func:`spmdc.compile` returns: call it like the model, ``step`` trains.

    cm = spmdc.compile(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp",
                       train=True, loss_fn=F.mse_loss, loss_inputs=(y,), optimizer=("adamw", {"lr": 1e-3}))
    out = cm(x)                 # DTensor laid out as the program's output (cm(x, full=True): a tensor)
    loss = cm.step(x, y)        # forward + backward + optimizer update; 0-d tensor
    cm.named_parameters()       # this rank's shards as DTensors
    cm.state_dict()             # full tensors (gathered; every rank gets them)
    cm.programs["train"].source # the generated code this rank runs

Each rank cuts its shard of every parameter out of its own copy of ``model`` (ranks must build
the model with the same initialization, e.g. the same seed; both runs then start identical)
and keeps it in the storage layout; programs run through :class:`~spmdc.runtime.executor.RankRunner`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from spmdc.compiler import Dump, RankProgram, compile_rank, default_target, split_example_inputs
from spmdc.dialects.shard import Partial, Replicate
from spmdc.runtime.compile_shared import compile_shared
from spmdc.runtime.dtensors import contiguous_stride, dtensor_placements
from spmdc.runtime.executor import RankRunner, local_piece, to_full
from spmdc.runtime.optimizers import make_optimizer
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Plan


class CompiledModule:
    """The result of :func:`compile`: call it like the model; ``step`` trains (see module doc)."""

    def __init__(self, model: Any, example_inputs: Any, *, mesh: Mesh | str | dict, plan: str | Plan = "fsdp",
                 train: bool = False, loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                 optimizer: Any = None, device_mesh: Any = None, device: str | None = None,
                 target: str | None = None, bucket: bool = False, dump: Dump | None = None,
                 example_kwargs: dict[str, Any] | None = None, rng: str = "eager",
                 checkpoint: str | None = None):
        if target == "triton":  # on CPU, interpret kernels (best before anything imports triton)
            from spmdc.codegen.cache import prepare_triton

            prepare_triton()
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("spmdc.compile needs an initialized torch.distributed job "
                               "(torchrun + dist.init_process_group)")
        if not isinstance(mesh, Mesh):  # "dp=2,tp=2" or {"dp": 2, "tp": 2}
            mesh = Mesh.parse(mesh) if isinstance(mesh, str) else Mesh(mesh)
        if dist.get_world_size() != mesh.size:
            raise ValueError(f"mesh {mesh} has {mesh.size} devices but the job has {dist.get_world_size()} ranks")
        if device is None:
            device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        self.mesh, self.train, self.rank = mesh, train, dist.get_rank()
        if device_mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            device_mesh = init_device_mesh(device, mesh.shape, mesh_dim_names=mesh.axis_names)
        self.device_mesh = device_mesh
        self.device = torch.device(device, torch.cuda.current_device()) if device == "cuda" else torch.device(device)
        from spmdc.runtime.collectives import Collectives

        self.comm = Collectives(device_mesh)

        model_args, loss_args = split_example_inputs(example_inputs, loss_fn, loss_inputs)
        kwargs = dict(example_kwargs or {})
        self._kw_names = list(kwargs)   # keyword inputs: the programs' last inputs, in this order
        jobs = [dict(inputs=model_args, train=False, bucket=bucket, dump=dump, kwargs=kwargs, rng=rng)]
        if train:
            jobs.append(dict(inputs=model_args, train=True, loss_fn=loss_fn, loss_inputs=loss_args, bucket=bucket,
                             dump=dump, kwargs=kwargs, rng=rng, checkpoint=checkpoint))
        steps = compile_shared(model, jobs, mesh, plan)
        self.target = target or default_target()
        self._fwd = RankRunner(compile_rank(steps[0], self.rank, self.target, dump), self.comm, device=self.device)
        self._train = (RankRunner(compile_rank(steps[1], self.rank, self.target, dump), self.comm, device=self.device)
                       if train else None)
        storage = self._train or self._fwd
        self.plan_name = storage.program.step.plan_name

        # parameters: this rank's shard of the single-device values, stored in the storage layout
        named = dict(model.named_parameters(remove_duplicate=False))
        named.update(dict(model.named_buffers(remove_duplicate=False)))
        self._param_names = [n for n, _ in model.named_parameters()]  # canonical (tied: first name)
        self._state_keys = list(model.state_dict().keys())
        self._aliases = {}  # state-dict key -> canonical parameter name
        by_id = {id(p): n for n, p in model.named_parameters()}
        for n, p in model.named_parameters(remove_duplicate=False):
            self._aliases[n] = by_id[id(p)]
        self._local: dict[str, Any] = {}
        self._layout: dict[str, tuple[Any, ...]] = {}
        self._shape: dict[str, tuple[int, ...]] = {}
        self._buffers: dict[str, Any] = {}
        for prog in (storage.program, self._fwd.program):
            for i, kind in enumerate(prog.step.arg_kinds):
                if not kind.startswith("param:"):
                    continue
                fqn = kind.split(":", 1)[1]
                if fqn in self._local or fqn in self._buffers:
                    continue
                if fqn not in named:
                    raise KeyError(f"compiled program takes '{fqn}' but the model has no such parameter or buffer")
                full = named[fqn].detach()
                if i in prog.step.buffers:
                    self._buffers[fqn] = full.to(self.device).clone()
                    continue
                layout = prog.arg_layouts[i]
                if any(isinstance(p, Partial) for p in layout):
                    raise ValueError(f"parameter '{fqn}' is stored Partial {layout}; parameters must be S or R")
                self._layout[fqn], self._shape[fqn] = layout, tuple(full.shape)
                self._local[fqn] = self._cut(full, layout)
        self.optimizer = self.set_optimizer(optimizer) if train else None
        self.last_grads: dict[str, Any] = {}
        self._check_grad_layouts()

    # -- tensors in and out ----------------------------------------------------------------------
    def _cut(self, full: Any, layout: Sequence[Any]) -> Any:
        return local_piece(full.detach(), layout, self.mesh, self.rank).to(self.device).clone()

    def _local_arg(self, x: Any, layout: Sequence[Any], shape: tuple[int, ...], what: str) -> Any:
        import torch
        from torch.distributed.tensor import DTensor

        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{what}: expected a tensor or DTensor, got {type(x).__name__}")
        if tuple(x.shape) != tuple(shape):
            raise ValueError(f"{what}: shape {tuple(x.shape)} differs from the compiled shape {tuple(shape)}")
        if isinstance(x, DTensor):
            return x.redistribute(self.device_mesh, dtensor_placements(layout)).to_local().to(self.device)
        return self._cut(x, layout)

    def _dtensor(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        from torch.distributed.tensor import DTensor

        return DTensor.from_local(local, self.device_mesh, dtensor_placements(layout), run_check=False,
                                  shape=tuple(shape), stride=contiguous_stride(shape))

    def _relayout(self, local: Any, src: Sequence[Any], dst: Sequence[Any], shape: tuple[int, ...]) -> Any:
        if tuple(src) == tuple(dst):
            return local
        return self._dtensor(local, src, shape).redistribute(self.device_mesh, dtensor_placements(dst)).to_local()

    def _full(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        if all(isinstance(p, Replicate) for p in layout):
            return local.clone()
        return to_full(local, tuple(shape), tuple(layout), self.comm)

    def _with_kwargs(self, inputs: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
        """Positional inputs, then the keyword inputs in the order they were compiled with."""
        if set(kwargs) != set(self._kw_names):
            raise TypeError(f"the compiled program takes keyword inputs {self._kw_names or 'none'}, "
                            f"got {sorted(kwargs) or 'none'}")
        return list(inputs) + [kwargs[n] for n in self._kw_names]

    def _args(self, run: RankRunner, inputs: Sequence[Any]) -> list[Any]:
        prog = run.program
        args, it = [], iter(inputs)
        n_inputs = sum(1 for k in prog.step.arg_kinds if k.startswith("input:"))
        if len(inputs) != n_inputs:
            raise TypeError(f"the compiled program takes {n_inputs} input tensors, got {len(inputs)}")
        for i, kind in enumerate(prog.step.arg_kinds):
            name = kind.split(":", 1)[1]
            if kind.startswith("input:"):
                args.append(self._local_arg(next(it), prog.arg_layouts[i], prog.step.arg_shapes[i], f"input '{name}'"))
            elif name in self._buffers:
                args.append(self._buffers[name])
            else:
                args.append(self._relayout(self._local[name], self._layout[name], prog.arg_layouts[i],
                                           self._shape[name]))
        return args

    # -- the model-like surface ----------------------------------------------------------------------
    def __call__(self, *inputs: Any, full: bool = False, **kwargs: Any) -> Any:
        """Forward: inputs as full tensors or DTensors; outputs as DTensors (``full=True``: tensors)."""
        run = self._fwd
        outs = run(self._args(run, self._with_kwargs(inputs, kwargs)))
        res = []
        for out, layout, shape in zip(outs, run.program.res_layouts, run.program.step.res_shapes):
            res.append(self._full(out, layout, shape) if full else self._dtensor(out, layout, shape))
        return res[0] if len(res) == 1 else tuple(res)

    forward = __call__

    def step(self, *batch: Any, **kwargs: Any) -> Any:
        """One training step on ``batch`` (model inputs then loss inputs, then keyword inputs such
        as ``labels=``): returns the loss (0-d tensor)."""
        if self._train is None:
            raise RuntimeError("step() needs spmdc.compile(..., train=True)")
        if len(batch) == 2 and all(isinstance(b, (tuple, list)) for b in batch):
            batch = tuple(batch[0]) + tuple(batch[1])
        run = self._train
        prog = run.program
        outs = run(self._args(run, self._with_kwargs(batch, kwargs)))
        loss, grads = None, {}
        for i, (kind, out) in enumerate(zip(prog.step.result_kinds, outs)):
            if kind == "loss":
                loss = self._full(out, prog.res_layouts[i], prog.step.res_shapes[i])
            elif kind.startswith("grad:"):
                fqn = kind.split(":", 1)[1]
                layout = prog.res_layouts[i]
                assert not any(isinstance(p, Partial) for p in layout), (
                    f"gradient of '{fqn}' is stored Partial {layout}; stored gradients must be S or R")
                grads[fqn] = self._relayout(out, layout, self._layout[fqn], self._shape[fqn])
        self.last_grads = grads
        if self.optimizer is not None:
            for fqn, t in self._local.items():
                t.grad = grads.get(fqn)
            self.optimizer.step()
            for t in self._local.values():
                t.grad = None
        return loss

    def set_optimizer(self, optimizer: Any) -> Any:
        """Replace the optimizer (fresh state) over this rank's shards; returns it."""
        self.optimizer = make_optimizer(optimizer, [self._local[n] for n in self._param_names if n in self._local])
        return self.optimizer

    def _check_grad_layouts(self) -> None:
        if self._train is None:
            return
        prog = self._train.program
        for kind, layout in zip(prog.step.result_kinds, prog.res_layouts):
            if kind.startswith("grad:") and any(isinstance(p, Partial) for p in layout):
                raise AssertionError(f"gradient of '{kind[5:]}' is stored Partial {layout}; "
                                     "stored gradients must be S or R")

    def named_parameters(self) -> Iterator[tuple[str, Any]]:
        """This rank's parameter shards as DTensors (global shape, storage placements)."""
        for n in self._param_names:
            if n in self._local:
                yield n, self._dtensor(self._local[n], self._layout[n], self._shape[n])

    def named_grads(self) -> Iterator[tuple[str, Any]]:
        """Gradients of the last :meth:`step` as DTensors, laid out like their parameters."""
        for n in self._param_names:
            if n in self.last_grads:
                yield n, self._dtensor(self.last_grads[n], self._layout[n], self._shape[n])

    def parameters(self) -> Iterator[Any]:
        for _, p in self.named_parameters():
            yield p

    def placements(self) -> dict[str, tuple[Any, ...]]:
        """Storage placements per parameter (spmdc placements)."""
        return dict(self._layout)

    def state_dict(self) -> dict[str, Any]:
        """Full tensors under the model's own keys (gathered on every rank; a collective)."""
        full = {n: self._full(self._local[n], self._layout[n], self._shape[n]).cpu() for n in self._local}
        out = {}
        for k in self._state_keys:
            name = self._aliases.get(k, k)
            if name in full:
                out[k] = full[name]
            elif name in self._buffers:
                out[k] = self._buffers[name].cpu().clone()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take full tensors (model keys) and keep this rank's shards (in place: optimizer state stays)."""
        import torch

        with torch.no_grad():
            for k, v in state.items():
                name = self._aliases.get(k, k)
                if name in self._local:
                    self._local[name].copy_(self._cut(v, self._layout[name]))
                elif name in self._buffers:
                    self._buffers[name].copy_(v)

    @property
    def programs(self) -> dict[str, RankProgram]:
        """This rank's compiled programs (``forward``, and ``train`` when training): IR, code, layouts."""
        out = {"forward": self._fwd.program}
        if self._train is not None:
            out["train"] = self._train.program
        return out

    def __repr__(self) -> str:
        return (f"CompiledModule(mesh={self.mesh}, plan={self.plan_name!r}, train={self.train}, "
                f"params={len(self._local)}, rank={self.rank})")
