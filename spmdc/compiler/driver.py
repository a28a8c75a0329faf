"""The compiler driver: a model and a plan in, one program per rank out.

:func:`compile_program` is the whole compiler, one line per stage::

    c = compile_program(Compilation.of_model(model, (x,), mesh=Mesh({"dp": 2}), plan="fsdp", rank=1,
                                             train=True, loss_fn=F.mse_loss, dump=Dump("ir", "gen")))
    c.program.fn(local_args, comm)        # rank 1's RankProgram: its IR, generated code, layouts

A job runs the stages in two places: the global ones (00-05) once, where the program is captured,
and the per-rank ones (06-09) on every rank from the global program's text (a picklable
:class:`~spmdc.compiler.program.CompiledStep`). The public functions are those two halves::

    step = compile_global(model, (x,), mesh=Mesh({"dp": 2}), plan="fsdp", train=True, loss_fn=F.mse_loss)
    prog = compile_rank(step, rank, target="triton", dump=Dump("ir", "gen"))
    outs = prog.fn(local_args, comm)

``compile_groups`` (:mod:`spmdc.compiler.device_groups`) is 00-05 for every device group. With a
:class:`~spmdc.compiler.dump.Dump`, each stage writes what it produced as
``<ir_dir>/<program>/stages/NN-<stage>.mlir`` (besides the IR after every pass); see docs/passes.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spmdc.compiler.compilation import Compilation, GroupProgram, main_function, stage
from spmdc.compiler.dump import STAGES, Dump, IRWriter
from spmdc.compiler.options import CompileOptions
from spmdc.compiler.pass_pipeline import TARGETS, PipelineOptions, stages
from spmdc.compiler.plan_resolution import conv1d_modules, heads_of, kv_heads_of, plan_for
from spmdc.compiler.program import CompiledStep, Layout, RankProgram
from spmdc.dialects.attrs import GROUP_INDEX_ATTR
from spmdc.dialects.shard import SHARDING_ATTR, Replicate
from spmdc.ir.core import Operation
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.ir.verifier import verify
from spmdc.passes.manager import PassManager
from spmdc.passes.registry import parse_pipeline
from spmdc.sharding.plan import Plan, axes_sharded_by, check_axes_used

__all__ = ["STAGES", "Compilation", "GroupProgram", "compile_global", "compile_program", "compile_rank",
           "conv1d_modules", "default_target", "heads_of", "kv_heads_of", "layout_of_attrs", "main_function",
           "plan_for",
           "rank_codegen", "rank_module", "rank_stages", "schedule_pipeline", "split_example_inputs"]


def default_target() -> str:
    """Triton on GPUs, aten (torch) on CPUs, where Triton only runs in its slow interpreter."""
    import torch

    return "triton" if torch.cuda.is_available() else "torch"


# -- the compiler --------------------------------------------------------------------------------

def compile_program(c: Compilation) -> Compilation:
    """Every stage in order, each dumped as ``stages/NN-<stage>.mlir``; ``c.first``/``c.last`` say
    which run here (the global ones where the model is captured, the per-rank ones on each rank)."""
    from spmdc.ir.gc_pause import gc_paused

    capture(c)            # 00 torch.export + torch-mlir import → the global program (tensor dialect)
    with gc_paused():     # (the IR's stages stay linear in ops: spmdc.ir.gc_pause)
        prepare(c)            # 01 canonicalize, cse (+ philox-rng): a tidy single-device graph
        plan_layouts(c)       # 02 the plan's layouts as shard.sharding attributes (data, not a pass)
        clip_gradients(c)     # 03 clip_grad_norm: the global norm of the gradients, each scaled by it
        global_passes(c)      # 04 sharding-propagation, insert-redistribution, lower-redistribution
        resolve_groups(c)     # 05 device groups: moves on 'grp' → comm.split_all_reduce over the groups' ranks
        partition(c)          # 06 one rank's program: local shapes (partition{rank=r}), fuse-collectives, cleanup
        rank_passes(c)        # 07 bucket-collectives, schedule-collectives, fuse-kernels (as the options say)
        pipeline_stage(c)     # 08 pipeline plans: the schedule spans every stage's programs (schedule_pipeline)
        codegen(c)            # 09 the Python / Triton module the rank loads, and its argument layouts
    return c


def _run(passes: str, module: Operation, writer: IRWriter | None, after: Callable | None = None,
         verify_each: bool = True) -> None:
    """Run a stage's passes; ``verify_each=False`` verifies once, after the stage's last pass."""
    def on_after(p: Any, m: Operation, index: int) -> None:
        if after is not None:
            after(p, m, index)
        if writer is not None:
            writer.after_pass(p, m, index)
    PassManager(parse_pipeline(passes), on_after_pass=on_after, verify_each=verify_each).run(module)
    if not verify_each:
        verify(module)


# -- the global stages (once per job, on every device group's program) ---------------------------

@stage("capture")
def capture(c: Compilation) -> None:
    from spmdc.frontend.capture import capture_program

    for g in c.groups:
        checkpoint = c.options.checkpoint
        if checkpoint is None and isinstance(g.plan, Plan):
            checkpoint = g.plan.checkpoint
        g.captured = capture_program(c.model, c.inputs, train=c.train, loss_fn=c.loss_fn, loss_inputs=c.loss_inputs,
                                     example_kwargs=c.kwargs, checkpoint=checkpoint,
                                     mixed_precision=c.options.mixed_precision,
                                     return_outputs=c.options.vjp_pause is not None)
        g.module = g.captured.module
        g.writer = c.dump.ir_writer(c.name, "global" if g.group is None else f"global-{g.group}") if c.dump else None
        if g.writer:
            g.writer.write("captured", g.module)
    c.started = time.perf_counter()


@stage("prepare")
def prepare(c: Compilation) -> None:
    passes = next(s.passes for s in stages(PipelineOptions(rng=c.options.rng)) if s.name == "prepare")
    for g in c.groups:
        _run(passes, g.module, g.writer, verify_each=c.options.verify_each)


@stage("plan")
def plan_layouts(c: Compilation) -> None:
    from spmdc.ir.attributes import IntegerAttr
    from spmdc.sharding.apply import apply_plan, planned_layouts
    from spmdc.sharding.device_groups import GroupPlan

    for g in c.groups:
        func = main_function(g.module)
        g.resolved = plan_for(g.plan, g.mesh, func, c.model)
        apply_plan(g.module, g.mesh, g.resolved, reduce_grads="sharded" if c.partial_grads == "replicated"
                   else not c.partial_grads)
        if isinstance(g.plan, GroupPlan):   # runs at coordinate plan.index of the virtual mesh's grp axis
            func.set_attr(GROUP_INDEX_ATTR, IntegerAttr(g.plan.index))
        else:   # a mesh axis no planned layout uses would make ranks repeat each other (PlanError)
            check_axes_used(g.mesh, axes_sharded_by(planned_layouts(func), g.mesh), g.resolved.name)


@stage("clipping")
def clip_gradients(c: Compilation) -> str | None:
    from spmdc.compiler.clipping import add_gradient_clipping

    applies = c.options.clip_grad_norm is not None and c.train
    for g in c.groups:
        if applies:
            add_gradient_clipping(g.module, c.options.clip_grad_norm)
        if g.writer:
            g.writer.write("planned", g.module)
    return None if applies else "not applied (clip_grad_norm is not set, or not a training step)"


@stage("global")
def global_passes(c: Compilation) -> None:
    passes = ",".join(s.passes for s in stages(c.options.passes(rank=0, target="torch"))
                      if not s.per_rank and s.name != "prepare")
    for g in c.groups:
        def keep(p: Any, m: Operation, _index: int, g: GroupProgram = g) -> None:
            if c.options.execution == "eager" and p.name == "sharding-propagation":
                g.propagated = print_module(m, debuginfo=True)
        _run(passes, g.module, g.writer, keep, verify_each=c.options.verify_each)


@stage("cross-group")
def resolve_groups(c: Compilation) -> str | None:
    if c.hetero is None:
        return "not applied (one mesh, no device groups)"
    from spmdc.passes.cross_group import GroupSpec, resolve_cross_group

    specs = [GroupSpec(g.name, g.mesh.axis_names, g.mesh.shape, g.ranks) for g in c.hetero.groups]
    resolve_cross_group([g.module for g in c.groups], specs)
    for g in c.groups:
        if g.writer:
            g.writer.write("after-cross-group", g.module)
    return None


# -- the per-rank stages (on every rank, from its own copy of the global program) ----------------

def _rank_pass_stages(c: Compilation) -> list[Any]:
    assert c.step is not None
    return [s for s in stages(c.step.options.passes(c.at, c.target)) if s.per_rank]


@stage("partition")
def partition(c: Compilation) -> None:
    if c.step is None:   # compiled in this process: the rank's group's program, at its virtual rank
        steps = c.steps()
        g = c.hetero.group_of(c.rank) if c.hetero is not None else 0
        c.step, c.at = steps[g], c.hetero.virtual_rank(g, c.rank) if c.hetero is not None else c.rank
    c.target = c.target or c.step.options.resolved_target()
    if c.target not in TARGETS:
        raise ValueError(f"unknown codegen target '{c.target}' (choices: {', '.join(TARGETS)})")
    c.module = c.parsed.clone() if c.parsed is not None else parse_module(c.step.global_ir, "<global>")
    c.writer = c.dump.ir_writer(c.step.name, f"rank{c.at}") if c.dump else None
    _run(_rank_pass_stages(c)[0].passes, c.module, c.writer,   # the "rank" stage: partition{rank=r}, ...
         verify_each=c.step.options.verify_each)


@stage("rank-passes")
def rank_passes(c: Compilation) -> str | None:
    assert c.module is not None
    later = _rank_pass_stages(c)[1:]
    for s in later:
        if s.name == "kernels":
            c.unfused = c.module.clone()
        _run(s.passes, c.module, c.writer, verify_each=c.step.options.verify_each)
    return None if later else "no per-rank passes (bucket and overlap off, target torch)"


@stage("pipeline-schedule")
def pipeline_stage(c: Compilation) -> str:
    return ("not applied to one program: a pipeline plan's schedule spans every stage's programs "
            "(schedule_pipeline, <ir_dir>/pipeline/stages/08-pipeline-schedule.mlir)")


@stage("codegen")
def codegen(c: Compilation) -> None:
    from spmdc.codegen.cache import load_source
    from spmdc.codegen.kernel_stats import kernel_stats

    assert c.step is not None and c.module is not None and c.target is not None
    fn, path, source = load_source(c.module, "main", target=c.target)
    if c.dump:
        c.dump.write_code(c.step.name, c.at, source)
    func = main_function(c.module)
    n_axes = len(c.step.mesh.axes)
    arg_layouts = [layout_of_attrs(func.arg_attrs(i), n_axes) for i in range(len(func.args))]
    res_layouts = [layout_of_attrs(func.res_attrs(i), n_axes) for i in range(len(c.step.res_shapes))]
    stats = kernel_stats(c.module, before=c.unfused) if c.unfused is not None else None
    c.program = RankProgram(c.step, c.at, c.target, c.module, source, path, fn, arg_layouts, res_layouts, stats)


def layout_of_attrs(attrs: dict[str, Any], n_axes: int) -> Layout:
    """The layout an argument's or result's attributes give (replicated when it has none)."""
    s = attrs.get(SHARDING_ATTR)
    return tuple(s.placements) if s is not None else tuple(Replicate() for _ in range(n_axes))


def schedule_pipeline(module: Operation, schedule: str, microbatches: int, dump: Dump | None = None) -> Operation:
    """Stage 08 for a pipeline plan: ``pipeline-schedule`` on the pipeline module (stage meshes and
    ``pipe.boundary`` values with their layouts, built from every stage's programs) appends each
    rank's schedule; dumped as ``<ir_dir>/pipeline/stages/08-pipeline-schedule.mlir``."""
    from spmdc.passes.pipeline_schedule import PipelineSchedule

    PipelineSchedule(schedule, microbatches).run(module)
    if dump is not None:
        dump.write_stage("pipeline", "pipeline-schedule", f"// 08 pipeline-schedule: {schedule}, {microbatches} "
                         "micro-batches\n" + print_module(module, debuginfo=True))
    return module


# -- the two halves, as the job runs them ---------------------------------------------------------

def compile_global(model: Any, inputs: Sequence[Any], *, mesh: Any, plan: str | Plan, train: bool = False,
                   loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (), dump: Dump | None = None,
                   kwargs: Mapping[str, Any] | None = None, partial_grads: bool | str = False,
                   options: CompileOptions | None = None, **option_kw: Any) -> CompiledStep:
    """Stages 00-05 of :func:`compile_program`: capture ``model``, apply ``plan`` on ``mesh``, run the global passes.

    ``options`` (:class:`~spmdc.compiler.options.CompileOptions`, with any keyword options
    ``option_kw`` replaced: ``compile_global(..., bucket=False)``) says how: ``rng``,
    ``checkpoint`` (default: the plan's ``checkpoint``), ``clip_grad_norm`` (the step returns
    gradients clipped to that global norm, and the norm: :mod:`spmdc.compiler.clipping`),
    ``mixed_precision`` (:mod:`spmdc.frontend.mixed_precision`); the per-rank ones travel with the
    step to :func:`compile_rank`; ``execution="eager"`` also keeps the program as sharding
    propagation left it (``propagated_ir``), which :mod:`spmdc.api.eager` runs op by op.
    ``kwargs``: keyword model inputs (``labels=`` for HuggingFace models); they become the
    program's last user inputs, in their order. ``mesh``: a Mesh, ``"dp=2,tp=2"``, ``{"dp": 2}``
    or a named DeviceMesh. ``partial_grads``: gradients are returned before their reduction
    (``P(sum)`` where the batch is split), for gradient accumulation; ``"replicated"``: only
    when no trained parameter is stored sharded where the batch is split
    (:func:`~spmdc.sharding.apply.caller_sums_grads`; a pipeline stage's training program)."""
    opts = CompileOptions.of(options, "compile_global", **option_kw)
    c = Compilation.of_model(model, inputs, mesh=mesh, plan=plan, train=train, loss_fn=loss_fn,
                             loss_inputs=loss_inputs, kwargs=kwargs, partial_grads=partial_grads, dump=dump,
                             options=opts, last="cross-group")
    return compile_program(c).steps()[0]


def rank_module(step: CompiledStep, rank: int, target: str = "torch",
                dump: Dump | None = None, parsed: Operation | None = None) -> Operation:
    """Rank ``rank``'s program: its copy of the global program through stages 06-07 (no code generation).
    ``parsed``: ``step.global_ir`` parsed once already, cloned here instead of parsed again (the
    dry run compiles several ranks' programs from one global program)."""
    c = Compilation.of_step(step, rank, target, dump, last="rank-passes")
    c.parsed = parsed
    module = compile_program(c).module
    assert module is not None
    return module


def rank_stages(step: CompiledStep, rank: int, target: str = "torch", dump: Dump | None = None,
                parsed: Operation | None = None) -> Compilation:
    """Stages 06-08 of rank ``rank`` (from the compile cache when this program was compiled before:
    :func:`~spmdc.compiler.compile_cache.cached_rank_stages`); ``rank_codegen`` finishes it."""
    from spmdc.compiler.compile_cache import cached_rank_stages

    c = Compilation.of_step(step, rank, target, dump, last="pipeline-schedule")
    c.parsed = parsed
    cached_rank_stages(c, compile_program)
    return c


def rank_codegen(c: Compilation, rank: int | None = None) -> RankProgram:
    """Stage 09 of a compilation whose stages 06-08 ran (:func:`rank_stages`), for rank ``rank``
    (default the one compiled): ranks of one role (:mod:`spmdc.passes.partition_roles`) run one
    program, each with its own rank (which pieces of the arguments it holds)."""
    if rank is not None:
        c.at = rank
    c.first = c.last = "codegen"
    program = compile_program(c).program
    assert program is not None
    return program


def compile_rank(step: CompiledStep, rank: int, target: str = "torch", dump: Dump | None = None) -> RankProgram:
    """Stages 06-09: rank ``rank``'s program, its generated code (loaded) and the layouts of its arguments.

    Stages 06-08 come from the compile cache when this rank's program was compiled before
    (:func:`~spmdc.compiler.compile_cache.cached_rank_stages`; the generated code from the codegen cache).
    A job's ranks share one program per role instead: :func:`spmdc.api.compile_shared.compile_rank_shared`."""
    return rank_codegen(rank_stages(step, rank, target, dump))


def split_example_inputs(example_inputs: Any, loss_fn: Callable | None,
                         loss_inputs: Sequence[Any] = ()) -> tuple[tuple, tuple]:
    """``(model inputs, loss inputs)`` from ``example_inputs`` (which may be ``((x,), (y,))``)."""
    from spmdc.frontend.capture import split_inputs

    model_args, extra = split_inputs(example_inputs, loss_fn)
    return model_args, tuple(loss_inputs) + extra
