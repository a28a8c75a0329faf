"""The pipeline executor of a compiled module: stages by module, GPipe, 1F1B and interleaved 1F1B.

    plan = PipelinePlan.from_dict({...})           # spmdc.sharding.pipeline_plan
    cm = spmdc.compile(model, ((x,), (y,)), mesh=None, plan=plan, train=True, loss_fn=lm_loss,
                       optimizer=("adamw", {"lr": 1e-3}))   # a CompiledModule whose executor is this
    loss = cm.step(x, y)      # every rank: the global batch; the loss of the step on every rank
    loss = cm.backward(x, y)  # or: this stage's gradients into p.grad, then any optimizer on cm.parameters()
    print(cm.schedule_ir)     # this rank's schedule (pipe dialect), as it runs
    print(cm.timeline())      # every rank's schedule as a time grid

:class:`~spmdc.api.compiled_module.CompiledModule` is the one module of every layout kind: for a
pipeline plan it holds this rank's stage's parameters (DTensors on the stage's mesh, under the
model's names), its optimizer and the state interface (``state_pieces``, ``save`` ...), and hands
each step to a :class:`PipelineExecutor`, which owns the stages' programs and runs the schedule.

How it runs. The model and its loss are cut into stages by module (:mod:`spmdc.frontend.stages`).
Each stage is compiled on its device group with its own plan into two programs: the *forward*
(the stage's inputs → the values later stages read) and the *backward*, a training program whose
loss is ``sum(output · gradient)`` over the stage's differentiable outputs and whose boundary
inputs require grad, so it returns the parameters' gradients *and* its inputs' gradients
(``grad_input:k`` results). The backward recomputes the stage's forward from the inputs stashed at
forward time — GPipe's re-materialization: between a micro-batch's forward and backward a stage
holds only its inputs. The last stage runs one program per micro-batch (loss, gradients).

The per-rank programs are ``func.func @rank<r>`` of a pipeline module (:mod:`spmdc.dialects.pipe`,
made by :mod:`spmdc.passes.pipeline_schedule` from the stages' layouts) and this runtime executes
that function op by op. Boundary values move by the finest-slice table between the producer's
result layout and the consumer's argument layout (batched send/recv; a partial source's terms are
summed on arrival); sends are asynchronous, receives wait. The batch is split into micro-batches
along dim 0; the step's loss is their mean and each micro-batch's gradients are scaled by
``1/microbatches`` (one big batch, for a loss that is a mean over equal-sized micro-batches).
Parameters several stages read (tied embeddings) get the sum of the stages' gradients before
the optimizer step: piece by piece, over the ranks at one place on each stage's mesh, where those
stages have the same mesh and store the parameter alike (``pp=2,dp=4`` under fsdp: four groups of
two ranks, each summing its shard); else the whole gradient over every rank of those stages.

Training options, as for one mesh (``spmdc.compile``'s keywords):

* ``mixed_precision="bf16"`` / ``"fp16"`` / a ``MixedPrecisionPolicy``: the model is cut into stages
  as it runs under the policy (:func:`~spmdc.frontend.stages.split_stages`), so each stage's programs
  cast the parameters they read and compute in that dtype — the same ops as the one-device run under
  the policy, ``.float()`` upcasts included. Boundary activations and their gradients move in the
  dtype the producing program returns (read from the programs, receive buffers allocated so);
  parameters, gradients and optimizer state stay float32; a tied weight is cast in each stage.
* ``checkpoint="blocks"``: each stage's backward program recomputes its repeated blocks (the stage
  graphs keep the model's module paths and checkpoint regions through capture).
* ``clip_grad_norm=X``: the global norm over every parameter of every stage (a shared parameter
  counted once, by its first stage), every stage's gradients scaled by the same coefficient, as
  ``torch.nn.utils.clip_grad_norm_`` on one device; ``pm.last_grad_norm`` is the norm before
  clipping, the same on every rank. Collectives: one ``all_reduce`` of one float32 over the whole
  job per step, nothing else (gradients are already in their storage layouts: each rank squares
  its local pieces, a piece replicated on a stage's mesh axis counted at coordinate 0 only).
* ``grad_accum=N``: each step runs N rounds of the schedule on N consecutive chunks of the batch,
  each chunk cut into the plan's micro-batches; gradients accumulate (each micro-batch's scaled by
  ``1/(N·microbatches)``), tied gradients are summed once, one optimizer step; the loss is the mean.

``inputs="local"``: each rank passes its data-parallel replica's piece (a ``DistributedSampler``
with ``spmdc.sampler_args(cm)``: the ranks at the same dp coordinate of every stage are one replica,
every stage must have the same dp size); one ``all_gather`` per input over the job (and one of
their shapes) assembles the
global batch on every rank (:class:`~spmdc.runtime.input_check.LocalBatches`), which then runs as
below. Otherwise every rank passes the same global batch: the first step at each input shape checks that it does,
by one checksum ``all_gather`` over the job (:mod:`spmdc.runtime.input_check`; ``check_inputs=False``
skips it). Random ops (dropout) draw one device's masks, in the forward and again in the backward's
recomputed forward (:mod:`spmdc.api.pipeline_rng`). A value several later stages read (a skip
connection, rotary tables) is sent to each of them; its gradient is the sum of theirs, received
from all of them before the producer's backward. A meta model (``spmdc.deferred_init``): the stages
are cut and compiled from fake tensors, each rank materializes only its stage's tensors (its
pieces of the parameters), bitwise one device's initialization. Refused: ``rng="philox"``.

Buffers updated in training (BatchNorm's ``running_mean`` / ``running_var`` / ``num_batches_tracked``):
each stage's forward program updates them once per micro-batch, in micro-batch order (rounds of
``grad_accum`` one after another) — one device running the step's micro-batches one after another;
the backward's recomputed forward drops its updates; the last stage's forward+backward program
updates once. Each micro-batch normalizes by its own statistics (over the whole micro-batch, also
under a data-parallel stage mesh, as one mesh computes them), so the step's loss is the mean of the
micro-batches' losses, not the whole batch's: the micro-batch mean check is skipped for such a model.
The updated statistics are in ``cm.state_dict()``, ``full_state_dict()`` and checkpoints.

Interleaved 1F1B (``schedule="interleaved"``, :func:`~spmdc.sharding.pipeline_plan.interleaved_actions`):
a rank runs several stages (``my_stages``: ``k, k + P, ...``); each keeps its own programs, buffers,
random-number positions and stashed inputs (``_per_stage``; :meth:`_use` makes one current, as the
schedule's ops name it), and ``params`` is the union of the rank's stages' parameters.

Checkpoints: ``pm.save(dir)`` / ``pm.load(dir)`` write and read the checkpoint a one-mesh module of
the same model does (:mod:`spmdc.runtime.checkpointing`: each stage its parameters and optimizer state
under the model's names, a tied parameter once), so a pipeline job resumes under fsdp and back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from spmdc.api.micro_batches import check_micro_batch_mean, chunks
from spmdc.api.pipeline_boundaries import boundary_module, diff_outputs, user_arg
from spmdc.api.pipeline_parameters import StageParameters
from spmdc.api.pipeline_step import StepState
from spmdc.sharding.pipeline_plan import PipelinePlan


@dataclass
class _Programs:
    forward: Any   # RankRunner or None (the last stage)
    backward: Any


@dataclass(frozen=True)
class StageSurrogate:
    """A middle stage's training loss: ``sum_i (out_i * g_i).sum()`` over its differentiable outputs
    (``differentiable[i]``: output ``i`` is), ``g_i`` the next stage's gradients of them. Plain
    fields rather than a closure, so the compile cache can key the stage's program by them.

        StageSurrogate((True, False))(outs, g0)   # == (outs[0] * g0).sum()
    """

    differentiable: tuple[bool, ...]

    def __call__(self, outs: Any, *gs: Any) -> Any:
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        diff = [o for o, d in zip(outs, self.differentiable) if d]
        return sum((o * g).sum() for o, g in zip(diff, gs))


def stage_examples(split: Any, k: int, mb: list[Any], fake: bool = False) -> tuple[list[Any], list[Any]]:
    """(inputs, gradient inputs) of stage ``k``'s programs for one micro-batch ``mb`` (the job's
    inputs in order), from the split's shapes; boundary values as zeros, or with ``fake=True`` (a
    model on the meta device: only their shapes are read) as fake CPU tensors, which hold no memory."""
    import contextlib

    from spmdc.frontend.torch_compat import fake_tensor_mode

    stage = split.stages[k]
    mode = fake_tensor_mode() if fake else contextlib.nullcontext()

    def zeros(shape: Any, dtype: Any) -> Any:
        with mode:
            return torch.zeros(shape, dtype=dtype)
    ins = []
    for kind, i in stage.inputs:
        if kind == "input":
            ins.append(mb[i])
        else:
            v = split.values[i]
            t = zeros(v.shape, v.dtype)
            ins.append(t.requires_grad_() if v.differentiable else t)
    grads = [zeros(split.values[v].shape, split.values[v].dtype) for v in stage.outputs
             if split.values[v].differentiable]
    return ins, grads


def stage_jobs(split: Any, k: int, mb: list[Any], options: Any, dump: Any = None,
               fake: bool = False) -> list[dict[str, Any]]:
    """Stage ``k``'s programs as ``compile_global`` keyword arguments: its forward (not on the last
    stage) and its training program (the last stage's loss, else :class:`StageSurrogate`; its
    gradients reduced in the program only where the storage is sharded along the batch, else
    left for one reduction per step), for one micro-batch ``mb`` (what :class:`PipelineExecutor`
    and ``spmdc plan`` compile)."""
    stage, last = split.stages[k], k == len(split.stages) - 1
    ins, grads = stage_examples(split, k, mb, fake)
    plain = [t.detach() for t in ins]
    # (no mixed_precision= in the stages' programs: each stage's graph was cut from the model run
    # under the policy and holds its casts; casting the stage's inputs again would cast loss inputs
    # too. Clipping and accumulation span the stages: this module does them)
    opts = options.replace(mixed_precision=None, clip_grad_norm=None, grad_accum=1, pp_schedule=None,
                           microbatches=None, inputs="global")   # (inputs="local": assembled here)
    jobs = []
    if not last:
        jobs.append(dict(inputs=plain, train=False, dump=dump, kwargs={}, options=opts))
    surrogate = StageSurrogate(tuple(split.values[v].differentiable for v in stage.outputs))
    # (gradients stored replicated where the batch is split come back unreduced: each micro-batch's
    # summed here, all-reduced once per step, :meth:`PipelineExecutor._reduce_pending`)
    jobs.append(dict(inputs=ins, train=True, dump=dump, kwargs={}, loss_fn=None if last else surrogate,
                     loss_inputs=[] if last else grads, options=opts, partial_grads="replicated"))
    return jobs


class PipelineExecutor(StageParameters):
    """This rank's stage of a model pipelined over device groups (see the module doc): its
    programs, the schedule, one step's run; every rank of the job builds one (inside its
    :class:`~spmdc.api.compiled_module.CompiledModule`)."""

    def __init__(self, model: Any, example_inputs: Any, *, plan: PipelinePlan, options: Any,
                 loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                 example_kwargs: dict | None = None, device: str | None = None, dump: Any = None):
        self.options = options
        import torch.distributed as dist

        from spmdc.compiler import split_example_inputs
        from spmdc.frontend.stages import auto_stages, split_stages
        from spmdc.runtime.collectives import Collectives
        from spmdc.runtime.group_comm import group_meshes
        from spmdc.runtime.input_check import InputCheck

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("a pipeline needs an initialized torch.distributed job (torchrun)")
        for what, bad in (("rng='philox'", options.rng != "eager"),
                          ("execution='eager'", options.execution != "compiled")):
            if bad:
                raise ValueError(f"pipeline plan '{plan.name}': {what} is not supported with a pipeline plan yet")
        plan = plan.with_schedule(options.pp_schedule, options.microbatches)
        self._set_training_options(options)
        if dist.get_world_size() != plan.world:
            raise ValueError(f"pipeline plan '{plan.name}' has {plan.world} ranks in its stages but the job has "
                             f"{dist.get_world_size()}")
        self.plan, self.rank = plan, dist.get_rank()
        self.stage = plan.stage_of(self.rank)   # (the stage whose state is current: see _use)
        self.my_stages = plan.stages_of(self.rank)   # several under interleaved 1F1B: k, k + groups, ...
        self.n_stages, self.micro = len(plan.stages), plan.microbatches
        self.device = torch.device(device or ("cuda" if dist.get_backend() == "nccl" else "cpu"))
        self.target = options.resolved_target()
        spec = self.plan.stages[self.stage]
        self.meshes = group_meshes(_Groups(plan.stages[:plan.groups]), self.device.type)   # every group's
        self.device_mesh = self.meshes[self.stage]
        self.members = list(spec.ranks)
        self.index = self.members.index(self.rank)       # this rank's place on its stage's mesh
        self.comm = Collectives(self.device_mesh)
        self._input_check = InputCheck.for_groups(
            plan.stages[:plan.groups], "stage", rank=self.rank, device=self.device, enabled=options.check_inputs,
            where=f"pipeline plan '{plan.name}'", hint="every rank of a pipeline passes the same global batch "
            "(the first stage reads its inputs, the last its loss inputs)")
        model_args, loss_args = split_example_inputs(example_inputs, loss_fn, loss_inputs)
        kwargs = dict(example_kwargs or {})
        self._local = None   # inputs="local": each rank's replica piece, the global batch assembled from them
        if options.inputs == "local":
            from spmdc.runtime.input_check import LocalBatches

            every = list(model_args) + list(loss_args) + list(kwargs.values())
            self._local = LocalBatches.for_stages(plan.stages, ndim=every[0].dim() if every else 1,
                                                  where=f"pipeline plan '{plan.name}'", check=options.check_inputs)
            full = [g.to(v.device) for g, v in zip(self._local.assemble(
                every, [f"example input #{i}" for i in range(len(every))], self.device, step=False), every)]
            model_args, loss_args = full[:len(model_args)], full[len(model_args):len(model_args) + len(loss_args)]
            kwargs = dict(zip(kwargs, full[len(model_args) + len(loss_args):]))
        self._kw_names = list(kwargs)
        self._n_model, self._n_loss = len(model_args), len(loss_args)
        names = [f"input #{i}" for i in range(len(model_args) + len(loss_args))] + self._kw_names
        every = list(model_args) + list(loss_args) + list(kwargs.values())
        if self.accum > 1:   # each round's share of the batch splits evenly over every stage's ranks
            n = self.micro * self.accum
            for v, name in zip(every, names):
                if v.dim() == 0 or v.shape[0] % n:
                    raise ValueError(f"grad_accum={self.accum} rounds of {self.micro} micro-batches split every input "
                                     f"along dim 0 into {n} pieces, but {name} has shape {tuple(v.shape)}")
            plan.check_batch([(t.shape[0] // self.accum, *t.shape[1:]) for t in every],
                             f"grad_accum round's input (1/{self.accum} of the batch)")
        micro = chunks(every, self.micro * self.accum, names)   # every round's micro-batches
        mb0 = micro[0]
        try:
            modules = [list(s.modules) for s in plan.stages] if plan.stages[0].modules else auto_stages(model,
                                                                                                      self.n_stages)
        except ValueError as e:
            if plan.virtual_stages == 1:
                raise
            raise type(e)(f"{e.args[0].split(';')[0]}: {plan.groups} device groups × {plan.virtual_stages} virtual "
                          "stages (interleaved); give the plan fewer 'virtual_stages' (or the model more blocks)"
                          ) from None
        n_in = len(model_args)
        from spmdc.frontend.export import ModuleModes, module_flags

        self._model, self._modes = model, ModuleModes.of(model)   # the modes the stages are cut in
        self._flags = module_flags(model)
        self.split = split_stages(model, mb0[:n_in], stages=modules, loss_fn=loss_fn,
                                  loss_inputs=mb0[n_in:n_in + len(loss_args)],
                                  kwargs=dict(zip(self._kw_names, mb0[n_in + len(loss_args):])),
                                  mixed_precision=self.mixed_precision, checkpoint=self.checkpoint)
        from spmdc.api.pipeline_rng import StageRandomness

        self._stage_groups = self._make_stage_groups()
        self._per_stage: dict[int, dict[str, Any]] = {}   # each of this rank's stages' state (see _use)
        for k in self.my_stages:   # one device's masks in every stage
            self._per_stage[k] = {"stage": k, "mine": self.split.stages[k],
                                  "_rng": StageRandomness(self.split, k, self.device)}
        self._use(self.my_stages[0])
        self._check()
        self._mb_offset = 0   # the step's micro-batch index of this schedule round's first
        self._check_micro_batch_mean(model, loss_fn, len(model_args), every, micro)
        self._dump = dump   # the job's dump: the schedule's stage (08) lands in <dir>/pipeline/
        self._updates = {}
        for k in self.my_stages:
            self._use(k)
            at, d = f"stage{k}", dump   # each stage's programs under <dir>/stage<k>/
            if dump is not None:
                from spmdc.compiler import Dump

                d = Dump(dump.ir_dir and f"{dump.ir_dir}/{at}", dump.code_dir and f"{dump.code_dir}/{at}")
            self._per_stage[k]["_programs"] = self._programs = self._compile(mb0, d)
            self._updates.update({id(r): self._buffer_results(r) for r in (self._programs.forward,
                                                                           self._programs.backward) if r is not None})
        self._layouts = self._exchange_layouts()
        self._dtypes = self._exchange_dtypes()
        self.schedule_module = self._schedule_module()
        self.schedule_ir = _print(self._rank_function(self.rank))
        self.params: dict[str, torch.nn.Parameter] = {}   # every stage's of this rank (the union)
        self._storage: dict[str, Any] = {}
        for k in self.my_stages:
            self._use(k)
            self._install()
            self._per_stage[k].update(buffers=self.buffers, _init_buffers=self._init_buffers)
        self._use(self.my_stages[0])
        self._shared_groups = self._tie_groups()
        self.peak_stash_bytes = 0
        self.last_messages = 0
        self.last_bytes_sent = 0
        self.last_grad_norm: Any = None
        self._pending: dict[str, tuple[Any, ...]] = {}   # gradients summed unreduced: their layouts (_sum_later)

    # -- building ---------------------------------------------------------------------------------
    def _use(self, stage: int) -> None:
        """Make ``stage`` (one of this rank's) current: ``stage``, ``mine``, ``_programs``, ``_rng``,
        ``buffers`` are its (a rank holds several stages under interleaved 1F1B)."""
        for key, value in self._per_stage[stage].items():
            setattr(self, key, value)
    def _set_training_options(self, options: Any) -> None:
        """The options each stage trains with (see the module doc), checked by the options object."""
        self.mixed_precision = options.mixed_precision
        self.checkpoint, self.clip, self.accum = options.checkpoint, options.clip_grad_norm, options.grad_accum

    def _check(self) -> None:
        from spmdc.frontend.stages import buffer_updates

        # buffers updated in training (BatchNorm's running statistics): each stage's forward program
        # updates them once per micro-batch, in micro-batch order; the backward's recomputed forward
        # drops its updates (:meth:`_apply_buffer_updates`). The statistics are each micro-batch's own,
        # so the loss is not the whole batch's: the micro-batch mean check does not apply
        self._batch_stats = any(buffer_updates(s.module) for s in self.split.stages)

    def _check_micro_batch_mean(self, model: Any, loss_fn: Any, n_model: int, every: list[Any],
                                micro: list[list[Any]]) -> None:
        # (a model that draws random numbers is compared in eval mode: its masks differ between the runs;
        # a meta model has no values to run: unchecked, as grad_accum on one mesh)
        from spmdc.frontend.deferred_init import is_meta_model

        if is_meta_model(model) or self._batch_stats:
            return
        check_micro_batch_mean(model, loss_fn, n_model, self._kw_names, every, micro, first=0,
                               eval_mode=any(st["_rng"].active for st in self._per_stage.values()))

    def _diff_outputs(self, stage: Any) -> list[int]:
        return diff_outputs(self.split, stage)

    def _make_stage_groups(self) -> dict[tuple[int, ...], Any]:
        """A process group per stage mesh of several ranks, made by every rank of the job in stage
        order (``new_group`` is collective): groups only their members make (local
        synchronization) can hang when a job builds a second pipeline over other rank sets."""
        import torch.distributed as dist

        out: dict[tuple[int, ...], Any] = {}
        for s in self.plan.stages:
            key = tuple(s.ranks)
            if len(key) > 1 and key not in out:
                out[key] = dist.new_group(list(key))
        return out

    def _compile(self, mb: list[Any], dump: Any) -> _Programs:
        from spmdc.api.compile_shared import compile_rank_shared, compile_shared
        from spmdc.runtime.executor import RankRunner

        spec, stage = self.plan.stages[self.stage], self.mine
        jobs = stage_jobs(self.split, self.stage, mb, self.options, dump)
        group = self._stage_groups.get(tuple(self.members))
        from spmdc.frontend.deferred_init import fake_parameters, is_meta_model

        if is_meta_model(stage.module):   # a meta model's stage: captured from fake tensors
            with fake_parameters(stage.module):
                steps = compile_shared(stage.module, jobs, spec.mesh, spec.plan, group, self.members)
        else:
            steps = compile_shared(stage.module, jobs, spec.mesh, spec.plan, group, self.members)
        ranks = list(enumerate(self.members))   # (a stage's mesh: its ranks share one program per role)
        runners = [RankRunner(compile_rank_shared(s, self.index, self.target, dump, ranks=ranks, group=group),
                              self.comm, device=self.device) for s in steps]
        return _Programs(None if len(runners) == 1 else runners[0], runners[-1])

    def _exchange_layouts(self) -> dict[int, dict[str, Any]]:
        """Every stage's programs' layouts and kinds (each rank gives its own stage's)."""
        import torch.distributed as dist

        every = []
        for k in self.my_stages:
            mine, progs = {}, self._per_stage[k]["_programs"]
            for key, run in (("F", progs.forward), ("B", progs.backward)):
                if run is not None:   # (its results less its buffer updates, which stay in the stage)
                    p, keep = run.program, self._kept_results(run)
                    mine[key] = (list(p.arg_layouts), [p.res_layouts[r] for r in keep], list(p.step.arg_kinds),
                                 [p.step.result_kinds[r] for r in keep])
            every.append((k, mine))
        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, every)
        return {s: d for stages in reversed(out) for s, d in stages}

    def _exchange_dtypes(self) -> dict[int, dict[str, tuple[list[str], list[str]]]]:
        """Every stage's programs' argument and result element types (``bf16`` where a stage runs
        under mixed precision): a boundary value moves in its producer's result dtype."""
        import torch.distributed as dist

        from spmdc.compiler.driver import main_function

        every = []
        for k in self.my_stages:
            mine, progs = {}, self._per_stage[k]["_programs"]
            for key, run in (("F", progs.forward), ("B", progs.backward)):
                if run is not None:
                    fn = main_function(run.program.module).function_type
                    mine[key] = ([t.element_type for t in fn.inputs],
                                 [fn.results[r].element_type for r in self._kept_results(run)])
            every.append((k, mine))
        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, every)
        return {s: d for stages in reversed(out) for s, d in stages}

    def _kept_results(self, run: Any) -> list[int]:
        """The indices of ``run``'s results other than its buffer updates."""
        upd = self._updates.get(id(run), {})
        return [r for r in range(len(run.program.step.result_kinds)) if r not in upd]

    def _wire_dtype(self, value: int, grad: bool, consumer: int | None = None) -> tuple[Any, Any]:
        """(dtype a boundary value or its gradient moves in: its producer program's result dtype,
        dtype the receiving program takes) between its producer and ``consumer`` (default: its
        first consumer stage; every consumer's gradient leaves in one dtype, see :meth:`_schedule_module`)."""
        from spmdc.dialects.tensor.base import torch_dtype

        v, last = self.split.values[value], self.n_stages - 1
        src, dst = self.split.stages[v.producer], self.split.stages[v.consumers[0] if consumer is None else consumer]
        in_pos = dst.inputs.index(("value", value))
        if not grad:
            sent = self._dtypes[src.index]["F"][1][src.outputs.index(value)]
            prog = "F" if dst.index < last else "B"
            kinds = self._layouts[dst.index][prog][2]
            taken = self._dtypes[dst.index][prog][0][[i for i, k in enumerate(kinds) if k.startswith("input:")][in_pos]]
        else:
            rkinds = self._layouts[dst.index]["B"][3]
            sent = self._dtypes[dst.index]["B"][1][rkinds.index(f"grad_input:{in_pos}")]
            kinds = self._layouts[src.index]["B"][2]
            at = len(src.inputs) + self._diff_outputs(src).index(value)
            taken = self._dtypes[src.index]["B"][0][[i for i, k in enumerate(kinds) if k.startswith("input:")][at]]
        return torch_dtype(sent), torch_dtype(taken)

    def _user_arg(self, stage: int, prog: str, k: int) -> Any:
        """The layout of user input ``k`` of ``stage``'s program ``prog`` ("F" / "B")."""
        return user_arg(self._layouts, stage, prog, k)

    def _schedule_module(self) -> Any:
        from spmdc.passes.pipeline_schedule import pipeline_layout

        module = boundary_module(self.split, self.plan.stages, self._layouts)
        for v in self.split.values.values():
            if v.differentiable and len({self._wire_dtype(v.index, True, c) for c in v.consumers}) > 1:
                raise NotImplementedError(f"the gradient of value '{v.name}' leaves its consumer stages "
                                          f"{list(v.consumers)} in different dtypes: they are summed on arrival")
        self._layout = pipeline_layout(module)
        from spmdc.compiler.driver import schedule_pipeline

        return schedule_pipeline(module, self.plan.schedule, self.micro, getattr(self, "_dump", None))

    def _rank_function(self, rank: int) -> Any:
        from spmdc.dialects.func import FuncOp

        return next(op for op in self.schedule_module.body.ops if isinstance(op, FuncOp)
                    and op.sym_name == f"rank{rank}")

    # -- running ------------------------------------------------------------------------------------
    def _args(self, run: Any, values: list[Any]) -> list[Any]:
        """The program's arguments: parameters and buffers (this rank's pieces), then ``values``."""
        from spmdc.runtime.dtensors import dtensor_placements

        prog, out, it = run.program, [], iter(values)
        for i, kind in enumerate(prog.step.arg_kinds):
            if kind.startswith("input:"):
                out.append(next(it))
            elif i in prog.step.buffers:
                out.append(self.buffers[i] if run is self._programs.backward else self._buffer(run, i))
            else:
                p = self.params[kind[6:]]
                local = p.to_local()
                if tuple(prog.arg_layouts[i]) != tuple(self._storage[kind[6:]]):
                    local = p.redistribute(self.device_mesh, dtensor_placements(prog.arg_layouts[i])).to_local()
                out.append(local)
        return out

    def _buffer_results(self, run: Any) -> dict[int, int]:
        """``{result index: backward argument index}`` of the buffers ``run`` updates (BatchNorm's
        running statistics: results marked ``spmdc.buffer_update``)."""
        from spmdc.compiler.compilation import main_function
        from spmdc.dialects.attrs import BUFFER_UPDATE_ATTR

        bprog = self._programs.backward.program
        where = {bprog.step.arg_kinds[i][6:]: i for i in bprog.step.buffers}
        fn, out = main_function(run.program.module), {}
        for r in range(len(run.program.step.result_kinds)):
            a = fn.res_attrs(r).get(BUFFER_UPDATE_ATTR)
            if a is not None:
                if a.value not in where:   # (the backward recomputes every forward op)
                    raise NotImplementedError(f"stage {self.stage} updates buffer '{a.value}' that its backward "
                                              "program does not read")
                out[r] = where[a.value]
        return out

    def _apply_buffer_updates(self, run: Any, outs: Sequence[Any]) -> list[Any]:
        """Copy ``run``'s buffer updates into this stage's buffers (relaid to their layout); the
        other results, in order. A stage's forward program (and the last stage's forward+backward)
        applies them, once per micro-batch; the backward's recomputed forward does not."""
        upd = self._updates.get(id(run))
        if not upd:
            return list(outs)
        prog, bprog = run.program, self._programs.backward.program
        with torch.no_grad():
            for r, i in upd.items():
                self.buffers[i].copy_(self._relayout(outs[r], prog.res_layouts[r], bprog.arg_layouts[i],
                                                     tuple(prog.step.res_shapes[r])))
        return [o for r, o in enumerate(outs) if r not in upd]

    def _buffer(self, run: Any, i: int) -> Any:
        from spmdc.runtime.executor import local_piece

        name = run.program.step.arg_kinds[i][6:]
        bprog = self._programs.backward.program
        j = next((j for j in self.buffers if bprog.step.arg_kinds[j] == f"param:{name}"), None)
        if j is not None:   # the stage's current value (its forwards update it)
            return self._relayout(self.buffers[j], bprog.arg_layouts[j], run.program.arg_layouts[i],
                                  tuple(bprog.step.arg_shapes[j]))
        full = self._init_buffers.get(name, self.mine.module.get_buffer(name))
        return local_piece(full, run.program.arg_layouts[i], self.plan.stages[self.stage].mesh,
                           self.index).to(self.device)

    def _cut(self, full: Any, layout: Any) -> Any:
        from spmdc.runtime.executor import local_piece

        return local_piece(full, layout, self.plan.stages[self.stage].mesh, self.index).to(self.device)

    def _relayout(self, local: Any, src: Any, dst: Any, shape: tuple[int, ...]) -> Any:
        if tuple(src) == tuple(dst):
            return local
        from spmdc.dialects.shard import RaggedShard, Replicate

        if all(isinstance(q, Replicate) for q in dst) and not any(isinstance(q, RaggedShard) for q in src):
            # (whole: spmdc's own gathers, counted, as ParameterStore.relayout)
            from spmdc.runtime.collectives import CountingComm
            from spmdc.runtime.executor import to_full

            return to_full(local, tuple(shape), tuple(src), CountingComm(self.comm))
        from torch.distributed.tensor import DTensor

        from spmdc.runtime.dtensors import contiguous_stride, dtensor_placements

        dt = DTensor.from_local(local, self.device_mesh, dtensor_placements(src), run_check=False,
                                shape=tuple(shape), stride=contiguous_stride(shape))
        return dt.redistribute(self.device_mesh, dtensor_placements(dst)).to_local()

    def _same_modes(self) -> None:
        """Refuse a step after the model's module modes changed: the stages were cut in the old ones."""
        from spmdc.frontend.export import ModuleModes, module_flags

        if module_flags(self._model) != self._flags:
            now = ModuleModes.of(self._model)
            raise ValueError(f"the model's module modes changed since the pipeline was built ({self._modes.describe()}"
                             f" -> {now.describe()}): its stages were cut in the old modes; set them back or call "
                             "spmdc.compile again")

    def forward(self, *inputs: Any, full: bool = False, **kwargs: Any) -> Any:
        """Refused by name: a pipeline's stages run training steps (``cm.step`` / ``cm.backward``)."""
        raise NotImplementedError(f"cm(x) of a module on pipeline plan '{self.plan.name}': neither a forward "
                                  "through the stages alone (inference) nor autograd through cm(x) and "
                                  "loss.backward() is supported on pipeline stages yet; train with cm.step(x, y) or "
                                  "cm.backward(x, y) (the loss compiled into the last stage: spmdc.compile(..., "
                                  "loss_fn=...)), or compile the model without stages")

    def backward(self, *batch: Any, **kwargs: Any) -> Any:
        """Forward and backward of the global batch (model inputs, loss inputs, keyword inputs —
        the same on every rank): every micro-batch through the schedule, the stage's gradients
        (clipped by the global norm under ``clip_grad_norm``) added into its parameters' ``.grad``
        (DTensors). Returns the loss (the mean over micro-batches) on every rank."""
        if len(batch) == 2 and all(isinstance(b, (tuple, list)) for b in batch):
            batch = tuple(batch[0]) + tuple(batch[1])
        missing = [k for k in self._kw_names if k not in kwargs]
        if missing or len(batch) != self._n_model + self._n_loss:
            raise TypeError(f"step() takes {self._n_model + self._n_loss} tensors"
                            + (f" and keywords {', '.join(self._kw_names)}" if self._kw_names else "")
                            + f", got {len(batch)}" + (f" (missing {', '.join(missing)})" if missing else ""))
        self._same_modes()
        values = list(batch) + [kwargs[k] for k in self._kw_names]
        names = [f"input #{i}" for i in range(len(batch))] + self._kw_names
        if self._local is not None:   # this rank's replica piece of each input: the global batch, on every rank
            values = self._local.assemble(values, names, self.device)
        self._input_check(tuple((tuple(v.shape), str(v.dtype)) for v in values), values,
                          [n if n.startswith("input #") else f"input '{n}'" for n in names])
        micro = chunks(values, self.micro * self.accum, names)
        grads: dict[str, Any] = {}
        self._pending = {}
        loss: Any = None
        self.last_timeline: list[tuple[str, float, float]] = []
        self.last_messages = self.last_bytes_sent = 0
        for st in self._per_stage.values():   # where each micro-batch's draws of each stage start, as on one device
            st["_rng"].begin(len(micro))
        for r in range(self.accum):   # grad_accum rounds of the schedule, gradients summed
            self._mb_offset = r * self.micro
            part = self._run_schedule(micro[r * self.micro:(r + 1) * self.micro], grads)
            loss = part if loss is None else loss + part
        for st in self._per_stage.values():
            st["_rng"].end()
        before = {n: p.grad for n, p in self.params.items()}   # a repeated backward adds to these
        self._set_grads(grads)
        loss = self._broadcast_loss(loss)
        if self.clip is not None:   # (this backward's gradients, as one device's clip_grad_norm_ in the step)
            self.last_grad_norm = self._clip_grads(self.clip)
        for n, p in self.params.items():
            if before[n] is not None:
                p.grad = before[n] if p.grad is None else before[n] + p.grad
        return loss

    def _broadcast_loss(self, loss: Any) -> Any:
        """The last stage's loss (float32, the mean over the step's micro-batches) on every rank."""
        import torch.distributed as dist

        last = self.n_stages - 1 in self.my_stages
        loss = loss if loss is not None and last else torch.zeros((), device=self.device)
        dist.broadcast(loss, src=self.plan.stages[-1].ranks[0])
        self.comm.stats.add("broadcast", loss.numel() * loss.element_size())
        return loss

    def _clip_grads(self, max_norm: float) -> Any:
        """Clip every stage's gradients by one coefficient from the global norm over the whole
        model, as ``torch.nn.utils.clip_grad_norm_`` on one device; returns the norm before
        clipping (the same on every rank). Each rank sums the squares of its gradients' local
        pieces — a piece replicated on a mesh axis counted at coordinate 0 only, a parameter
        several stages share (tied) only in the first of them — and one ``all_reduce`` of that
        scalar over the job adds them up: the only collective (gradients are already in their
        storage layouts, so the stage-local norm needs none)."""
        import torch.distributed as dist

        from spmdc.dialects.shard import Replicate

        axes = self.device_mesh.mesh_dim_names
        first = {name: min(stages) for name, (stages, *_) in self._shared_groups.items()}
        total = torch.zeros((), dtype=torch.float32, device=self.device)
        locals_ = []
        for name, p in self.params.items():
            if p.grad is None:
                continue
            local = p.grad.to_local()
            locals_.append(local)
            counted = all(self.comm.coord(axes[a]) == 0 for a, q in enumerate(self._storage[name])
                          if isinstance(q, Replicate))
            if counted and first.get(name, self.my_stages[0]) in self.my_stages:
                total = total + local.float().pow(2).sum()
        dist.all_reduce(total)
        self.comm.stats.add("all_reduce", total.numel() * total.element_size())
        norm = total.sqrt()
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for local in locals_:
            local.mul_(coef.to(local.dtype))
        return norm

    def _sum_later(self, name: str, layout: tuple[Any, ...]) -> bool:
        """Whether a gradient the training program returns in ``layout`` is summed over the step's
        micro-batches as it is and reduced once after them (:meth:`_reduce_pending`): pending sums
        (``P(sum)``) where its storage is replicated, nothing else to move (the stage's program
        leaves them so: :func:`stage_jobs`), and not a parameter two of this rank's stages share
        (interleaved: each stage's program may leave it otherwise)."""
        from spmdc.runtime.gradients import summed_later

        if name in self._pending:
            return True
        later = summed_later(layout, self._storage[name]) is not None and not (
            name in self._shared_groups and len(set(self._shared_groups[name][0]) & set(self.my_stages)) > 1)
        if later:
            self._pending[name] = layout
        return later

    def _reduce_pending(self, grads: dict[str, Any]) -> None:
        """The step's gradients left unreduced (:meth:`_sum_later`), each the sum over its
        micro-batches: all-reduced once to their storage layouts, one bucket per mesh axis
        (:func:`~spmdc.runtime.gradients.reduce_gradients`; PyTorch's schedules likewise reduce
        data-parallel gradients after the last micro-batch only)."""
        from spmdc.runtime.collectives import CountingComm
        from spmdc.runtime.gradients import reduce_gradients

        if not self._pending:
            return
        todo = {name: (grads[name], lay) for name, lay in self._pending.items() if name in grads}
        def local(fqn: str, g: Any, lay: Any) -> Any:
            return g

        grads.update(reduce_gradients(todo, self._storage, CountingComm(self.comm), local, local))
        self._pending = {}

    def _set_grads(self, grads: dict[str, Any]) -> None:
        """Reduce the gradients summed unreduced (:meth:`_reduce_pending`); sum shared parameters'
        gradients across their stages (piece by piece where the stages' meshes and layouts agree,
        else whole: :meth:`_tie_groups`), then set ``p.grad`` (DTensors)."""
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor

        from spmdc.runtime.dtensors import contiguous_stride, dtensor_placements

        self._reduce_pending(grads)

        for name, (stages, group, pieces) in self._shared_groups.items():
            if not set(self.my_stages) & set(stages) or name not in self.params:
                continue
            p = self.params[name]
            g = grads.get(name, torch.zeros_like(p.to_local()))
            if pieces:   # (the ranks at this place on each stage's mesh: the same piece)
                if group is not None:
                    g = g.contiguous()
                    dist.all_reduce(g, group=group)
                    self.comm.stats.add("all_reduce", g.numel() * g.element_size())
                grads[name] = g
                continue
            lay = self._storage[name]
            full = DTensor.from_local(g, self.device_mesh, dtensor_placements(lay), run_check=False,
                                      shape=tuple(p.shape), stride=contiguous_stride(p.shape)).full_tensor()
            if self.index != 0:
                full = torch.zeros_like(full)
            dist.all_reduce(full, group=group)
            self.comm.stats.add("all_reduce", full.numel() * full.element_size())
            grads[name] = self._cut(full, lay)
        for name, p in self.params.items():
            if name in grads and p.requires_grad:
                p.grad = DTensor.from_local(grads[name], self.device_mesh, p.placements, run_check=False,
                                            shape=tuple(p.shape), stride=contiguous_stride(p.shape))

    def _run_schedule(self, micro: list[list[Any]], grads: dict[str, Any]) -> Any:
        """One round of this rank's schedule over ``micro``; adds the gradients (each micro-batch's
        scaled by 1/(microbatches·grad_accum)) into ``grads``; returns the last stage's share of
        the loss (None elsewhere)."""
        import time

        from spmdc.dialects.pipe import BackwardOp, ForwardBackwardOp, ForwardOp, RecvOp, SendOp, StepOp

        st = StepState(self, grads)
        for op in self._rank_function(self.rank).body.ops:
            t0 = time.perf_counter()
            if "stage" in op.attributes and len(self.my_stages) > 1:   # (interleaved: the op's stage's state)
                self._use(int(op.attributes["stage"].value))
            if isinstance(op, RecvOp):
                st.recv(op)
            elif isinstance(op, SendOp):
                st.send(op)
            elif isinstance(op, (ForwardOp, ForwardBackwardOp)):
                st.forward(op, micro[op.mb], backward=isinstance(op, ForwardBackwardOp))
            elif isinstance(op, BackwardOp):
                st.backward(op, micro[op.mb])
            elif isinstance(op, StepOp):
                st.finish()
            else:
                continue
            label = {"pipe.forward": "F", "pipe.backward": "B", "pipe.forward_backward": "FB"}.get(op.name)
            if label:
                at = f"/{op.stage}" if len(self.my_stages) > 1 else ""
                self.last_timeline.append((f"{label}{op.mb}{at}", t0, time.perf_counter()))
        self.peak_stash_bytes = max(self.peak_stash_bytes, st.peak)
        self.last_messages += st.messages
        self.last_bytes_sent += st.bytes_sent
        return st.loss

    def buffer_bytes(self) -> int:
        """Bytes of the buffers this rank's stages hold (their pieces; the module's own are not registered)."""
        return sum(b.numel() * b.element_size() for st in self._per_stage.values() for b in st["buffers"].values())

    def set_schedule(self, schedule: str) -> None:
        """Run the same stage programs under another schedule (``gpipe`` / ``1f1b``): only the
        per-rank programs change; every rank calls it."""
        from spmdc.runtime.pipeline_timeline import schedule_times

        plan = self.plan.with_schedule(schedule, None)
        if len(plan.stages) != self.n_stages:
            raise NotImplementedError(f"set_schedule('{schedule}'): {len(plan.stages)} stages instead of this "
                                      f"pipeline's {self.n_stages} (virtual stages are cut at compile time: "
                                      "compile again with that schedule)")
        self.plan = plan
        self.schedule_module = self._schedule_module()
        schedule_times(self.schedule_module)   # refuses a schedule that would deadlock
        self.schedule_ir = _print(self._rank_function(self.rank))

    def timeline(self, width: int = 6) -> str:
        """Every rank's schedule as a time grid (unit time per forward, two per backward or per
        last-stage forward+backward, messages taking no time): where the bubbles are."""
        from spmdc.runtime.pipeline_timeline import simulate

        return simulate(self.schedule_module, width)


class _Groups:
    def __init__(self, stages: Sequence[Any]):
        self.groups = stages


def _print(op: Any) -> str:
    from spmdc.ir.printer import op_to_string

    return op_to_string(op)
