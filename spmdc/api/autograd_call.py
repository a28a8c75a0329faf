"""Autograd through a compiled module: the outputs of ``cm(x)`` carry a ``grad_fn``.

    out = cm(x)                 # the forward program; out.grad_fn is a CompiledCallBackward
    loss = my_loss(out, y)      # any eager code after the module (and before it: x may require grad)
    loss.backward()             # the vjp program: gradients into cm.parameters()' .grad, and x.grad
    opt.step()                  # any torch optimizer on cm.parameters()

With grad mode on and a parameter or an input that requires grad, the one-mesh / device-group
executor (:class:`~spmdc.api.mesh_executor.MeshExecutor`) calls the module through
:class:`CompiledCall`, an ``autograd.Function``. Its forward runs the forward program. Its
backward runs the *vjp program*: a training program whose loss is :class:`VjpLoss`,
``sum_i (out_i * g_i).sum()`` over the module's floating outputs, with each output's incoming
gradient ``g_i`` passed as a loss input. d/d out_i of that loss is exactly ``g_i`` in any dtype,
so the program's gradients are exactly ``J^T g``. They are computed for every parameter that
requires grad, and for every input that requires grad (``grad_input:k`` results), which is how
gradients reach eager layers in front of the module.

The vjp program recomputes the forward, so no activation is kept between forward and backward.
It costs one forward more than ``cm.step``/``cm.backward``, which differentiate model and loss in
one program. It draws the same random numbers as the forward (dropout masks): torch's generator
states at the forward are restored around it, as ``torch.utils.checkpoint`` does, and put back
afterwards. Buffer updates (BatchNorm's running statistics in training) are applied by the
forward, once, and not again by the recomputation. Programs are cached per output count and
per set of inputs that require grad (:class:`~spmdc.api.program_cache.ProgramCache`).

What the outputs are, and how their gradients are read (option ``outputs``,
:meth:`~spmdc.compiler.options.CompileOptions.resolved_outputs`):

==========  ==================================================  ==========================================
outputs     ``cm(x)`` returns                                   gradients
==========  ==================================================  ==========================================
dtensor     global values as DTensors                           of the global loss (any placement)
full        whole tensors on every rank                         averaged over the ranks (the same loss on
                                                                every rank: that loss's)
local       this rank's piece of each output whose dim 0 is     each rank's loss is its own; parameters get
            the batch (split as the plan splits the first       the mean over the pieces (DDP, FSDP2); an
            input's dim 0, the DistributedSampler's pieces);    input given as a piece gets its own loss's
            other outputs whole                                 gradient
==========  ==================================================  ==========================================

A mean loss per piece therefore gives the gradient of the whole batch's mean loss, as one
device computes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from spmdc.api.parameter_store import is_dtensor


class VjpLoss:
    """The vjp program's loss: ``sum_i (out_i * g_i).sum()`` over the model's floating tensor
    outputs, flattened as the forward program returns them; ``g_i`` are the loss inputs."""

    def __call__(self, out: Any, *cotangents: Any) -> Any:
        from spmdc.frontend.loss import _tensor_leaves

        leaves: list[Any] = []
        _tensor_leaves(out, "output", leaves, [])
        floats = [t for t in leaves if t.is_floating_point()]
        if len(floats) != len(cotangents):
            raise ValueError(f"the vjp program takes one gradient per floating output: {len(floats)} outputs, "
                             f"{len(cotangents)} gradients")
        total = None
        for o, g in zip(floats, cotangents):
            term = (o * g).sum().float()
            total = term if total is None else total + term
        return total


def vjp_kind(n_cotangents: int, needs: Sequence[bool], saved: bool = False) -> str:
    """The program cache's kind of a vjp program: its number of output gradients, which user
    inputs (positional, then keyword) it returns gradients of, and whether it suspends before its
    backward (``autograd_activations="saved"``: ``vjp:1:10:saved``)."""
    return f"vjp:{n_cotangents}:" + "".join("1" if n else "0" for n in needs) + (":saved" if saved else "")


def parse_vjp_kind(kind: str) -> tuple[int, list[bool], bool]:
    """``(output gradients, inputs whose gradient is wanted, saved)`` of a :func:`vjp_kind`."""
    parts = kind.split(":")
    return int(parts[1]), [c == "1" for c in parts[2]], parts[3:] == ["saved"]


@dataclass
class Outputs:
    """The forward program's results as the user gets them (see the module doc's table)."""

    ex: Any                 # the MeshExecutor
    mode: str               # "dtensor" | "full" | "local"
    batch: int | None       # the first input's global dim 0 (what makes an output batch-major)
    local_inputs: bool      # the user passed pieces (inputs="local")

    @property
    def store(self) -> Any:
        return self.ex.m._store

    def _piecewise(self, shape: Sequence[int]) -> bool:
        return self.mode == "local" and self.batch is not None and len(shape) > 0 and shape[0] == self.batch

    def batch_placements(self, other: Any) -> list[Any]:
        """Torch placements on this rank's DeviceMesh: Shard(0) along the axes that split the first
        input's dim 0, ``other`` along the rest."""
        from torch.distributed.tensor import Shard

        m = self.ex.m
        layout = self.ex._input_specs("forward")[0][1]
        return [Shard(0) if getattr(p, "dim", None) == 0 else other for p in self.store.own(layout)] \
            if m._hetero is None else []

    def user(self, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        """One result (this rank's piece, laid out ``layout``) as the user gets it."""
        st = self.store
        if self.mode == "dtensor":
            return st.dtensor(local, layout, shape)
        if not self._piecewise(shape):
            return st.full(local, layout, shape)
        if self.ex.m._hetero is not None:   # device groups: the pieces are equal (LocalBatches)
            lb = self._batches()
            return st.full(local, layout, shape).chunk(lb.replicas)[_replica(lb)].clone()
        from torch.distributed.tensor import Replicate

        dt = st.dtensor(local, layout, shape)
        return dt.redistribute(self.ex.m.device_mesh, self.batch_placements(Replicate())).to_local()

    def _batches(self) -> Any:
        lb = self.ex.m.__dict__.get("_local_batches")
        if lb is None:
            raise NotImplementedError("outputs='local' on device groups needs inputs='local' (each rank's replica "
                                      "is known only from the pieces it passes); use outputs='full' or 'dtensor'")
        return lb

    def cotangent(self, g: Any, local_template: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        """The gradient of one output as the vjp program's loss input: a DTensor or a global tensor
        (None: zeros). ``full`` and ``local`` gradients are averaged over the ranks (the module doc)."""
        import torch.distributed as dist

        m, st = self.ex.m, self.store
        if g is None:
            return st.dtensor(torch.zeros_like(local_template), layout, shape) if m._hetero is None else \
                torch.zeros(shape, dtype=local_template.dtype, device=m.device)
        if is_dtensor(g):
            return g
        g = g.detach().to(m.device)
        if self.mode == "dtensor":   # a plain gradient for a DTensor output (out.backward(tensor)): global
            return g
        world = dist.get_world_size() if m._hetero is not None else m.mesh.size
        if not self._piecewise(shape):   # the mean over the ranks of each rank's whole gradient
            total = g.clone()
            if world > 1:
                dist.all_reduce(total, group=None if m._hetero is not None else m.group)
            return total / world
        if m._hetero is not None:   # the replicas' pieces, gathered; the mean over the pieces
            lb = self._batches()
            return lb.assemble([g / lb.replicas], ["the output's gradient"], m.device)[0]
        from torch.distributed.tensor import DTensor, Partial

        from spmdc.runtime.dtensors import contiguous_stride

        return DTensor.from_local(g / world, m.device_mesh, self.batch_placements(Partial()), run_check=False,
                                  shape=tuple(shape), stride=contiguous_stride(shape))

    def input_grad(self, x: Any, k: int, local: Any, layout: Sequence[Any], shape: tuple[int, ...]) -> Any:
        """The gradient of user input ``x`` (input #k) from the vjp program's piece ``local``: a
        DTensor for a DTensor input; for a piece (``inputs="local"``), this rank's piece of it, laid
        out as the plan lays out the input — under ``outputs='local'`` the gradient of this rank's
        own loss (the mean over the pieces, times their number); else the whole gradient."""
        m, st = self.ex.m, self.store
        if is_dtensor(x):
            return st.dtensor(local, layout, shape).redistribute(x.device_mesh, x.placements)
        if not self.local_inputs:
            return st.full(local, layout, shape).to(x.device)
        if m._hetero is not None:   # the replicas' equal pieces along dim 0 (LocalBatches)
            lb = self._batches()
            piece = st.full(local, layout, shape).chunk(lb.replicas)[_replica(lb)]
            pieces = lb.replicas
        else:
            plan_layout = self.ex._input_specs("forward")[k][1]
            piece = st.relayout(local, layout, plan_layout, shape)
            axes = dict(zip(m.mesh.axis_names, m.mesh.shape))
            pieces = 1
            for ax, p in zip(m.mesh.axis_names, plan_layout):
                pieces *= axes[ax] if getattr(p, "dim", None) == 0 else 1
        return (piece * (pieces if self.mode == "local" else 1)).to(x.device)

    def _pieces(self) -> int:
        return self.ex.m.sampler_args()[0]


def _replica(lb: Any) -> int:
    import torch.distributed as dist

    return lb.replica_of[dist.get_rank()]


@dataclass
class Call:
    """One call of the module under autograd: what its backward needs."""

    ex: Any                          # the MeshExecutor
    forms: Outputs
    inputs: list[Any]                # the user's inputs (positional, then keyword in compiled order)
    n_positional: int
    params: list[tuple[str, Any]]    # (canonical name, parameter) in the order given to the Function
    values: list[Any] = field(default_factory=list)    # the inputs as the programs take them (global)
    results: list[tuple[Any, Any, tuple[int, ...]]] = field(default_factory=list)   # (piece, layout, shape)
    rng: Any = None                  # torch's generator states before the forward
    saved: Any = None                # autograd_activations="saved": the vjp program's runner ...
    paused: Any = None               # ... and its run, paused before the backward (spmdc.runtime.suspended)
    n_cot: int = 0                   # its output gradients (one per floating output)
    key: Any = None                  # saved: the call signature its vjp program serves (Call._saved_key)
    versions: dict[str, tuple[int, ...]] = field(default_factory=dict)   # the inputs' and parameters' at the forward

    @property
    def needs(self) -> list[bool]:
        return [torch.is_tensor(x) and x.requires_grad for x in self.inputs]

    def forward(self) -> tuple[Any, ...]:
        ex = self.ex
        self.rng = _rng_state(ex.m.device)
        self.versions = self._versions()
        pos, kw = self.inputs[:self.n_positional], self.inputs[self.n_positional:]
        self.values = ex._inputs([_plain(v) for v in pos], dict(zip(ex.m._kw_names, map(_plain, kw))), "forward")
        run = ex._forward_runner(self.values)
        if ex.m.options.autograd_activations == "saved":
            self.key = self._saved_key(run)
            if self.key in ex.saved_vjp:   # (this call signature's suspending vjp program exists: use it)
                self.results = self._forward_half(ex.saved_vjp[self.key])
                ex.last_run = run   # (the forward program's output structure)
                return tuple(self.forms.user(*r) for r in self.results)
        self.results = ex._forward_results(run, self.values)
        return tuple(self.forms.user(*r) for r in self.results)

    def _saved_key(self, fwd: Any) -> tuple:
        """The call signature a suspending vjp program serves: the module's modes, the inputs'
        shapes and dtypes, which inputs want gradients, the floating outputs' shapes and dtypes."""
        from spmdc.api.program_cache import signature
        from spmdc.compiler.compilation import main_function
        from spmdc.dialects.attrs import BUFFER_UPDATE_ATTR
        from spmdc.dialects.tensor.base import torch_dtype
        from spmdc.frontend.export import module_flags

        prog = fwd.program
        fn = main_function(prog.module)
        outs = [i for i in range(len(prog.step.res_shapes)) if BUFFER_UPDATE_ATTR not in fn.res_attrs(i)]
        dtypes = [torch_dtype(fn.function_type.results[i].element_type) for i in outs]
        floating = [(prog.step.res_shapes[i], d) for i, d in zip(outs, dtypes) if d.is_floating_point]
        return (module_flags(self.ex.m._model), signature(self.values), tuple(self.needs), tuple(floating))

    def _forward_half(self, run: Any) -> list[tuple[Any, Any, tuple[int, ...]]]:
        """``autograd_activations="saved"``: the suspending vjp program run up to its suspension;
        its buffer updates applied; the model outputs as the forward program's would be."""
        from spmdc.compiler.compilation import main_function
        from spmdc.dialects.attrs import BUFFER_UPDATE_ATTR

        self.saved = run
        self.n_cot = len(self.key[3])
        self.paused = self._start()
        vprog = run.program
        early = self.paused.early
        vfn = main_function(vprog.module)
        self.ex._update_buffers(vprog, [early.get(i) for i in range(len(vprog.step.result_kinds))])
        return [(early[i], vprog.res_layouts[i], vprog.step.res_shapes[i])
                for i, kind in enumerate(vprog.step.result_kinds)
                if kind == "output" and BUFFER_UPDATE_ATTR not in vfn.res_attrs(i)]

    def _start(self) -> Any:
        """The vjp program's forward half (the output gradients' places left empty)."""
        n, run = self.n_positional, self.saved
        return run.start(self.ex._args(run, list(self.values[:n]) + [None] * self.n_cot + list(self.values[n:])))

    def backward(self, grads: Sequence[Any]) -> list[Any]:
        ex, m = self.ex, self.ex.m
        if m.options.clip_grad_norm is not None:   # (it would clip each module's share, not the model's gradients)
            raise RuntimeError(f"the module was compiled with clip_grad_norm={m.options.clip_grad_norm}, which clips "
                               "inside cm.step()/cm.backward(); with loss.backward() clip the whole model's gradients "
                               f"yourself before opt.step(): cm.clip_grad_norm_({m.options.clip_grad_norm}) or "
                               "torch.nn.utils.clip_grad_norm_(params, ...), and compile without clip_grad_norm")
        changed = [name for name, v in self._versions().items() if v != self.versions.get(name)]
        if changed:   # (the program would read the new values: gradients of a forward that never ran)
            raise RuntimeError(f"{', '.join(changed)} changed in place between cm(x) and its backward (as "
                               "autograd's 'modified by an inplace operation'): the backward needs the values the "
                               "forward read; modify them after backward(), or on a clone")
        floating = [i for i, (piece, _, _) in enumerate(self.results) if piece.is_floating_point()]
        cots = [self.forms.cotangent(grads[i], *self.results[i]) for i in floating]
        needs = self.needs
        n = self.n_positional
        tensors = list(self.values[:n]) + cots + list(self.values[n:])
        if self.saved is not None:   # the forward half ran in cm(x): resume it
            run = self.saved
            outs = self._backward_half(run, cots)
        elif self.key is not None:   # saved, this signature's first backward: compile the suspending vjp
            with torch.enable_grad():   # program (later calls run its forward half) and run it whole now
                run = m._programs.get(vjp_kind(len(cots), needs, saved=True), tensors)
            ex.saved_vjp[self.key] = self.saved = run
            self.n_cot = len(cots)
            outs = self._backward_half(run, cots)
        else:
            with torch.enable_grad():   # (autograd runs backward functions with grad mode off; the capture needs it)
                run = m._programs.get(vjp_kind(len(cots), needs), tensors)
            outs = self._rerun(lambda: run(ex._args(run, tensors)))
        ex.last_run = run
        prog, st = run.program, m._store
        index = {id(p): k for k, (_, p) in enumerate(self.params)}
        by_name = {fqn: index[id(p)] for fqn, p in m.named_parameters(remove_duplicate=False) if id(p) in index}
        param_grads: list[Any] = [None] * len(self.params)
        input_grads: list[Any] = [None] * len(self.inputs)
        for i, (kind, out) in enumerate(zip(prog.step.result_kinds, outs)):
            lay, shape = prog.res_layouts[i], prog.step.res_shapes[i]
            if kind.startswith("grad:") and kind[5:] in by_name:
                fqn = _canonical_name(m, kind[5:])
                param_grads[by_name[kind[5:]]] = st.stored(st.relayout(out, lay, st.storage[fqn], st.shapes[fqn]),
                                                      st.storage[fqn], st.shapes[fqn])
            elif kind.startswith("grad_input:"):
                k = int(kind[11:])
                k = k if k < n else k - len(cots)   # (user inputs: model, the gradients, keyword inputs)
                if needs[k]:
                    input_grads[k] = self.forms.input_grad(self.inputs[k], k, out, lay, shape)
        return param_grads + input_grads   # (None: a parameter the outputs do not depend on)


    def _versions(self) -> dict[str, tuple[int, ...]]:
        """The version counters of what the programs read: the inputs and the parameters."""
        out = {f"input #{k}": _version(x) for k, x in enumerate(self.inputs) if torch.is_tensor(x)}
        out.update((f"parameter '{name}'", _version(p)) for name, p in self.params)
        return out

    def _rerun(self, fn: Any) -> Any:
        """``fn()`` with torch's generators as they were at the forward (the same random numbers), then
        as they are now."""
        now = _rng_state(self.ex.m.device)
        _set_rng_state(self.rng, self.ex.m.device)
        try:
            return fn()
        finally:
            _set_rng_state(now, self.ex.m.device)

    def _backward_half(self, run: Any, cots: list[Any]) -> list[Any]:
        """Resume the paused vjp program with the output gradients (cut to this rank's pieces). When
        no forward half is paused — this signature's first call ran the forward program, or a second
        backward through the same graph (``retain_graph=True``) — the forward half runs first, with
        the forward's random numbers."""
        prog = run.program
        at = [i for i, k in enumerate(prog.step.arg_kinds) if k.startswith("input:")]
        places = at[self.n_positional:self.n_positional + len(cots)]
        local = [self.ex._local_arg(c, prog.arg_layouts[i], prog.step.arg_shapes[i], "the gradient of output "
                                    f"#{k}") for k, (c, i) in enumerate(zip(cots, places))]
        paused = self.paused if self.paused is not None and not self.paused.done else self._rerun(self._start)
        self.paused = paused
        return paused.resume(local)


class CompiledCall(torch.autograd.Function):
    """``cm(x)`` under autograd (see the module doc): ``apply(call, *parameters, *inputs)``."""

    @staticmethod
    def forward(ctx: Any, call: Call, *tensors: Any) -> Any:   # type: ignore[override]
        ctx.call = call
        outs = call.forward()
        ctx.mark_non_differentiable(*[o for o in outs if not o.is_floating_point()])
        return outs

    @staticmethod
    @once_differentiable   # (its gradients carry no graph: a double backward is refused, never wrong)
    def backward(ctx: Any, *grads: Any) -> Any:   # type: ignore[override]
        return (None, *ctx.call.backward(grads))


def needs_autograd(params: Sequence[Any], inputs: Sequence[Any]) -> bool:
    """Whether ``cm(x)`` records a graph: grad mode on and a parameter or an input requiring grad."""
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        return False
    return any(p.requires_grad for p in params) or any(torch.is_tensor(x) and x.requires_grad for x in inputs)


def _canonical_name(m: Any, fqn: str) -> str:
    """The store's name of parameter ``fqn`` (a tied parameter's first name)."""
    if fqn in m._store.storage:
        return fqn
    p = m.get_parameter(fqn)
    return next(n for n, q in m.named_parameters() if q is p)


def _version(x: Any) -> tuple[int, ...]:
    """The version counter(s) an in-place update bumps: a DTensor's own and its local tensor's."""
    return (x._version, x._local_tensor._version) if is_dtensor(x) else (x._version,)


def _plain(x: Any) -> Any:
    return x.detach() if torch.is_tensor(x) else x


def _rng_state(device: torch.device) -> tuple[Any, Any]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[Any, Any], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)
