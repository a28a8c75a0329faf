"""Compiling a heterogeneous plan: every device group's program, then their cross-group moves.

    steps = compile_groups(model, hplan, inputs=[x], train=True, loss_fn=loss)   # one per group
    prog = compile_rank(steps[g], hplan.virtual_rank(g, rank))

Each group's program goes through the global stages of :func:`~spmdc.compiler.driver.compile_program` on
the group's virtual mesh ``["grp" = G, <own axes>]`` with the group's plan (batch split across the groups,
:mod:`spmdc.sharding.device_groups`); then :func:`~spmdc.passes.cross_group.resolve_cross_group` takes
all of them together and turns their moves on ``grp`` into ``comm.split_all_reduce`` over the
groups' real ranks. A rank runs its group's program at its virtual coordinates.
"""

from __future__ import annotations

from typing import Any

from spmdc.compiler.driver import Compilation, compile_program
from spmdc.compiler.options import CompileOptions
from spmdc.compiler.program import CompiledStep
from spmdc.sharding.device_groups import HeteroPlan


def compile_groups(model: Any, hplan: HeteroPlan, **job: Any) -> list[CompiledStep]:
    """One CompiledStep per group of ``hplan`` (``job``: compile_global's keyword arguments, no
    mesh or plan), their cross-group reductions resolved together: stages 00-05 of
    :func:`~spmdc.compiler.driver.compile_program` (dumps: ``stages/<group>/NN-<stage>.mlir``)."""
    names = set(CompileOptions.names()) - {"inputs"}   # (job["inputs"]: the example inputs)
    opts = CompileOptions.of(job.pop("options", None), "compile_groups",
                             **{k: job.pop(k) for k in list(job) if k in names})
    if opts.execution == "eager":
        raise ValueError("eager execution does not run heterogeneous plans (device groups) yet")
    c = Compilation.of_model(model, job.pop("inputs"), plan=hplan, options=opts, last="cross-group", **job)
    return compile_program(c).steps()
