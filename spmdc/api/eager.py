"""Eager SPMD: the sharded global program run one op at a time (veScale's eager mode, DTensor's
dispatch), for stepping through a plan.

    cm = spmdc.eager(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", train=True, ...)
    cm.step(x, y)                   # the same module surface as spmdc.compile
    print("\\n".join(cm.eager_trace))   # each op: layouts in -> out, the collectives it issued

Every rank walks the *global* program (captured, planned, after ``sharding-propagation``) and
dispatches each op at run time, as DTensor does for every aten call:

1. the layouts its operands have *now* (runtime facts: each value is this rank's piece and its
   layout) and the layouts wanted for its results;
2. the op's strategy from the same rule table the compiler uses (``strategy.choose``, the call
   ``insert-redistribution`` makes): which layout each operand must have;
3. each operand that differs is redistributed on the spot by the same planner
   (``plan_redistribution``), step by step through the same ``Collectives`` calls the compiled
   program makes (one conversion of a value to a layout is shared by its users, as in the
   compiled program; each ``shard.annotate`` — FSDP's re-gather in the backward — is its own);
4. the op runs on the local pieces: a one-op program partitioned for this rank (local shapes,
   strided-slice parts, random-draw offsets), cached per (op, layouts) like DTensor's sharding
   cache, evaluated by the op's torch implementation.

``hints=True`` (the default) wants each result in the layout sharding propagation gave it, so
the run makes the compiled program's decisions: same collectives in the same order and bitwise
the same values as the compiled program without its per-rank collective rewrites (``bucket=False,
overlap=False, fuse_collectives=False``; bucketing and fused reductions add partial sums in
another order). ``hints=False`` decides each result from its operands alone (DTensor's forward
rule: the cheapest strategy for the operands as they are), which can differ from the compiled
choice; results still equal one device within float rounding.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from spmdc.compiler.program import CompiledStep, Layout
from spmdc.dialects.func import FuncOp, ReturnOp, SuspendOp
from spmdc.dialects.shard import AnnotateOp, MeshOp, Replicate, ShardingAttr
from spmdc.ir.core import Operation, Value
from spmdc.ir.module import ModuleOp
from spmdc.ir.types import TensorType
from spmdc.passes.lower_redistribution import unfold_layout as _unfold
from spmdc.runtime.collectives import CountingComm
from spmdc.runtime.suspended import Paused, run_whole, suspend_results
from spmdc.sharding.layouts import SHARDING, layout_of, set_result_layouts
from spmdc.sharding.mesh import local_shape
from spmdc.sharding.planner import plan_redistribution
from spmdc.sharding.strategy import choose, choose_or_fallback, rule_for


@dataclass
class EagerProgram:
    """What :class:`EagerRunner` runs: the propagated global program and the layouts of its
    arguments and results (the fields :class:`~spmdc.compiler.program.RankProgram` has that the
    compiled module reads)."""

    step: CompiledStep
    rank: int
    module: Operation
    arg_layouts: list[Layout]
    res_layouts: list[Layout]
    target: str = "eager"
    kernel_stats: Any = None

    @property
    def comm_ops(self) -> dict[str, int]:
        return {}

    def peak_bytes(self) -> int:
        return 0


def eager_program(step: CompiledStep, rank: int) -> EagerProgram:
    """Parse ``step.propagated_ir`` (compiled with ``eager=True``) for rank ``rank``."""
    from spmdc.compiler.driver import main_function
    from spmdc.ir.parser import parse_module

    if not step.propagated_ir:
        raise ValueError("this step was compiled without its propagated program (compile_global(..., eager=True))")
    module = parse_module(step.propagated_ir, "<propagated>")
    func = main_function(module)
    n = len(step.mesh.axes)
    rep = tuple(Replicate() for _ in range(n))
    args = [layout_of(a) or rep for a in func.args]
    res = []
    for i, v in enumerate(func.return_op.operands):
        s = func.res_attrs(i).get(SHARDING)
        res.append(tuple(s.placements) if isinstance(s, ShardingAttr) else layout_of(v) or rep)
    pause = step.options.vjp_pause if step.options is not None else None
    if pause is not None:   # cm(x)'s vjp program, saved activations: pause before the backward
        from spmdc.passes.suspend_for_backward import suspend

        suspend(func, *pause)
    return EagerProgram(step, rank, module, args, res)


@dataclass
class _Kernel:
    op: Operation            # the op, partitioned for this rank (local types)
    module: Operation
    unique: list[int]        # operand positions of the distinct operand values, in argument order


@dataclass
class EagerRunner:
    """Runs an :class:`EagerProgram` op by op (see the module doc); the interface of
    :class:`~spmdc.runtime.executor.RankRunner`."""

    program: EagerProgram
    comm: Any
    device: Any = None
    hints: bool = True
    trace: bool = False
    _kernels: dict[tuple, _Kernel] = field(default_factory=dict)
    last_trace: list[str] = field(default_factory=list)
    ops_run: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        from spmdc.compiler.driver import main_function

        self.func: FuncOp = main_function(self.program.module)
        self.mesh = next(op for op in self.program.module.body.ops if isinstance(op, MeshOp))
        self.shape = tuple(self.program.step.mesh.shape)
        self.coords = tuple(self.program.step.mesh.coords(self.program.rank)[a]
                            for a in self.program.step.mesh.axis_names)

    # -- the run --------------------------------------------------------------------------------
    def __call__(self, local_args: Sequence[Any]) -> list[Any]:
        import torch

        gen = self._steps(local_args)
        try:
            with torch.no_grad():
                next(gen)
        except StopIteration as stop:
            return list(stop.value)
        return run_whole(gen)   # (it suspended: refused)

    def start(self, local_args: Sequence[Any]) -> Paused:
        """The forward half of a suspending program (:mod:`spmdc.runtime.suspended`)."""
        indices = suspend_results(self.program.module)
        if indices is None:
            raise RuntimeError("this program does not suspend (no func.suspend): call it whole")
        import torch

        return Paused.start(self._steps(local_args), indices, torch.no_grad)

    def _steps(self, local_args: Sequence[Any]) -> Generator[list[Any], list[Any], list[Any]]:
        start = time.perf_counter()
        counting = CountingComm(self.comm)
        env: dict[Value, tuple[Any, Layout]] = {}
        shared: dict[tuple[int, Layout], Any] = {}
        self.last_trace = []
        stats = self.comm.stats
        own_order = self.trace and stats.order is None
        if own_order:   # the trace names each op's collectives
            stats.order = []
        for a, t, lay in zip(self.func.args, local_args, self.program.arg_layouts):
            env[a] = (t, tuple(lay))
        out: list[Any] = []
        # (grad mode off: the callers run each half under no_grad; a suspended generator holds no context)
        for op in self.func.body.ops:
            if isinstance(op, ReturnOp):
                n0 = len(stats.order) if stats.order is not None else 0
                out = [self._convert(v, tuple(lay), env, shared, counting, op)
                       for v, lay in zip(op.operands, self.program.res_layouts)]
                if self.trace:
                    self._note(op, [env[v][1] for v in op.operands],
                               [tuple(lay) for lay in self.program.res_layouts], n0)
                break
            if isinstance(op, SuspendOp):   # the forward half's end: hand back, wait for the gradients
                idx = [a.value for a in op.attributes["results"]]  # type: ignore[attr-defined]
                got = yield [self._convert(v, tuple(self.program.res_layouts[i]), env, shared, counting, op)
                             for v, i in zip(op.operands, idx)]
                for r, t in zip(op.results, got):
                    env[r] = (t, tuple(layout_of(r) or ()))
                continue
            if isinstance(op, AnnotateOp):   # its own conversion point (FSDP's backward re-gather)
                want = tuple(op.sharding.placements)
                n0 = len(stats.order) if stats.order is not None else 0
                env[op.result] = (self._convert(op.operand(0), want, env, None, counting, op), want)
                if self.trace:
                    self._note(op, [env[op.operand(0)][1]], [want], n0)
                continue
            self._dispatch(op, env, shared, counting)
        if own_order:
            stats.order = None
        self.ops_run = len(self.func.body.ops)
        self.seconds = time.perf_counter() - start
        return out

    def _dispatch(self, op: Operation, env: dict, shared: dict, counting: Any) -> None:
        ins = [env[v][1] for v in op.operands]
        rule = rule_for(op)
        if self.hints:
            outs = [layout_of(r) for r in op.results]
        else:
            outs = list(choose(op, rule, self.shape, ins, [None] * len(op.results)).results)
        # no strategy yields outs: the fallback's layouts are kept and later ops adapt to them
        choice, _ = choose_or_fallback(op, rule, self.shape, ins, outs, exact_results=True)
        n0 = len(self.comm.stats.order) if self.comm.stats.order is not None else 0
        local = [self._convert(v, tuple(want), env, shared, counting, op)
                 for v, want in zip(op.operands, choice.operands)]
        kernel = self._kernel(op, tuple(tuple(w) for w in choice.operands), tuple(tuple(o) for o in choice.results))
        res = kernel.op.reference(*local, comm=counting)   # one local value per operand
        res = list(res) if len(op.results) != 1 else [res]
        for r, t, lay in zip(op.results, res, choice.results):
            env[r] = (t, tuple(lay))
        if self.trace:
            self._note(op, ins, list(choice.results), n0)

    def _note(self, op: Operation, ins: Sequence[Layout], outs: Sequence[Layout], n0: int) -> None:
        """One trace line: the op, where it came from, layouts in -> out, what it issued."""
        order = self.comm.stats.order or []
        issued = [c.removeprefix("comm.") for c in order[n0:]]
        self.last_trace.append(f"{op.name} at {op.location}: {_fmt_layouts(ins)} -> {_fmt_layouts(outs)}"
                               + (f"  issues {', '.join(issued)}" if issued else ""))

    # -- redistribution at run time -------------------------------------------------------------
    def _convert(self, v: Value, want: Layout, env: dict, shared: dict | None, counting: Any,
                 user: Operation) -> Any:
        t, have = env[v]
        if have == want:
            return t
        key = (id(v), want)
        if shared is not None and key in shared:
            return shared[key]
        ty = v.type
        assert isinstance(ty, TensorType)
        try:
            steps = plan_redistribution(have, want, ty.rank, ty.num_bytes, self.shape)
        except ValueError as e:
            raise user.emit_error(str(e)) from None
        cur, before = t, have
        for step in steps:
            cur = self._step(cur, ty.shape, before, step, counting)
            before = step.after
        if shared is not None:
            shared[key] = cur
        return cur

    def _step(self, x: Any, shape: tuple[int, ...], before: Layout, step: Any, counting: Any) -> Any:
        """One planner step, as the compiled program's collective for it (``lower-redistribution``)."""
        names = self.program.step.mesh.axis_names
        if step.parts > 1:   # strided: reshape, the plain collective on the unfolded dim, reshape back
            d, k = step.dim, step.parts
            unfolded = shape[:d] + (k, shape[d] // k) + shape[d + 1:]
            view = x.reshape(local_shape(unfolded, _unfold(before, d), self.shape, self.coords))
            got = self._collective(view, unfolded, step.kind, names[step.axes[0]], d + 1, step,
                                   _unfold(step.after, d), counting)
            return got.reshape(local_shape(shape, step.after, self.shape, self.coords))
        if step.kind == "all_reduce":
            return counting.all_reduce(x, [names[a] for a in step.axes], step.op)
        dim = step.dim
        return self._collective(x, shape, step.kind, names[step.axes[0]], dim, step, step.after, counting)

    def _collective(self, x: Any, shape: tuple[int, ...], kind: str, axis: str, dim: int, step: Any,
                    after: Layout, counting: Any) -> Any:
        sizes = list(step.sizes) if step.sizes else None
        if kind == "all_gather":
            return counting.all_gather(x, axis, dim, local_shape(shape, after, self.shape, self.coords), sizes)
        if kind == "all_slice":
            return counting.all_slice(x, axis, dim, sizes) if sizes else counting.all_slice(x, axis, dim)
        if kind == "reduce_scatter":
            return counting.reduce_scatter(x, axis, dim, step.op, sizes) if sizes else \
                counting.reduce_scatter(x, axis, dim, step.op)
        if kind == "all_to_all":
            return counting.all_to_all(x, axis, step.concat_dim, step.dim,
                                       local_shape(shape, after, self.shape, self.coords))
        raise RuntimeError(f"eager: unexpected redistribution step '{kind}'")

    # -- one-op programs ------------------------------------------------------------------------
    def _kernel(self, op: Operation, ins: tuple[Layout, ...], outs: tuple[Layout, ...]) -> _Kernel:
        key = (id(op), ins, outs)
        k = self._kernels.get(key)
        if k is None:
            k = self._kernels[key] = self._build(op, ins, outs)
        return k

    def _build(self, op: Operation, ins: tuple[Layout, ...], outs: tuple[Layout, ...]) -> _Kernel:
        """``op`` alone in a function whose arguments have layouts ``ins`` and results ``outs``,
        partitioned for this rank: the local op (local types, localized slices/draws)."""
        from spmdc.dialects.tensor import ConstantOp
        from spmdc.passes.partition import partition_function

        mesh = self.mesh.sym_name
        unique: list[int] = []
        seen: set[int] = set()
        constants = {}   # operands made by a constant stay constants: rules read them (a zero is any Partial)
        for i, v in enumerate(op.operands):
            if isinstance(v.defining_op(), ConstantOp):
                constants[v] = i
            elif id(v) not in seen:
                seen.add(id(v))
                unique.append(i)
        module = ModuleOp.build_empty()
        module.body.append(self.mesh.clone())
        func = FuncOp.build("op", [op.operands[i].type for i in unique], [r.type for r in op.results],
                            arg_attrs=[{SHARDING: ShardingAttr(mesh, ins[i])} for i in unique],
                            res_attrs=[{SHARDING: ShardingAttr(mesh, o)} for o in outs])
        module.body.append(func)
        mapping: dict[Value, Value] = {op.operands[i]: func.args[j] for j, i in enumerate(unique)}
        for v, i in constants.items():
            const = v.defining_op().clone({})
            func.body.append(const)
            set_result_layouts(const, mesh, [ins[i]])
            mapping[v] = const.result
        new = op.clone(mapping)
        func.body.append(new)
        set_result_layouts(new, mesh, list(outs))
        func.body.append(ReturnOp.create(list(new.results), result_types=[]))
        partition_function(module, func, self.program.rank)
        local = func.body.ops[-2]   # the op, after the constants it reads
        return _Kernel(local, module, unique)

    # -- the RankRunner surface -------------------------------------------------------------------
    def local_arguments(self, full_args: Sequence[Any]) -> list[Any]:
        from spmdc.runtime.executor import local_piece

        return [local_piece(a, lay, self.program.step.mesh, self.program.rank)
                for a, lay in zip(full_args, self.program.arg_layouts)]


def _fmt_layouts(layouts: Sequence[Layout | None]) -> str:
    return "(" + ", ".join("[" + ", ".join(map(str, lay)) + "]" if lay is not None else "?" for lay in layouts) + ")"
