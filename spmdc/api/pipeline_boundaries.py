"""The pipeline module of a split: every stage's mesh and every boundary value's layouts.

    layouts = {k: {"F": program_layouts(f_module, f_step), "B": program_layouts(b_module, b_step)}, ...}
    module = boundary_module(split, plan.stages, layouts)     # shard.mesh per stage, pipe.boundary per value
    moves = pipeline_layout(module)                          # each move's table (spmdc.passes.pipeline_schedule)

A boundary value moves from its producer's forward result layout to its consumer's argument layout
(the forward program's, or the last stage's training program's), and its gradient back from the
consumer's ``grad_input`` result to the producer's backward argument, as::

    pipe.boundary {id = 3, shape = [8, 16, 64], from = #shard<@stage0, [S(0)]>, to = #shard<@stage1, [R]>,
                   grad_from = #shard<@stage1, [R]>, grad_to = #shard<@stage0, [S(0)]>}

:class:`~spmdc.api.pipeline_executor.PipelineExecutor` builds it from every rank's programs (then
schedules it); ``spmdc plan`` (:mod:`spmdc.api.dry_run_pipeline`) from each stage's role programs,
to count what each rank sends and receives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["boundary_module", "diff_outputs", "program_layouts", "user_arg"]

# per stage, per program ("F" forward, "B" training): (argument layouts, kept result layouts,
# argument kinds, kept result kinds)
Layouts = dict[int, dict[str, tuple[list[Any], list[Any], list[str], list[str]]]]


def program_layouts(module: Any, step: Any, kept: Sequence[int] | None = None) -> tuple[list, list, list, list]:
    """(argument layouts, result layouts, argument kinds, result kinds) of a rank program ``module``
    of ``step``, its results limited to ``kept`` (default: all but the buffer updates, results
    marked ``spmdc.buffer_update``)."""
    from spmdc.compiler.compilation import main_function
    from spmdc.compiler.driver import layout_of_attrs
    from spmdc.dialects.attrs import BUFFER_UPDATE_ATTR

    func = main_function(module)
    n_axes = len(step.mesh.axes)
    if kept is None:
        kept = [r for r in range(len(step.result_kinds)) if func.res_attrs(r).get(BUFFER_UPDATE_ATTR) is None]
    args = [layout_of_attrs(func.arg_attrs(i), n_axes) for i in range(len(func.args))]
    res = [layout_of_attrs(func.res_attrs(r), n_axes) for r in kept]
    return args, res, list(step.arg_kinds), [step.result_kinds[r] for r in kept]


def diff_outputs(split: Any, stage: Any) -> list[int]:
    """The values ``stage`` outputs whose gradient flows back to it."""
    return [v for v in stage.outputs if split.values[v].differentiable]


def user_arg(layouts: Layouts, stage: int, prog: str, k: int) -> Any:
    """The layout of input ``k`` of ``stage``'s program ``prog`` ("F" / "B")."""
    args, _, kinds, _ = layouts[stage][prog]
    pos = [i for i, kind in enumerate(kinds) if kind.startswith("input:")]
    return args[pos[k]]


def boundary_module(split: Any, stages: Sequence[Any], layouts: Layouts) -> Any:
    """A module of one ``shard.mesh`` per stage (``@stage<k>``, its ranks) and one ``pipe.boundary``
    per boundary value and consumer (see the module doc)."""
    from spmdc.dialects.pipe import BoundaryOp
    from spmdc.dialects.shard import MeshOp, ShardingAttr
    from spmdc.ir.module import ModuleOp

    module = ModuleOp.build_empty()
    names = [f"stage{k}" for k in range(len(stages))]
    last = len(stages) - 1
    for k, s in enumerate(stages):
        module.body.append(MeshOp.build(names[k], s.mesh.axis_names, s.mesh.shape, devices=list(s.ranks)))
    for v in sorted(split.values.values(), key=lambda v: v.index):
        for consumer in v.consumers:   # a value several stages read: one boundary per consumer
            src, dst = split.stages[v.producer], split.stages[consumer]
            out_pos = src.outputs.index(v.index)
            in_pos = dst.inputs.index(("value", v.index))
            attrs: dict[str, Any] = {
                "id": v.index, "shape": list(v.shape),
                "from": ShardingAttr(names[src.index], tuple(layouts[src.index]["F"][1][out_pos])),
                "to": ShardingAttr(names[dst.index], tuple(user_arg(layouts, dst.index, "F" if dst.index < last
                                                                    else "B", in_pos))),
            }
            if v.differentiable:
                _, res, _, rkinds = layouts[dst.index]["B"]
                key = f"grad_input:{in_pos}"
                if key not in rkinds:
                    raise NotImplementedError(f"stage {dst.index}'s backward has no gradient for its input "
                                              f"'{v.name}' (a floating value it does not differentiate through)")
                g_pos = diff_outputs(split, src).index(v.index)
                attrs["grad_from"] = ShardingAttr(names[dst.index], tuple(res[rkinds.index(key)]))
                attrs["grad_to"] = ShardingAttr(names[src.index], tuple(user_arg(layouts, src.index, "B",
                                                                                 len(src.inputs) + g_pos)))
            module.body.append(BoundaryOp.create(attributes=attrs, result_types=[]))
    return module
