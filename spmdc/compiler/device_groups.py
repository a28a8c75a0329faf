"""Compiling a heterogeneous plan: every device group's program, then their cross-group moves.

    steps = compile_groups(model, hplan, inputs=[x], train=True, loss_fn=loss)   # one per group
    prog = compile_rank(steps[g], hplan.virtual_rank(g, rank))

Each group's program is an ordinary :func:`~spmdc.compiler.driver.compile_global` on the group's
virtual mesh ``["grp" = G, <own axes>]`` with the group's plan (batch split across the groups,
:mod:`spmdc.sharding.device_groups`); then :func:`~spmdc.passes.cross_group.resolve_cross_group` takes
all of them together and turns their moves on ``grp`` into ``comm.split_all_reduce`` over the
groups' real ranks. A rank runs its group's program at its virtual coordinates.
"""

from __future__ import annotations

from typing import Any

from spmdc.compiler.driver import compile_global
from spmdc.compiler.options import CompileOptions
from spmdc.compiler.program import CompiledStep
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.passes.cross_group import GroupSpec, resolve_cross_group
from spmdc.sharding.device_groups import HeteroPlan


def group_specs(hplan: HeteroPlan) -> list[GroupSpec]:
    return [GroupSpec(g.name, g.mesh.axis_names, g.mesh.shape, g.ranks) for g in hplan.groups]


def compile_groups(model: Any, hplan: HeteroPlan, **job: Any) -> list[CompiledStep]:
    """One CompiledStep per group of ``hplan`` (``job``: compile_global's keyword arguments, no
    mesh or plan), their cross-group reductions resolved together."""
    names = set(CompileOptions.names()) - {"inputs"}   # (job["inputs"]: the example inputs)
    opts = CompileOptions.of(job.pop("options", None), "compile_groups",
                             **{k: job.pop(k) for k in list(job) if k in names})
    if opts.execution == "eager":
        raise ValueError("eager execution does not run heterogeneous plans (device groups) yet")
    steps = [compile_global(model, mesh=hplan.virtual_mesh(g), plan=hplan.for_group(g), options=opts, **job)
             for g in range(len(hplan.groups))]
    modules = [parse_module(s.global_ir, f"<group {g.name}>") for s, g in zip(steps, hplan.groups)]
    resolve_cross_group(modules, group_specs(hplan))
    dump = job.get("dump")
    for s, m, g in zip(steps, modules, hplan.groups):
        s.global_ir = print_module(m, debuginfo=True)
        writer = dump.ir_writer(s.name, f"global-{g.name}") if dump else None
        if writer:
            writer.write("cross-group", m)
    return steps
