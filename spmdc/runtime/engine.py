"""Compile a model for a mesh and plan, then run its per-rank programs on real ranks.

    step = compile_step(model, inputs, mesh=Mesh({"dp": 2}), plan="fsdp", train=True, loss_fn=F.mse_loss)
    results = launch(run_case_worker, 2, (step.to_payload(),))    # see tests/unit/runtime

The global program is captured once, annotated with the plan, propagated, and its
redistributions lowered (``comm`` ops on global values); each rank partitions its own
copy (``partition{rank=r}``), cleans it up, and interprets it with collectives on
torch.distributed. Parameters are placed by cutting each rank's piece out of the
single-device initialization, so both runs start from identical values.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from spmdc.ir.core import Operation
from spmdc.dialects.shard import Partial, Replicate, Shard
from spmdc.sharding.mesh import Mesh, local_offset, local_shape
from spmdc.sharding.plan import Plan, preset

PREPARE_PIPELINE = "canonicalize,cse"
GLOBAL_PIPELINE = "sharding-propagation,insert-redistribution,lower-redistribution"
RANK_PIPELINE = "partition{{rank={rank}}},fuse-collectives,cse,dce,canonicalize"
KERNEL_PIPELINE = "fuse-kernels,dce"   # after RANK_PIPELINE when the codegen target is triton


@dataclass
class CompiledStep:
    """A captured program laid out over a mesh: IR text plus what a rank needs to run it."""

    global_ir: str
    mesh: Mesh
    plan_name: str
    arguments: list[Any]             # single-device argument values of @main, in order
    arg_kinds: list[str]             # "param:<fqn>" or "input:<name>"
    result_kinds: list[str]          # "loss" | "grad:<fqn>" | "output"
    timings: dict[str, float] = field(default_factory=dict)
    bucket: bool = False             # run bucket-collectives on each rank's program

    def rank_module(self, rank: int, dump_dir: str | None = None) -> Operation:
        from spmdc.ir.parser import parse_module
        from spmdc.passes.manager import PassManager
        from spmdc.passes.registry import parse_pipeline

        module = parse_module(self.global_ir, "<global>")
        pipeline = RANK_PIPELINE.format(rank=rank) + (",bucket-collectives" if self.bucket else "")
        PassManager(parse_pipeline(pipeline),
                    on_after_pass=ir_dumper(dump_dir, f"rank{rank}-") if dump_dir else None).run(module)
        return module


def plan_for(plan: str | Plan, mesh: Mesh, func: Operation) -> Plan:
    if isinstance(plan, Plan):
        return plan
    from spmdc.sharding.apply import is_model_output

    params, in_ranks = {}, []
    for i, a in enumerate(func.args):  # type: ignore[attr-defined]
        attrs = func.arg_attrs(i)  # type: ignore[attr-defined]
        p = attrs.get("spmdc.param")
        if p is not None and "spmdc.buffer" not in attrs:  # buffers stay replicated
            params[p.value] = a.type.shape
        else:
            in_ranks.append(a.type.rank)
    out_ranks = [v.type.rank for i, v in enumerate(func.return_op.operands)  # type: ignore[attr-defined]
                 if is_model_output(func, i)]
    return preset(plan, mesh, params, in_ranks, out_ranks)


def ir_dumper(dump_dir: str, prefix: str = "") -> Callable[[Any, Operation, int], None]:
    """A pass-manager hook writing ``<dir>/<prefix>NN-after-<pass>.mlir`` after every pass."""
    import os

    from spmdc.ir.printer import print_module

    os.makedirs(dump_dir, exist_ok=True)
    counter = [0]

    def dump(p: Any, module: Operation, _index: int) -> None:
        counter[0] += 1
        name = f"{prefix}{counter[0]:02d}-after-{p.name}.mlir"
        with open(os.path.join(dump_dir, name), "w", encoding="utf-8") as f:
            f.write(print_module(module, debuginfo=True))

    return dump


def compile_step(model: Any, inputs: Sequence[Any], *, mesh: Mesh, plan: str | Plan, train: bool = False,
                 loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                 dump_dir: str | None = None, bucket: bool = False) -> CompiledStep:
    """Capture, apply the plan and run the global sharding pipeline."""
    import time

    from spmdc.dialects.func import FuncOp
    from spmdc.frontend.capture import capture_program
    from spmdc.ir.printer import print_module
    from spmdc.passes.manager import PassManager
    from spmdc.passes.registry import parse_pipeline
    from spmdc.sharding.apply import apply_plan

    cap = capture_program(model, tuple(inputs), train=train, loss_fn=loss_fn, loss_inputs=tuple(loss_inputs))
    module = cap.module
    func = next(op for op in module.body.ops if isinstance(op, FuncOp))
    resolved_plan = plan_for(plan, mesh, func)
    t = time.perf_counter()
    hook = ir_dumper(dump_dir) if dump_dir else None
    if dump_dir:
        import os

        with open(os.path.join(dump_dir, "00-captured.mlir"), "w", encoding="utf-8") as f:
            f.write(print_module(module, debuginfo=True))
    PassManager(parse_pipeline(PREPARE_PIPELINE), on_after_pass=hook).run(module)
    apply_plan(module, mesh, resolved_plan)
    if dump_dir:
        with open(os.path.join(dump_dir, "00-planned.mlir"), "w", encoding="utf-8") as f:
            f.write(print_module(module, debuginfo=True))
    PassManager(parse_pipeline(GLOBAL_PIPELINE), on_after_pass=hook).run(module)
    timings = dict(cap.timings)
    timings["sharding"] = time.perf_counter() - t
    user_inputs = list(inputs) + list(loss_inputs) if train else list(inputs)
    args = [a.detach().clone() if hasattr(a, "detach") else a for a in cap.arguments(*user_inputs)]
    arg_kinds = []
    for i, a in enumerate(func.args):
        p = func.arg_attrs(i).get("spmdc.param")
        arg_kinds.append(f"param:{p.value}" if p is not None else f"input:{a.name_hint}")
    result_kinds = []
    for i in range(len(func.return_op.operands)):
        attrs = func.res_attrs(i)
        if "spmdc.loss" in attrs:
            result_kinds.append("loss")
        elif "spmdc.grad_of" in attrs:
            result_kinds.append("grad:" + attrs["spmdc.grad_of"].value)  # type: ignore[attr-defined]
        else:
            result_kinds.append("output")
    return CompiledStep(print_module(module, debuginfo=True), mesh, resolved_plan.name, args, arg_kinds, result_kinds,
                        timings, bucket)


# -- on a rank ------------------------------------------------------------------------------------

def mesh_coords(mesh: Mesh, rank: int) -> tuple[int, ...]:
    c = mesh.coords(rank)
    return tuple(c[a] for a in mesh.axis_names)


def local_piece(full: Any, layout: Sequence[Any], mesh: Mesh, rank: int) -> Any:
    """This rank's piece of a replicated single-device tensor (Partial: rank 0 of the axis holds it)."""
    coords = mesh_coords(mesh, rank)
    shape = tuple(full.shape)
    off = local_offset(shape, tuple(layout), mesh.shape, coords)
    size = local_shape(shape, tuple(layout), mesh.shape, coords)
    t = full
    for d, (o, s) in enumerate(zip(off, size)):
        if s != shape[d]:
            t = t.narrow(d, o, s)
    for p, c in zip(layout, coords):
        if isinstance(p, Partial) and c != 0:
            t = t * 0
    return t.contiguous()


def to_full(local: Any, global_shape: tuple[int, ...], layout: Sequence[Any], comm: Any) -> Any:
    """Reassemble a global tensor on every rank from the local pieces (reduce partials)."""
    from spmdc.sharding.planner import plan_redistribution

    names = comm.mesh.mesh_dim_names
    target = tuple(Replicate() for _ in layout)
    steps = plan_redistribution(tuple(layout), target, len(global_shape), 1.0, comm.mesh.mesh.shape)
    cur = local
    lay = list(layout)
    for st in steps:
        axis = names[st.axes[0]]
        if st.kind == "all_reduce":
            cur = comm.all_reduce(cur, [names[a] for a in st.axes], st.op)
        elif st.kind == "all_gather":
            out_shape = list(cur.shape)
            # the gathered size along this dim: the piece size one level up
            out_shape[st.dim] = _size_before(global_shape, lay, st.axes[0], st.dim, comm)
            cur = comm.all_gather(cur, axis, st.dim, tuple(out_shape))
        else:
            raise RuntimeError(f"unexpected step {st.kind} while gathering a result")
        lay = list(st.after)
    return cur


def _size_before(global_shape: tuple[int, ...], layout: list[Any], axis: int, dim: int, comm: Any) -> int:
    """Size of ``dim`` on this rank when ``axis`` no longer shards it (earlier axes still do)."""
    from spmdc.dialects.shard import chunk_sizes

    size = global_shape[dim]
    for a, p in enumerate(layout):
        if a >= axis:
            break
        if isinstance(p, Shard) and p.dim == dim:
            n = comm.mesh.mesh.shape[a]
            size = chunk_sizes(size, n)[comm.coord(comm.mesh.mesh_dim_names[a])]
    return size


def prepare_rank_module(step: CompiledStep, rank: int, target: str = "torch") -> tuple[Operation, Any]:
    """The rank's program for a codegen ``target``; with ``"triton"`` also fused into
    ``kernel.fused`` regions, returning the kernel statistics (else ``None``)."""
    if target not in ("torch", "triton"):
        raise ValueError(f"unknown codegen target '{target}' (choices: torch, triton)")
    module = step.rank_module(rank)
    if target != "triton":
        return module, None
    from spmdc.codegen.kernel_stats import kernel_stats
    from spmdc.passes.manager import PassManager
    from spmdc.passes.registry import parse_pipeline

    unfused = module.clone()
    PassManager(parse_pipeline(KERNEL_PIPELINE)).run(module)
    return module, kernel_stats(module, before=unfused)


def default_target() -> str:
    """Triton on GPUs, aten (torch) on CPUs, where Triton only runs in its slow interpreter."""
    import torch

    return "triton" if torch.cuda.is_available() else "torch"


def run_on_rank(step: CompiledStep, rank: int, comm: Any, executor: str = "codegen",
                target: str = "torch") -> dict[str, Any]:
    """Run the rank's program; results come back as full tensors plus comm statistics.

    ``executor``: ``"codegen"`` runs the generated Python module (spmdc.codegen),
    ``"interpret"`` the reference interpreter op by op. ``target``: ``"torch"`` (aten calls)
    or ``"triton"`` (``fuse-kernels`` then one Triton kernel per region; on CPU under the
    Triton interpreter); the result then also carries ``kernel_stats``.
    """
    from spmdc.dialects.func import FuncOp
    from spmdc.runtime.collectives import CountingComm
    from spmdc.runtime.interpreter import interpret
    from spmdc.sharding.layouts import SHARDING

    module, stats = prepare_rank_module(step, rank, target)
    func = next(op for op in module.body.ops if isinstance(op, FuncOp))
    args = []
    for i, full in enumerate(step.arguments):
        s = func.arg_attrs(i).get(SHARDING)
        args.append(local_piece(full, s.placements, step.mesh, rank) if s is not None else full)
    import torch

    with torch.no_grad():
        if executor == "codegen":
            from spmdc.codegen.cache import load_program
            outs = load_program(module, "main", target=target)[0](args, CountingComm(comm))
        elif executor == "interpret":
            outs = interpret(module, args, comm=CountingComm(comm))
        else:
            raise ValueError(f"unknown executor {executor!r} (choices: 'codegen', 'interpret')")
    full_outs = []
    global_fn = _global_result_types(step)
    for i, out in enumerate(outs):
        s = func.res_attrs(i).get(SHARDING)
        with torch.no_grad():
            full_outs.append(to_full(out, global_fn[i], s.placements, comm) if s is not None else out)
    counts = collections.Counter(op.name for op in module.walk() if op.name.startswith("comm."))
    result = {"outputs": full_outs, "comm_ops": dict(counts), "issued": dict(comm.stats.counts)}
    if stats is not None:
        result["kernel_stats"] = stats
    return result


def _global_result_types(step: CompiledStep) -> list[tuple[int, ...]]:
    from spmdc.dialects.func import FuncOp
    from spmdc.ir.parser import parse_module

    module = parse_module(step.global_ir, "<global>")
    func = next(op for op in module.body.ops if isinstance(op, FuncOp))
    return [t.shape for t in func.function_type.results]  # type: ignore[attr-defined]
