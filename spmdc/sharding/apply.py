"""Apply a plan to a captured program: meshes, argument/result layouts, compute annotations.

    apply_plan(module, mesh, plan)       # module from spmdc.capture(...)

* inserts ``shard.mesh @mesh`` (from the :class:`~spmdc.sharding.mesh.Mesh`);
* parameters (``spmdc.param``) get their storage layout as ``shard.sharding``; when it
  differs from the compute layout a ``shard.annotate`` converts on use. In a training
  step with ``reshard_after_forward`` (FSDP's default) the backward uses get their own
  ``shard.annotate``, placed just before the first of them, so the gathered copy is not
  kept from forward to backward;
* user inputs get the plan's input layouts; gradients (``spmdc.grad_of``) are stored like
  their parameter; the loss (``spmdc.loss``) is replicated.

Forward ops are the ones the loss or the model outputs depend on; the others are backward.
"""

from __future__ import annotations

from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import AnnotateOp, MeshOp
from spmdc.ir.attributes import StringAttr, UnitAttr
from spmdc.ir.core import Operation, Value
from spmdc.ir.rewriter import Builder
from spmdc.ir.sharding import ShardingAttr
from spmdc.ir.types import TensorType
from spmdc.sharding.layouts import SHARDING
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Plan, PlanError


def forward_ops(func: FuncOp) -> set[int]:
    """ids of ops that the loss or a model output (a result that is not a gradient) depends on."""
    ret = func.return_op
    roots = [v for i, v in enumerate(ret.operands) if "spmdc.grad_of" not in func.res_attrs(i)]
    seen: set[int] = set()
    stack = [v.defining_op() for v in roots]
    while stack:
        op = stack.pop()
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        stack.extend(v.defining_op() for v in op.operands)
    return seen


def apply_plan(module: Operation, mesh: Mesh, plan: Plan, func_name: str = "main") -> dict:
    """Annotate ``@func_name`` of ``module`` with ``plan`` on ``mesh``; returns the resolved params."""
    func = next((op for op in module.body.ops if isinstance(op, FuncOp) and op.sym_name == func_name), None)
    if func is None:
        raise PlanError(f"no function '@{func_name}' to apply the plan to")
    if not any(isinstance(op, MeshOp) and op.sym_name == mesh.name for op in module.body.ops):
        module.body.insert(0, MeshOp.build(mesh.name, mesh.axis_names, mesh.shape))
    params: dict[str, tuple[int, ...]] = {}
    param_args: dict[str, Value] = {}
    user_args: list[Value] = []
    for i, a in enumerate(func.args):
        p = func.arg_attrs(i).get("spmdc.param")
        if isinstance(p, StringAttr) and isinstance(a.type, TensorType):
            params[p.value] = a.type.shape
            param_args[p.value] = a
        else:
            user_args.append(a)
    resolved = plan.resolve_params(mesh, params)
    names = [a.name_hint or f"arg{a.index}" for a in user_args]
    in_layouts = plan.resolve_inputs(mesh, [a.type.shape for a in user_args], names)  # type: ignore[attr-defined]
    for a, lay in zip(user_args, in_layouts):
        func.set_arg_attr(a.index, SHARDING, ShardingAttr(mesh.name, lay))
    fwd = forward_ops(func)
    entry = func.body
    for fqn, arg in param_args.items():
        r = resolved[fqn]
        func.set_arg_attr(arg.index, SHARDING, ShardingAttr(mesh.name, r.storage))
        if not arg.uses:
            continue
        users = [u.owner for u in arg.uses]
        groups = [users]
        if plan.reshard_after_forward:
            f_users = [op for op in users if id(op) in fwd]
            b_users = [op for op in users if id(op) not in fwd]
            groups = [g for g in (f_users, b_users) if g]
        for group in groups:
            first = min(group, key=lambda op: entry.index_of(op) if op.parent is entry else 0)
            anchor = first if first.parent is entry else entry.ops[0]
            ann = Builder.before(anchor).create(AnnotateOp, [arg], {"sharding": ShardingAttr(mesh.name, r.compute)},
                                                location=anchor.location)
            ann.result.name_hint = (arg.name_hint or "p") + "_use"
            for op in group:
                for idx, v in enumerate(op.operands):
                    if v is arg:
                        op.set_operand(idx, ann.result)
    out_specs = plan.resolve_outputs(mesh, [v.type.shape for v in func.return_op.operands  # type: ignore[attr-defined]
                                            if isinstance(v.type, TensorType)])
    for i, v in enumerate(func.return_op.operands):
        attrs = func.res_attrs(i)
        g = attrs.get("spmdc.grad_of")
        if isinstance(g, StringAttr) and g.value in resolved:
            func.set_res_attr(i, SHARDING, ShardingAttr(mesh.name, resolved[g.value].storage))
        elif isinstance(attrs.get("spmdc.loss"), UnitAttr):
            func.set_res_attr(i, SHARDING, ShardingAttr(mesh.name, tuple(resolved_rep(mesh))))
        elif i < len(out_specs) and out_specs[i] is not None:
            func.set_res_attr(i, SHARDING, ShardingAttr(mesh.name, out_specs[i]))  # type: ignore[arg-type]
    return resolved


def resolved_rep(mesh: Mesh):
    from spmdc.ir.sharding import Replicate

    return [Replicate() for _ in mesh.axes]
