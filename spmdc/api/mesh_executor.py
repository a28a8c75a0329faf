"""The one-mesh executor of a compiled module: one mesh, and device groups (a plan of the same kind).

    cm = spmdc.compile(model, (x,), mesh="dp=2,tp=2", plan="fsdp+tp", train=True, ...)
    cm.forward(x)     # -> MeshExecutor.forward: inputs cut to this rank's pieces, the program run, DTensors out
    cm.backward(x, y) # -> MeshExecutor.backward: the training program, gradients into p.grad

:class:`~spmdc.api.compiled_module.CompiledModule` is the one module of every layout kind, assembled
from parts: a :class:`~spmdc.api.program_cache.ProgramCache` (programs per kind, module modes and
input shapes), a :class:`~spmdc.api.parameter_store.ParameterStore` (storage layouts, moves between
layouts, the state interface) and an executor per layout kind — this one for one mesh and device
groups, :class:`~spmdc.api.pipeline_executor.PipelineExecutor` for pipeline stages. The executor
turns the user's tensors into a program's arguments (parameters relaid out from their storage
layouts, inputs cut or redistributed as the plan's input layouts say, checked once per program
to be the same where they must be), runs the program, and turns its results into outputs,
losses and gradients in the parameters' storage layouts (``grad_accum``: micro-batches through
the program that leaves gradients unreduced, one reduction per gradient). It compiles through
the module's program cache, whose ``build`` is :meth:`MeshExecutor._build_programs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch

from spmdc.api.compile_shared import compile_rank_shared, compile_shared
from spmdc.api.parameter_store import is_dtensor as _is_dtensor
from spmdc.api.parameter_store import local_of as _local
from spmdc.dialects.shard import Replicate
from spmdc.frontend.deferred_init import fake_parameters
from spmdc.frontend.export import module_flags
from spmdc.runtime.collectives import CountingComm
from spmdc.runtime.executor import RankRunner
from spmdc.runtime.gradients import clip_grads_, reduce_gradients


class MeshExecutor:
    """Runs a one-mesh or device-group module's programs on this rank (see the module doc)."""

    def __init__(self, m: Any):
        self.m = m                      # the CompiledModule: its parameters, store, programs, options
        self.last_grad_norm: Any = None
        self.last_run: Any = None       # the last program run (its eager trace)
        self._group_grads: Any = None   # device groups with grad_accum: the two-level reduction
        self.saved_vjp: dict[tuple, Any] = {}   # cm(x) under autograd, saved activations: the vjp runner per call
        #                                         signature (spmdc.api.autograd_call.Call._forward_half)

    def _build_programs(self, jobs: list[dict[str, Any]]) -> list[Any]:
        """This layout kind's compile (the program cache's ``build``): one global program per job
        captured and compiled together (one mesh, or every device group's), then this rank's
        program and its runner — the generated code, or the op-by-op eager runner."""
        model, opts = self.m._model, self.m.options   # captured with every module in the mode the user set
        with fake_parameters(model) if self.m._tape is not None else nullcontext():
            if self.m._hetero is not None:
                from spmdc.api.compile_shared import compile_groups_shared

                steps = compile_groups_shared(model, jobs, self.m._hetero)
            else:
                steps = compile_shared(model, jobs, self.m.mesh, self.m._opts.plan, self.m.group, self.m.members)
        runners: list[Any] = []
        for step in steps:
            if opts.execution == "eager":
                from spmdc.api.eager import EagerRunner, eager_program

                runners.append(EagerRunner(eager_program(step, self.m.rank), self.m.comm, device=self.m.device,
                                           hints=opts.eager_hints, trace=opts.eager_trace))
                continue
            prog = compile_rank_shared(step, self.m.rank, self.m.target, self.m._opts.dump,
                                       ranks=self._ranks(), group=self.m.group)
            if self.m._hetero is not None:
                self.m.comm.register(prog.module)   # its cross-group subgroups (collective)
            runners.append(RankRunner(prog, self.m.comm, device=self.m.device))
        return runners

    def _ranks(self) -> list[tuple[int, int]]:
        """``(index on the program's mesh, job rank)`` of every rank running this rank's programs:
        the mesh's, or this rank's device group's (on its virtual mesh)."""
        import torch.distributed as dist

        hetero = self.m._hetero
        if hetero is None:
            return list(enumerate(self.m.members))
        g = hetero.group_of(dist.get_rank())
        return [(hetero.virtual_rank(g, r), r) for r in hetero.groups[g].ranks]

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
            if self.m._hetero is not None:
                x = x.full_tensor()   # a DTensor on some group's mesh: the global value
            else:
                return x.redistribute(self.m.device_mesh, self.m._store.dt(layout)).to_local().to(self.m.device)
        return self.m._store.cut(x, layout)

    def _check_kwargs(self, kwargs: dict[str, Any]) -> None:
        if set(kwargs) != set(self.m._kw_names):
            raise TypeError(f"the compiled program takes keyword inputs {self.m._kw_names or 'none'}, "
                            f"got {sorted(kwargs) or 'none'}")

    def _inputs(self, tensors: Sequence[Any], kwargs: dict[str, Any], kind: str) -> list[Any]:
        """Positional inputs then keyword inputs (compiled order), as global tensors or DTensors."""
        self._check_kwargs(kwargs)
        values = list(tensors) + [kwargs[n] for n in self.m._kw_names]
        for i, v in enumerate(values):
            self._global(v, f"input #{i}")
        local = self.m.__dict__.get("_local_batches")
        if local is not None:   # device groups, inputs="local": the replicas' pieces make the global batch
            values = local.assemble(values, [f"input #{i}" for i in range(len(values))], self.m.device)
        self._check_inputs(kind, values)
        if self.m.options.inputs == "local" and local is None:
            values = self._from_local(values, kind)
        return values

    def _input_specs(self, kind: str, n: int | None = None) -> list[tuple[str, tuple[Any, ...]]]:
        """(name, layout) of each input of ``kind``'s programs (any program of a kind has the same
        plan layouts), after checking that ``n`` inputs were given (unless None)."""
        runner = self.m._programs.first(kind)
        prog = runner.program
        at = [i for i, k in enumerate(prog.step.arg_kinds) if k.startswith("input:")]
        specs = [(f"input #{j} ('{prog.step.arg_kinds[i][6:]}')", tuple(prog.arg_layouts[i])) for j, i in enumerate(at)]
        if n is not None and len(specs) != n:
            raise TypeError(f"the compiled program takes {len(specs)} input tensors, got {n}")
        return specs

    def _check_inputs(self, kind: str, values: list[Any]) -> None:
        """On the first call of each program (per kind, mode and input shapes): the inputs are the
        same on the ranks that must pass the same tensor — one checksum collective, then nothing."""
        check = self.m._input_check
        if not check.enabled:
            return
        key = (kind, module_flags(self.m._model), tuple((tuple(v.shape), str(v.dtype), _is_dtensor(v))
                                                       for v in values))
        if key in check.seen:
            return
        specs = self._input_specs(kind, len(values))
        check(key, values, [n for n, _ in specs], [lay for _, lay in specs])

    def _from_local(self, values: list[Any], kind: str) -> list[Any]:
        """``inputs="local"``: each tensor is this rank's piece of the global input, split like the
        plan's input layout (a DistributedSampler's batch: even pieces along the batch dim)."""
        from torch.distributed.tensor import DTensor

        layouts = [lay for _, lay in self._input_specs(kind, len(values))]
        return [v if isinstance(v, DTensor) else
                DTensor.from_local(v.to(self.m.device), self.m.device_mesh, self.m._store.dt(lay), run_check=False)
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
                    v = next(it)   # (None: given when a suspended program resumes, spmdc.runtime.suspended)
                    args.append(None if v is None else self._local_arg(v, prog.arg_layouts[i], prog.step.arg_shapes[i],
                                                                       f"input '{name}'"))
                elif i in prog.step.buffers:
                    args.append(self.m.get_buffer(name))
                else:
                    p = self.m.get_parameter(name)
                    args.append(self.m._store.relayout(_local(p), self.m._store.storage[name], prog.arg_layouts[i],
                                               self.m._store.shapes[name]))
        return args

    # -- running ----------------------------------------------------------------------------------
    def forward(self, *inputs: Any, full: bool = False, **kwargs: Any) -> Any:
        """Inputs as tensors or DTensors; outputs as the ``outputs`` option says (``full=True``:
        whole tensors). Under autograd (grad mode on, a parameter or an input requiring grad)
        the outputs carry a ``grad_fn`` whose backward runs the vjp program
        (:mod:`spmdc.api.autograd_call`); otherwise only the forward program runs."""
        from spmdc.api.autograd_call import Call, CompiledCall, needs_autograd

        self._check_kwargs(kwargs)
        forms = self._outputs_form("full" if full else self.m.options.resolved_outputs(), inputs, kwargs)
        flat = list(inputs) + [kwargs[n] for n in self.m._kw_names]
        params = list(self.m.named_parameters())
        if needs_autograd([p for _, p in params], flat):
            outs = CompiledCall.apply(Call(self, forms, flat, len(inputs), params), *[p for _, p in params], *flat)
        else:
            values = self._inputs(inputs, kwargs, "forward")
            outs = tuple(forms.user(*r) for r in self._forward_results(self._forward_runner(values), values))
        return _structured(getattr(getattr(self.last_run.program, "step", None), "output_tree", None), list(outs))

    def _outputs_form(self, mode: str, inputs: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        from spmdc.api.autograd_call import Outputs

        first = next(iter(list(inputs) + [kwargs[n] for n in self.m._kw_names]), None)   # (compiled order)
        local = self.m.options.inputs == "local"
        batch = None
        if torch.is_tensor(first) and first.dim() > 0:   # the global batch size (pieces: times their number)
            batch = int(first.shape[0]) * (self.m.sampler_args()[0] if local and not _is_dtensor(first) else 1)
        return Outputs(self, mode, batch, local)

    def _forward_runner(self, values: list[Any]) -> Any:
        """The forward program of these global inputs (compiled the first time)."""
        run = self.m._programs.get("forward", values)
        if self.m._hetero is not None and any(not isinstance(lay[0], Replicate) for lay in run.program.res_layouts):
            raise NotImplementedError(f"cm(x) of a module on plan '{self.m._hetero.name}' (device groups): its "
                                      "outputs are split across the groups, which no DTensor or full tensor "
                                      "gathers yet; train with cm.step/cm.backward, or compile without groups "
                                      "for inference")
        return run

    def _forward_results(self, run: Any, values: list[Any]) -> list[tuple[Any, Any, tuple[int, ...]]]:
        """Run the forward program: its outputs as ``(this rank's piece, layout, global shape)``;
        its buffer updates (BatchNorm in training) applied to the module's buffers."""
        from spmdc.compiler.compilation import main_function
        from spmdc.dialects.attrs import BUFFER_UPDATE_ATTR

        self.last_run = run
        prog = run.program
        outs = run(self._args(run, values))
        module = getattr(prog, "module", None)
        fn = main_function(module) if module is not None else None
        updates = {i for i in range(len(outs)) if fn is not None and BUFFER_UPDATE_ATTR in fn.res_attrs(i)}
        if updates:
            self._update_buffers(prog, outs)
        return [(out, prog.res_layouts[i], prog.step.res_shapes[i]) for i, out in enumerate(outs) if i not in updates]

    def _batch(self, batch: tuple, kwargs: dict[str, Any]) -> list[Any]:
        if not self.m._opts.can_train:
            raise RuntimeError("training needs spmdc.compile(..., train=True)")
        if len(batch) == 2 and all(isinstance(b, (tuple, list)) for b in batch):
            batch = tuple(batch[0]) + tuple(batch[1])
        return self._inputs(batch, kwargs, "train")

    def _train_program(self, kind: str, values: list[Any]) -> tuple[Any, dict[str, tuple[Any, Any]], Any]:
        """Run a training program: (loss, {fqn: (local gradient, its layout)}, gradient norm or None)."""
        run = self.m._programs.get(kind, values)
        self.last_run = run
        prog = run.program
        outs = run(self._args(run, values))
        loss, grads, norm = None, {}, None
        for i, (rkind, out) in enumerate(zip(prog.step.result_kinds, outs)):
            if rkind == "loss":
                loss = self.m._store.full(out, prog.res_layouts[i], prog.step.res_shapes[i])
            elif rkind == "grad_norm":
                norm = self.m._store.full(out, prog.res_layouts[i], prog.step.res_shapes[i])
            elif rkind.startswith("grad:"):
                grads[rkind[5:]] = (out, prog.res_layouts[i])
        self._update_buffers(prog, outs)
        return loss, grads, norm

    def _update_buffers(self, prog: Any, outs: Sequence[Any]) -> None:
        """A training program's buffer updates (BatchNorm's running statistics in training, results
        marked ``spmdc.buffer_update``: statistics of the whole batch, as the program computes them)
        copied into the module's buffers, once per program run (device groups: refused by name)."""
        from spmdc.compiler.compilation import main_function
        from spmdc.dialects.attrs import BUFFER_UPDATE_ATTR

        module = getattr(prog, "module", None)
        if module is None:
            return
        fn = main_function(module)
        updates = [(i, fn.res_attrs(i).get(BUFFER_UPDATE_ATTR)) for i in range(len(outs))]
        updates = [(i, a) for i, a in updates if a is not None]
        if updates and self.m._hetero is not None:   # refused rather than left at their initial values
            raise NotImplementedError(f"plan '{self.m._hetero.name}' (device groups): the model updates buffer "
                                      f"'{updates[0][1].value}' in training (e.g. BatchNorm's running statistics); "
                                      "device groups do not apply buffer updates yet: train it on one mesh or in "
                                      "pipeline stages, or with those modules in eval mode")
        with torch.no_grad():
            for i, a in updates:
                out = outs[i]
                if a is not None:
                    self.m.get_buffer(a.value).copy_(self.m._store.full(out, prog.res_layouts[i],
                                                                        prog.step.res_shapes[i]))

    def _accumulate(self, grads: dict[str, Any]) -> None:
        """Add gradients (DTensors laid out like their parameters) into ``p.grad``."""
        for fqn, g in grads.items():
            p = self.m.get_parameter(fqn)
            if not p.requires_grad:
                continue
            p.grad = g if p.grad is None else p.grad + g

    def backward(self, *batch: Any, **kwargs: Any) -> Any:
        """Forward and backward on ``batch`` (model inputs, loss inputs, keyword inputs): adds the
        gradients to each parameter's ``.grad`` (a DTensor laid out like the parameter), as
        ``loss.backward()`` would; returns the loss (0-d tensor). With ``grad_accum=N`` the batch is
        split into N micro-batches along dim 0 and the gradients are reduced once."""
        values = self._batch(batch, kwargs)
        if self.m.options.grad_accum > 1:
            return self._backward_accumulated(values)
        loss, grads, norm = self._train_program("train", values)
        self.last_grad_norm = norm
        st = self.m._store
        self._accumulate({fqn: st.stored(st.relayout(g, lay, st.storage[fqn], st.shapes[fqn]), st.storage[fqn],
                                         st.shapes[fqn]) for fqn, (g, lay) in grads.items()})
        return loss

    def _micro(self, values: list[Any]) -> list[list[Any]]:
        n = self.m.options.grad_accum
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
        n = self.m.options.grad_accum
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
            return self.m._store.dtensor(g, lay, self.m._store.shapes[fqn])

        def stored(fqn: str, g: Any, lay: Any) -> Any:
            return self.m._store.stored(g, lay, self.m._store.shapes[fqn])

        def relayout(fqn: str, g: Any, src: Any, dst: Any) -> Any:
            return self.m._store.relayout(g, src, dst, self.m._store.shapes[fqn])

        mean = {fqn: (g / n, lay) for fqn, (g, lay) in acc.items()}
        st = self.m._store
        if self.m._hetero is not None:   # within each group, then across the groups (spmdc.api.group_grads)
            if self._group_grads is None:
                from spmdc.api.group_grads import GroupGradients

                self._group_grads = GroupGradients(self.m._hetero, self.m.comm, st.storage, st.shapes)
            reduced = {f: stored(f, g, self.m._store.storage[f])
                       for f, g in self._group_grads.reduce(mean, as_dtensor, relayout).items()}
        else:
            reduced = reduce_gradients(mean, st.storage, CountingComm(self.m.comm), as_dtensor, stored, relayout)
        if self.m.options.clip_grad_norm is not None:   # (a group's layouts without grp: it holds the whole gradient)
            own = 1 if self.m._hetero is not None else 0
            self.last_grad_norm = clip_grads_([(g, self.m._store.storage[f][own:]) for f, g in reduced.items()],
                                              self.m.options.clip_grad_norm, self.m.comm, self.m.group)
        self._accumulate(reduced)
        return torch.stack(losses).mean()


def _structured(tree: Any, outs: list[Any]) -> Any:
    """The outputs in the model's own structure (a HuggingFace ``ModelOutput``, tuples, dicts;
    :func:`~spmdc.frontend.loss.rebuild_output`); without one, a tensor or a tuple."""
    from spmdc.frontend.loss import rebuild_output

    counted = _leaf_count(tree)
    if tree is None or counted != len(outs):
        return outs[0] if len(outs) == 1 else tuple(outs)
    return rebuild_output(tree, outs)


def _leaf_count(tree: Any) -> int:
    if tree is None:
        return 0
    if tree[0] == "t":
        return 1
    return sum(_leaf_count(t) for t in tree[-1])


def _dtensor_chunks(x: Any, n: int) -> list[Any]:
    full = x.full_tensor()
    return [c for c in full.chunk(n, dim=0)]
