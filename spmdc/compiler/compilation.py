"""What the compiler's stages read and write (:func:`spmdc.compiler.driver.compile_program`).

    c = Compilation.of_model(model, (x,), mesh=Mesh({"dp": 2}), plan="fsdp", rank=1, train=True,
                             loss_fn=F.mse_loss)          # every stage, in this process
    c = Compilation.of_step(step, rank=1, target="torch")  # the per-rank stages of a received step

A :class:`Compilation` holds the job (model, inputs, options, dump), which stages run
(``first``..``last``, names of :data:`~spmdc.compiler.dump.STAGES`), each device group's global
program (:class:`GroupProgram`; one on a single mesh) and then one rank's program. :func:`stage`
makes a function a stage: it runs only in that range, then dumps what it produced.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spmdc.compiler.dump import STAGES, Dump, IRWriter, program_name
from spmdc.compiler.options import CompileOptions
from spmdc.compiler.program import CompiledStep, RankProgram
from spmdc.dialects.attrs import BUFFER_ATTR, GRAD_NORM_ATTR, GRAD_OF_ATTR, GRAD_OF_INPUT_ATTR, LOSS_ATTR, PARAM_ATTR
from spmdc.dialects.func import FuncOp
from spmdc.ir.core import Operation
from spmdc.ir.printer import print_module
from spmdc.sharding.plan import Plan


def main_function(module: Operation) -> FuncOp:
    return next(op for op in module.body.ops if isinstance(op, FuncOp))  # type: ignore[attr-defined]


@dataclass
class GroupProgram:
    """One device group's global program while the global stages run (the only one on a single mesh)."""

    mesh: Any                       # a Mesh, "dp=2,tp=2", {"dp": 2} or a named DeviceMesh
    plan: Any                       # a preset name, a Plan, or a device group's GroupPlan
    group: str | None = None        # the group's name (None: one mesh)
    module: Operation | None = None
    captured: Any = None            # spmdc.frontend.capture's program (arguments, timings)
    resolved: Plan | None = None    # the plan against this program's parameters and inputs
    writer: IRWriter | None = None  # the IR after every pass: <ir_dir>/<program>/global[-<group>]/
    propagated: str = ""            # after sharding-propagation (execution="eager")


@dataclass
class Compilation:
    """What the stages read and write: the job, then the global programs, then one rank's."""

    groups: list[GroupProgram] = field(default_factory=list)
    model: Any = None
    inputs: tuple = ()
    train: bool = False
    loss_fn: Callable | None = None
    loss_inputs: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    partial_grads: bool | str = False   # gradients returned before their reduction (accumulation); "replicated":
    # only where no trained parameter is stored sharded along an axis that splits the batch
    options: CompileOptions = field(default_factory=CompileOptions)
    dump: Dump | None = None
    hetero: Any = None              # the HeteroPlan of device groups (05), or None
    rank: int = 0                   # the job rank whose program 06-09 build
    target: str | None = None       # codegen target (default: the options')
    first: str = STAGES[0]
    last: str = STAGES[-1]
    step: CompiledStep | None = None   # the global program this rank runs (06-09)
    at: int = 0                     # the rank's index on the step's mesh (a group's virtual rank)
    module: Operation | None = None    # this rank's program
    writer: IRWriter | None = None     # its IR after every pass: <ir_dir>/<program>/rank<r>/
    unfused: Operation | None = None   # (target triton) the program before fuse-kernels
    program: RankProgram | None = None
    started: float = 0.0
    parsed: Operation | None = None    # the step's global program already parsed: 06 clones it (else parses)

    @staticmethod
    def of_model(model: Any, inputs: Sequence[Any], *, mesh: Any = None, plan: Any, train: bool = False,
                 loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                 kwargs: Mapping[str, Any] | None = None, partial_grads: bool | str = False, dump: Dump | None = None,
                 options: CompileOptions | None = None, rank: int = 0, target: str | None = None,
                 last: str = STAGES[-1], **option_kw: Any) -> Compilation:
        """A compilation from the model: ``plan`` on ``mesh``, or a HeteroPlan (its groups' meshes)."""
        from spmdc.sharding.device_groups import HeteroPlan
        from spmdc.sharding.mesh import Mesh

        if partial_grads not in (False, True, "replicated"):
            raise ValueError(f"partial_grads={partial_grads!r}: expected False (gradients reduced in the program), "
                             "True (returned unreduced) or 'replicated' (unreduced where stored replicated)")
        hetero = plan if isinstance(plan, HeteroPlan) else None
        if mesh is not None and not hetero:   # "dp=2,tp=2", {"dp": 2}, a DeviceMesh: the documented spellings
            mesh = Mesh.of(mesh)
        groups = ([GroupProgram(hetero.virtual_mesh(g), hetero.for_group(g), grp.name)
                   for g, grp in enumerate(hetero.groups)] if hetero else [GroupProgram(mesh, plan)])
        return Compilation(groups, model, tuple(inputs), train, loss_fn, tuple(loss_inputs), dict(kwargs or {}),
                           partial_grads, CompileOptions.of(options, "compile_program", **option_kw), dump, hetero,
                           rank, target, last=last)

    @staticmethod
    def of_step(step: CompiledStep, rank: int, target: str = "torch", dump: Dump | None = None,
                last: str = STAGES[-1]) -> Compilation:
        """The per-rank stages of ``step`` for ``rank`` (its index on the step's mesh)."""
        return Compilation(options=step.options, dump=dump, rank=rank, target=target, first="partition", last=last,
                           step=step, at=rank)

    @property
    def name(self) -> str:
        return self.step.name if self.step is not None else program_name(self.train)

    def runs(self, stage: str) -> bool:
        return STAGES.index(self.first) <= STAGES.index(stage) <= STAGES.index(self.last)

    def steps(self) -> list[CompiledStep]:
        """Each group's global program as the ranks receive it."""
        return [_step(self, g) for g in self.groups]

    def write_stage(self, stage: str, note: str | None) -> None:
        if self.dump is None:
            return
        head = f"// {STAGES.index(stage):02d} {stage}" + (f": {note}" if note else "") + "\n"
        if stage == "codegen":
            assert self.program is not None
            self.dump.write_stage(self.name, stage, "# " + head[3:] + self.program.source, rank=self.at)
        elif STAGES.index(stage) < STAGES.index("partition"):
            for g in self.groups:
                self.dump.write_stage(self.name, stage, head + print_module(g.module, debuginfo=True), group=g.group)
        else:
            self.dump.write_stage(self.name, stage, head + print_module(self.module, debuginfo=True), rank=self.at)


def stage(name: str) -> Callable[[Callable[[Compilation], str | None]], Callable[[Compilation], None]]:
    """A compiler stage: runs when ``c`` includes it, then dumps what it produced. The stage may
    return a note (why it changed nothing: ``"not applied: ..."``), written atop its dump."""
    def wrap(fn: Callable[[Compilation], str | None]) -> Callable[[Compilation], None]:
        @functools.wraps(fn)
        def run(c: Compilation) -> None:
            if c.runs(name):
                c.write_stage(name, fn(c))
        return run
    return wrap


def _step(c: Compilation, g: GroupProgram) -> CompiledStep:
    """Group ``g``'s global program as a CompiledStep (its text, argument kinds, shapes)."""
    assert g.module is not None and g.resolved is not None, "the global stages have not run"
    timings = dict(g.captured.timings)
    timings["sharding"] = time.perf_counter() - c.started
    user_inputs = (list(c.inputs) + list(c.loss_inputs) if c.train else list(c.inputs)) + list(c.kwargs.values())
    args = [a.detach().clone() if hasattr(a, "detach") else a for a in g.captured.arguments(*user_inputs)]
    return CompiledStep(print_module(g.module, debuginfo=True), g.mesh, g.resolved.name, args,
                        *_signature(main_function(g.module)), timings=timings, options=c.options, name=c.name,
                        propagated_ir=g.propagated, output_tree=getattr(g.captured.info, "output_tree", None))


def _signature(func: FuncOp) -> tuple[list[str], list[str], list[tuple[int, ...]], list[tuple[int, ...]], set[int]]:
    """Argument kinds, result kinds, global shapes and buffer positions of ``@main``."""
    arg_kinds = []
    for i, a in enumerate(func.args):
        p = func.arg_attrs(i).get(PARAM_ATTR)
        arg_kinds.append(f"param:{p.value}" if p is not None else f"input:{a.name_hint}")  # type: ignore[attr-defined]
    result_kinds = []
    for i in range(len(func.return_op.operands)):
        attrs = func.res_attrs(i)
        if LOSS_ATTR in attrs:
            result_kinds.append("loss")
        elif GRAD_NORM_ATTR in attrs:
            result_kinds.append("grad_norm")
        elif GRAD_OF_INPUT_ATTR in attrs:   # the gradient of user input k (a pipeline stage's)
            result_kinds.append(f"grad_input:{attrs[GRAD_OF_INPUT_ATTR].value}")  # type: ignore[attr-defined]
        elif GRAD_OF_ATTR in attrs:
            result_kinds.append("grad:" + attrs[GRAD_OF_ATTR].value)  # type: ignore[attr-defined]
        else:
            result_kinds.append("output")
    fn = func.function_type
    buffers = {i for i in range(len(func.args)) if BUFFER_ATTR in func.arg_attrs(i)}
    return (arg_kinds, result_kinds, [tuple(t.shape) for t in fn.inputs],  # type: ignore[attr-defined]
            [tuple(t.shape) for t in fn.results], buffers)  # type: ignore[attr-defined]
