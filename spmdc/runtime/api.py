"""``spmdc.compile``: a model compiled for a mesh, called like the model inside a torch.distributed job.

    # every rank (torchrun, one process per rank), after dist.init_process_group(...)
    cm = spmdc.compile(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp",
                       train=True, loss_fn=F.mse_loss, loss_inputs=(y,),
                       optimizer=("adamw", {"lr": 1e-3}))
    out = cm(x)                 # DTensor laid out as the program's output (cm(x, full=True): a tensor)
    loss = cm.step(x, y)        # forward + backward + optimizer update; 0-d tensor
    cm.named_parameters()       # this rank's shards as DTensors
    cm.state_dict()             # full tensors (gathered; every rank gets them)

Compilation (capture + plan + global sharding passes) runs once per program (forward on rank 0,
training step on rank 1) and is broadcast, so every rank partitions the very same global program; each rank then cuts its
shard of every parameter out of its own copy of ``model`` (ranks must build the model with
the same initialization, e.g. the same seed; both runs then start identical).

Optimizers run on the local shards. A gradient arrives in its parameter's storage layout, so
an elementwise optimizer updates each shard on its own and its state is sharded like the
parameter. ``optimizer`` is one of

* ``("sgd", {"lr": 0.1, "momentum": 0.9})`` or ``("adamw", {"lr": 1e-3, ...})`` (or just the name),
* :class:`Optimizer` (``Optimizer("adamw", lr=1e-3)``),
* a callable ``factory(local_params) -> torch.optim.Optimizer``; it must be elementwise
  (SGD, Adam, AdamW, RMSprop, ...), since each rank only sees its shards.

The named forms build ``torch.optim.SGD`` / ``torch.optim.AdamW`` over the local shards, so
formulas and defaults are torch's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from spmdc.dialects.shard import Partial, Replicate, Shard
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Plan

OPTIMIZERS = ("sgd", "adamw")


@dataclass
class Optimizer:
    """A named optimizer and its torch.optim options: ``Optimizer("sgd", lr=0.1, momentum=0.9)``."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, options: dict[str, Any] | None = None, **kwargs: Any):
        self.name = name.lower()
        self.options = {**(options or {}), **kwargs}
        if self.name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer '{name}' (choices: {', '.join(OPTIMIZERS)}, "
                             "or pass a factory(params) -> torch.optim.Optimizer)")

    def build(self, params: list[Any]) -> Any:
        import torch

        cls = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[self.name]
        return cls(params, **self.options)


def make_optimizer(spec: Any, params: list[Any]) -> Any:
    """``spec`` (a name, ``(name, options)``, :class:`Optimizer` or factory) over ``params``."""
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = Optimizer(spec)
    elif isinstance(spec, (tuple, list)):
        if len(spec) != 2 or not isinstance(spec[0], str):
            raise TypeError(f"optimizer tuple must be (name, options), got {spec!r}")
        spec = Optimizer(spec[0], dict(spec[1] or {}))
    if isinstance(spec, Optimizer):
        return spec.build(params)
    if callable(spec):
        return spec(params)
    raise TypeError(f"optimizer must be a name, (name, options), spmdc Optimizer or a factory, got {spec!r}")


# -- placements: spmdc <-> DTensor ------------------------------------------------------------------

def dtensor_placements(layout: Sequence[Any]) -> tuple[Any, ...]:
    from torch.distributed.tensor import Partial as TPartial
    from torch.distributed.tensor import Replicate as TReplicate
    from torch.distributed.tensor import Shard as TShard

    out = []
    for p in layout:
        if isinstance(p, Shard):
            out.append(TShard(p.dim))
        elif isinstance(p, Partial):
            out.append(TPartial(p.op))
        elif isinstance(p, Replicate):
            out.append(TReplicate())
        else:
            raise TypeError(f"placement {p} has no DTensor equivalent")
    return tuple(out)


def _contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    stride, acc = [], 1
    for s in reversed(tuple(shape)):
        stride.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(stride))


def _split_example(example_inputs: Any, loss_fn: Any, loss_inputs: Sequence[Any]) -> tuple[tuple, tuple]:
    from spmdc.frontend.capture import _split_inputs

    model_args, extra = _split_inputs(example_inputs, loss_fn)
    return model_args, tuple(loss_inputs) + extra


# -- one compiled program on this rank --------------------------------------------------------------

class _RankProgram:
    """A :class:`CompiledStep` partitioned for this rank, with its layouts and generated code."""

    def __init__(self, step: Any, rank: int, target: str = "torch"):
        from spmdc.codegen.cache import load_program
        from spmdc.dialects.func import FuncOp
        from spmdc.ir.parser import parse_module
        from spmdc.runtime.engine import prepare_rank_module
        from spmdc.sharding.layouts import SHARDING

        self.step = step
        self.target = target
        module, self.kernel_stats = prepare_rank_module(step, rank, target)
        func = next(op for op in module.body.ops if isinstance(op, FuncOp))
        gmod = parse_module(step.global_ir, "<global>")
        gfunc = next(op for op in gmod.body.ops if isinstance(op, FuncOp))

        def lay(attrs: Any, n: int) -> tuple[Any, ...]:
            s = attrs.get(SHARDING)
            return tuple(s.placements) if s is not None else tuple(Replicate() for _ in range(n))

        n_axes = len(step.mesh.axes)
        self.arg_shapes = [tuple(a.type.shape) for a in gfunc.args]  # type: ignore[attr-defined]
        self.res_shapes = [tuple(t.shape) for t in gfunc.function_type.results]  # type: ignore[attr-defined]
        self.arg_layouts = [lay(func.arg_attrs(i), n_axes) for i in range(len(func.args))]  # type: ignore[attr-defined]
        self.res_layouts = [lay(func.res_attrs(i), n_axes) for i in range(len(self.res_shapes))]  # type: ignore[attr-defined]
        self.buffers = {i for i in range(len(gfunc.args)) if "spmdc.buffer" in gfunc.arg_attrs(i)}  # type: ignore[attr-defined]
        self.fn = load_program(module, "main", target=target)[0]
        self.comm_ops = sum(1 for op in module.walk() if op.name.startswith("comm."))


def _compile_shared(model: Any, jobs: list[dict[str, Any]], mesh: Mesh, plan: Any) -> list[Any]:
    """Compile each job (``compile_step`` keyword arguments) once and share it with every rank.

    Job ``j`` compiles on rank ``j % world`` (forward and training programs in parallel), and the
    CompiledStep, without its tensors, is broadcast from there; one failure fails every rank.
    """
    import torch.distributed as dist

    from spmdc.runtime.engine import compile_step

    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    boxes: list[list[Any]] = [[None] for _ in jobs]
    for j, job in enumerate(jobs):
        if j % world == rank:
            try:
                step = compile_step(model, mesh=mesh, plan=plan, **job)
                step.arguments = []  # every rank takes the values from its own model
                boxes[j][0] = step
            except Exception as e:  # tell the other ranks instead of leaving them waiting
                boxes[j][0] = e
    out = []
    for j, box in enumerate(boxes):
        if world > 1:
            dist.broadcast_object_list(box, src=j % world)
        if isinstance(box[0], BaseException):
            raise RuntimeError(f"spmdc.compile failed on rank {j % world}: {box[0]}") from box[0]
        out.append(box[0])
    return out


class CompiledModule:
    """The result of :func:`compile`: call it like the model; ``step`` trains (see module doc)."""

    def __init__(self, model: Any, example_inputs: Any, *, mesh: Mesh | str | dict, plan: str | Plan = "fsdp",
                 train: bool = False, loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                 optimizer: Any = None, device_mesh: Any = None, device: str | None = None,
                 target: str | None = None, bucket: bool = False):
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

        model_args, loss_args = _split_example(example_inputs, loss_fn, loss_inputs)
        jobs = [dict(inputs=model_args, train=False, bucket=bucket)]
        if train:
            jobs.append(dict(inputs=model_args, train=True, loss_fn=loss_fn, loss_inputs=loss_args, bucket=bucket))
        steps = _compile_shared(model, jobs, mesh, plan)
        if target is None:
            from spmdc.runtime.engine import default_target

            target = default_target()
        self.target = target
        self._fwd = _RankProgram(steps[0], self.rank, target)
        self._train = _RankProgram(steps[1], self.rank, target) if train else None
        storage = self._train or self._fwd
        self.plan_name = storage.step.plan_name

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
        for prog in (storage, self._fwd):
            for i, kind in enumerate(prog.step.arg_kinds):
                if not kind.startswith("param:"):
                    continue
                fqn = kind.split(":", 1)[1]
                if fqn in self._local or fqn in self._buffers:
                    continue
                if fqn not in named:
                    raise KeyError(f"compiled program takes '{fqn}' but the model has no such parameter or buffer")
                full = named[fqn].detach()
                if i in prog.buffers:
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
        from spmdc.runtime.engine import local_piece

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
                                  shape=tuple(shape), stride=_contiguous_stride(shape))

    def _relayout(self, local: Any, src: Sequence[Any], dst: Sequence[Any], shape: tuple[int, ...]) -> Any:
        if tuple(src) == tuple(dst):
            return local
        return self._dtensor(local, src, shape).redistribute(self.device_mesh, dtensor_placements(dst)).to_local()

    def _full(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        from spmdc.runtime.engine import to_full

        if all(isinstance(p, Replicate) for p in layout):
            return local.clone()
        return to_full(local, tuple(shape), tuple(layout), self.comm)

    def _args(self, prog: _RankProgram, inputs: Sequence[Any]) -> list[Any]:
        args, it = [], iter(inputs)
        n_inputs = sum(1 for k in prog.step.arg_kinds if k.startswith("input:"))
        if len(inputs) != n_inputs:
            raise TypeError(f"the compiled program takes {n_inputs} input tensors, got {len(inputs)}")
        for i, kind in enumerate(prog.step.arg_kinds):
            name = kind.split(":", 1)[1]
            if kind.startswith("input:"):
                args.append(self._local_arg(next(it), prog.arg_layouts[i], prog.arg_shapes[i], f"input '{name}'"))
            elif name in self._buffers:
                args.append(self._buffers[name])
            else:
                args.append(self._relayout(self._local[name], self._layout[name], prog.arg_layouts[i],
                                           self._shape[name]))
        return args

    def _run(self, prog: _RankProgram, args: list[Any]) -> list[Any]:
        import torch

        from spmdc.runtime.collectives import CountingComm

        with torch.no_grad():
            return list(prog.fn(args, CountingComm(self.comm)))

    # -- the model-like surface ----------------------------------------------------------------------
    def __call__(self, *inputs: Any, full: bool = False) -> Any:
        """Forward: inputs as full tensors or DTensors; outputs as DTensors (``full=True``: tensors)."""
        prog = self._fwd
        outs = self._run(prog, self._args(prog, inputs))
        res = []
        for out, layout, shape in zip(outs, prog.res_layouts, prog.res_shapes):
            res.append(self._full(out, layout, shape) if full else self._dtensor(out, layout, shape))
        return res[0] if len(res) == 1 else tuple(res)

    forward = __call__

    def step(self, *batch: Any) -> Any:
        """One training step on ``batch`` (model inputs then loss inputs): returns the loss (0-d tensor)."""
        if self._train is None:
            raise RuntimeError("step() needs spmdc.compile(..., train=True)")
        if len(batch) == 2 and all(isinstance(b, (tuple, list)) for b in batch):
            batch = tuple(batch[0]) + tuple(batch[1])
        prog = self._train
        outs = self._run(prog, self._args(prog, batch))
        loss, grads = None, {}
        for i, (kind, out) in enumerate(zip(prog.step.result_kinds, outs)):
            if kind == "loss":
                loss = self._full(out, prog.res_layouts[i], prog.res_shapes[i])
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
        for kind, layout in zip(self._train.step.result_kinds, self._train.res_layouts):
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

    def __repr__(self) -> str:
        return (f"CompiledModule(mesh={self.mesh}, plan={self.plan_name!r}, train={self.train}, "
                f"params={len(self._local)}, rank={self.rank})")


def compile(model: Any, example_inputs: Any, *, mesh: Mesh | str | dict, plan: str | Plan = "fsdp", train: bool = False,
            loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (), optimizer: Any = None,
            device_mesh: Any = None, device: str | None = None, target: str | None = None,
            bucket: bool = False) -> CompiledModule:
    """Compile ``model`` for ``mesh`` under ``plan``; call on every rank of an initialized job.

    ``example_inputs``: the model's positional inputs (or ``((inputs...), (loss inputs...))``);
    ``loss_fn(output, *loss_inputs)`` gives the loss for ``train=True``; ``optimizer`` see the
    module doc. ``device_mesh`` reuses an existing DeviceMesh (axis names must match ``mesh``).
    ``target``: ``"torch"`` (aten calls) or ``"triton"`` (fused regions as Triton kernels; on
    CPU under the Triton interpreter); default Triton on GPUs, aten on CPUs. ``bucket``: one
    all-gather / reduce-scatter per model block instead of one per parameter (SimpleFSDP).
    """
    return CompiledModule(model, example_inputs, mesh=mesh, plan=plan, train=train, loss_fn=loss_fn,
                          loss_inputs=loss_inputs, optimizer=optimizer, device_mesh=device_mesh, device=device,
                          target=target, bucket=bucket)
