"""The compiler driver: a model and a plan in, one program per rank out.

    step = compile_global(model, (x,), mesh=Mesh({"dp": 2}), plan="fsdp", train=True, loss_fn=F.mse_loss)
    prog = compile_rank(step, rank, target="triton", dump=Dump("ir", "gen"))
    outs = prog.fn(local_args, comm)

:func:`compile_global` captures the model (:mod:`spmdc.frontend`), runs the ``prepare``
stage, applies the plan and runs the ``global`` stage (:mod:`spmdc.compiler.pass_pipeline`);
:func:`compile_rank` parses the rank's own copy of the global program, runs the per-rank
stages and generates the code that rank loads. Dumps are written from these very objects.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spmdc.compiler.dump import Dump, hook, program_name
from spmdc.compiler.options import CompileOptions
from spmdc.compiler.pass_pipeline import TARGETS, PipelineOptions, stages
from spmdc.compiler.program import CompiledStep, Layout, RankProgram
from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import SHARDING_ATTR, Replicate
from spmdc.ir.core import Operation
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.passes.manager import PassManager
from spmdc.passes.registry import parse_pipeline
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Plan, axes_sharded_by, check_axes_used, check_fsdp_shard, preset


def default_target() -> str:
    """Triton on GPUs, aten (torch) on CPUs, where Triton only runs in its slow interpreter."""
    import torch

    return "triton" if torch.cuda.is_available() else "torch"


def main_function(module: Operation) -> FuncOp:
    return next(op for op in module.body.ops if isinstance(op, FuncOp))  # type: ignore[attr-defined]


def kv_heads_of(model: Any) -> dict[str, int]:
    """Attention module path → its number of key/value heads, for modules with a ``k_proj``
    (or ``key``) child that say it: ``num_key_value_heads`` / ``n_kv_head(s)`` /
    ``num_kv_heads``, or their ``config.num_key_value_heads`` (Hugging Face)."""
    out: dict[str, int] = {}
    if model is None or not hasattr(model, "named_modules"):
        return out
    for path, m in model.named_modules():
        if not any(hasattr(m, c) for c in ("k_proj", "key")):
            continue
        for name in ("num_key_value_heads", "n_kv_head", "n_kv_heads", "num_kv_heads"):
            v = getattr(m, name, None)
            if isinstance(v, int):
                out[path] = v
                break
        else:
            v = getattr(getattr(m, "config", None), "num_key_value_heads", None)
            if isinstance(v, int):
                out[path] = v
    return out


HEAD_COUNT_NAMES = ("num_heads", "n_head", "num_attention_heads", "n_heads", "nhead")


def heads_of(model: Any) -> dict[str, int]:
    """Module path → its number of attention heads, for modules that say it
    (``num_heads`` / ``n_head`` / ``num_attention_heads`` / ``n_heads``, or their ``config``)."""
    out: dict[str, int] = {}
    if model is None or not hasattr(model, "named_modules"):
        return out
    for path, m in model.named_modules():
        for name in HEAD_COUNT_NAMES:
            v = getattr(m, name, None)
            if isinstance(v, int) and v > 0:
                out[path] = v
                break
    return out


def conv1d_modules(model: Any) -> set[str]:
    """Paths of modules whose ``weight`` is ``[in, out]`` (HuggingFace's ``Conv1D``, GPT-2's
    ``c_attn``/``c_fc``/``c_proj``), so that presets transpose their column/row layouts."""
    if model is None or not hasattr(model, "named_modules"):
        return set()
    return {path for path, m in model.named_modules() if type(m).__name__ == "Conv1D"}


def _preset(name: str, mesh: Mesh, params: dict, in_ranks: list, out_ranks: list, model: Any,
            fsdp_shard: str = "even") -> Plan:
    return preset(name, mesh, params, in_ranks, out_ranks, kv_heads=kv_heads_of(model), heads=heads_of(model),
                  transposed=conv1d_modules(model), fsdp_shard=fsdp_shard)


def plan_for(plan: str | Plan, mesh: Mesh, func: FuncOp, model: Any = None) -> Plan:
    """A preset name (or a plan refining a preset) resolved against the captured function's
    parameters and inputs (a :class:`~spmdc.sharding.device_groups.GroupPlan`: the group's preset on its
    virtual mesh, with the batch split across the groups)."""
    from spmdc.sharding.device_groups import GroupPlan

    if isinstance(plan, GroupPlan):
        base = plan_for(plan.base, mesh, func, model)
        users = [a for i, a in enumerate(func.args) if "spmdc.param" not in func.arg_attrs(i)]
        return plan.extend(base, [a.type.shape for a in users],  # type: ignore[attr-defined]
                           [a.name_hint or f"arg{a.index}" for a in users])
    if isinstance(plan, Plan) and plan.preset is None:
        check_fsdp_shard(plan.fsdp_shard, None)
        return plan
    from spmdc.sharding.apply import is_model_output

    params, in_ranks = {}, []
    for i, a in enumerate(func.args):
        attrs = func.arg_attrs(i)
        p = attrs.get("spmdc.param")
        if p is None:
            in_ranks.append(a.type.rank)  # type: ignore[attr-defined]
        elif "spmdc.buffer" not in attrs:  # buffers stay replicated (and are not inputs)
            params[p.value] = a.type.shape  # type: ignore[attr-defined]
    out_ranks = [v.type.rank for i, v in enumerate(func.return_op.operands)  # type: ignore[attr-defined]
                 if is_model_output(func, i)]
    if isinstance(plan, Plan):   # a preset with the plan's own buckets / resharding / checkpointing
        base = _preset(plan.preset, mesh, params, in_ranks, out_ranks, model, plan.fsdp_shard)
        return dataclasses.replace(base, reshard_after_forward=plan.reshard_after_forward, name=plan.name,
                                   checkpoint=plan.checkpoint, buckets=plan.buckets)
    return _preset(plan, mesh, params, in_ranks, out_ranks, model)


def compile_global(model: Any, inputs: Sequence[Any], *, mesh: Any, plan: str | Plan, train: bool = False,
                   loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (), dump: Dump | None = None,
                   kwargs: Mapping[str, Any] | None = None, partial_grads: bool = False,
                   options: CompileOptions | None = None, **option_kw: Any) -> CompiledStep:
    """Capture ``model``, apply ``plan`` on ``mesh`` and run the global stages.

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
    (``P(sum)`` where the batch is split), for gradient accumulation."""
    from spmdc.frontend.capture import capture_program
    from spmdc.sharding.apply import apply_plan, planned_layouts

    opts = CompileOptions.of(options, "compile_global", **option_kw)
    kwargs = dict(kwargs or {})
    checkpoint = opts.checkpoint
    if checkpoint is None and isinstance(plan, Plan):
        checkpoint = plan.checkpoint
    cap = capture_program(model, tuple(inputs), train=train, loss_fn=loss_fn, loss_inputs=tuple(loss_inputs),
                          example_kwargs=kwargs, checkpoint=checkpoint, mixed_precision=opts.mixed_precision)
    module, name = cap.module, program_name(train)
    func = main_function(module)
    resolved = plan_for(plan, mesh, func, model)
    t = time.perf_counter()
    writer = dump.ir_writer(name, "global") if dump else None
    if writer:
        writer.write("captured", module)
    prepare, *global_stages = [s for s in stages(PipelineOptions(rng=opts.rng)) if not s.per_rank]
    PassManager(parse_pipeline(prepare.passes), on_after_pass=hook(writer)).run(module)
    apply_plan(module, mesh, resolved, reduce_grads=not partial_grads)   # the plan is data, not a pass
    from spmdc.sharding.device_groups import GroupPlan

    if isinstance(plan, GroupPlan):   # runs at coordinate plan.index of the virtual mesh's grp axis
        from spmdc.ir.attributes import IntegerAttr

        func.set_attr("spmdc.group_index", IntegerAttr(plan.index))
    else:   # a mesh axis no planned layout uses would make ranks repeat each other (PlanError)
        check_axes_used(mesh, axes_sharded_by(planned_layouts(func), mesh), resolved.name)
    if opts.clip_grad_norm is not None and train:
        from spmdc.compiler.clipping import add_gradient_clipping

        add_gradient_clipping(module, opts.clip_grad_norm)
    if writer:
        writer.write("planned", module)
    propagated: list[str] = []
    for stage in global_stages:
        after = hook(writer)

        def keep(p: Any, m: Any, index: int, after: Any = after) -> None:
            if opts.execution == "eager" and p.name == "sharding-propagation":
                propagated.append(print_module(m, debuginfo=True))
            if after is not None:
                after(p, m, index)
        PassManager(parse_pipeline(stage.passes), on_after_pass=keep).run(module)
    timings = dict(cap.timings)
    timings["sharding"] = time.perf_counter() - t
    user_inputs = (list(inputs) + list(loss_inputs) if train else list(inputs)) + list(kwargs.values())
    args = [a.detach().clone() if hasattr(a, "detach") else a for a in cap.arguments(*user_inputs)]
    return CompiledStep(print_module(module, debuginfo=True), mesh, resolved.name, args, *_signature(func),
                        timings=timings, options=opts, name=name, propagated_ir=propagated[0] if propagated else "")


def _signature(func: FuncOp) -> tuple[list[str], list[str], list[tuple[int, ...]], list[tuple[int, ...]], set[int]]:
    """Argument kinds, result kinds, global shapes and buffer positions of ``@main``."""
    arg_kinds = []
    for i, a in enumerate(func.args):
        p = func.arg_attrs(i).get("spmdc.param")
        arg_kinds.append(f"param:{p.value}" if p is not None else f"input:{a.name_hint}")  # type: ignore[attr-defined]
    result_kinds = []
    for i in range(len(func.return_op.operands)):
        attrs = func.res_attrs(i)
        if "spmdc.loss" in attrs:
            result_kinds.append("loss")
        elif "spmdc.grad_norm" in attrs:
            result_kinds.append("grad_norm")
        elif "spmdc.grad_of_input" in attrs:   # the gradient of user input k (a pipeline stage's)
            result_kinds.append(f"grad_input:{attrs['spmdc.grad_of_input'].value}")  # type: ignore[attr-defined]
        elif "spmdc.grad_of" in attrs:
            result_kinds.append("grad:" + attrs["spmdc.grad_of"].value)  # type: ignore[attr-defined]
        else:
            result_kinds.append("output")
    fn = func.function_type
    buffers = {i for i in range(len(func.args)) if "spmdc.buffer" in func.arg_attrs(i)}
    return (arg_kinds, result_kinds, [tuple(t.shape) for t in fn.inputs],  # type: ignore[attr-defined]
            [tuple(t.shape) for t in fn.results], buffers)  # type: ignore[attr-defined]


def rank_module(step: CompiledStep, rank: int, target: str = "torch",
                dump: Dump | None = None) -> Operation:
    """Rank ``rank``'s program: its copy of the global program through the per-rank stages."""
    return _rank_stages(step, rank, target, dump)[0]


def _rank_stages(step: CompiledStep, rank: int, target: str, dump: Dump | None) -> tuple[Operation, Operation | None]:
    """The rank's program, and (target triton) a copy of it before the kernel stage."""
    if target not in TARGETS:
        raise ValueError(f"unknown codegen target '{target}' (choices: {', '.join(TARGETS)})")
    module = parse_module(step.global_ir, "<global>")
    writer = dump.ir_writer(step.name, f"rank{rank}") if dump else None
    unfused = None
    for stage in stages(step.options.passes(rank, target)):
        if not stage.per_rank:
            continue
        if stage.name == "kernels":
            unfused = module.clone()
        PassManager(parse_pipeline(stage.passes), on_after_pass=hook(writer)).run(module)
    return module, unfused


def compile_rank(step: CompiledStep, rank: int, target: str = "torch", dump: Dump | None = None) -> RankProgram:
    """Rank ``rank``'s program, its generated code (loaded) and the layouts of its arguments."""
    from spmdc.codegen.cache import load_source
    from spmdc.codegen.kernel_stats import kernel_stats

    module, unfused = _rank_stages(step, rank, target, dump)
    fn, path, source = load_source(module, "main", target=target)
    if dump:
        dump.write_code(step.name, rank, source)
    func = main_function(module)
    n_axes = len(step.mesh.axes)
    arg_layouts = [_layout(func.arg_attrs(i), n_axes) for i in range(len(func.args))]
    res_layouts = [_layout(func.res_attrs(i), n_axes) for i in range(len(step.res_shapes))]
    stats = kernel_stats(module, before=unfused) if unfused is not None else None
    return RankProgram(step, rank, target, module, source, path, fn, arg_layouts, res_layouts, stats)


def _layout(attrs: dict[str, Any], n_axes: int) -> Layout:
    s = attrs.get(SHARDING_ATTR)
    return tuple(s.placements) if s is not None else tuple(Replicate() for _ in range(n_axes))


def split_example_inputs(example_inputs: Any, loss_fn: Callable | None,
                         loss_inputs: Sequence[Any] = ()) -> tuple[tuple, tuple]:
    """``(model inputs, loss inputs)`` from ``example_inputs`` (which may be ``((x,), (y,))``)."""
    from spmdc.frontend.capture import split_inputs

    model_args, extra = split_inputs(example_inputs, loss_fn)
    return model_args, tuple(loss_inputs) + extra
