"""Apply a plan to a captured program: meshes, argument/result layouts, compute annotations.

    apply_plan(module, mesh, plan)       # module from spmdc.capture(...)

* inserts ``shard.mesh @mesh`` (from the :class:`~spmdc.sharding.mesh.Mesh`);
* parameters (``spmdc.param``) get their storage layout as ``shard.sharding``; when it
  differs from the compute layout a ``shard.annotate`` converts on use. In a training
  step with ``reshard_after_forward`` (FSDP's default) the backward uses get their own
  ``shard.annotate``, placed just before the first of them, so the gathered copy is not
  kept from forward to backward;
* user inputs get the plan's input layouts; gradients (``spmdc.grad_of``) are stored like
  their parameter; the loss (``spmdc.loss``) is replicated. A caller that accumulates
  gradients over micro-batches asks for them unreduced (``reduce_grads=False``: propagation
  leaves ``P(sum)`` where the inputs are split), or unreduced only where that costs no memory
  (``reduce_grads="sharded"``: when no trained parameter is stored sharded along an axis that
  splits the inputs, :func:`caller_sums_grads`; a pipeline stage then sums its micro-batches'
  gradients locally and all-reduces them once per step)::

      // reduce_grads=True, plan dp on dp=2:     return ..., %g {shard.sharding = #shard<@m, [R]>}
      // reduce_grads="sharded", the same plan:  return ..., %g   (propagation: [P(sum)])

Forward ops are the ones the loss or the model outputs depend on; the others are backward.
"""

from __future__ import annotations

from spmdc.dialects.attrs import (
    BUCKET_ATTR,
    BUCKETS_ATTR,
    GRAD_NORM_ATTR,
    GRAD_OF_ATTR,
    GRAD_OF_INPUT_ATTR,
    KIND_ATTR,
    LOSS_ATTR,
    PARAM_ATTR,
    TRAIN_STEP_ATTR,
)
from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import AnnotateOp, MeshOp, ShardingAttr
from spmdc.dialects.tensor import CastOp
from spmdc.ir.attributes import StringAttr, UnitAttr
from spmdc.ir.core import Operation, Value
from spmdc.ir.rewriter import Builder
from spmdc.ir.types import TensorType
from spmdc.sharding.layouts import SHARDING
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Plan, PlanError


def forward_ops(func: FuncOp) -> set[int]:
    """ids of ops that the loss or a model output (a result that is not a gradient) depends on."""
    ret = func.return_op
    roots = [v for i, v in enumerate(ret.operands)
             if not {GRAD_OF_ATTR, GRAD_NORM_ATTR, GRAD_OF_INPUT_ATTR} & set(func.res_attrs(i))]
    seen: set[int] = set()
    stack = [v.defining_op() for v in roots]
    while stack:
        op = stack.pop()
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        stack.extend(v.defining_op() for v in op.operands)
    return seen


def _recomputed(op: Operation) -> bool:
    """Ops the backward recomputes from a re-gathered parameter: views and casts of it."""
    return len(op.operands) == 1 and (op.has_trait("View") or isinstance(op, CastOp))


def _compute_value(arg: Value) -> Value:
    """What the model computes with: the parameter, or its only use when that is a cast to a
    narrower float (mixed precision: the shard is cast before it is gathered, so the gather
    moves the narrow type, as FSDP2's ``param_dtype``)."""
    if len(arg.uses) == 1 and isinstance(arg.uses[0].owner, CastOp):
        src, dst = arg.type, arg.uses[0].owner.result.type
        if isinstance(src, TensorType) and isinstance(dst, TensorType) and dst.is_float and src.is_float \
                and dst.num_bytes < src.num_bytes:
            return arg.uses[0].owner.result
    return arg


def _regather_for_backward(func: FuncOp, arg: Value, ann: AnnotateOp, fwd: set[int], mesh: str, compute,
                           name: str) -> None:
    """Give backward users of the gathered parameter (or of views of it) their own gather.

    FSDP's reshard-after-forward: the forward's gathered copy is freed after use, so the
    backward gathers again; views (permute/reshape/cast) of it are recomputed.
    """
    entry = func.body
    chain: list[Value] = [ann.result]
    for v in chain:
        for u in v.uses:
            if _recomputed(u.owner) and id(u.owner) in fwd:
                chain.extend(u.owner.results)
    in_chain = {id(v) for v in chain}
    uses = [(u.owner, u.index) for v in chain for u in v.uses
            if id(u.owner) not in fwd and u.owner.name != "func.return"]
    if not uses:
        return
    first = min((op for op, _ in uses), key=entry.index_of)
    builder = Builder.before(first)
    again = builder.create(AnnotateOp, [arg], {"sharding": ShardingAttr(mesh, compute)}, location=first.location)
    again.result.name_hint = name.replace(".", "_") + "_bwd"
    copies: dict[int, Value] = {id(ann.result): again.result}

    def copy(v: Value) -> Value:
        if id(v) not in copies:
            op = v.defining_op()
            src = copy(op.operand(0))  # type: ignore[union-attr]
            new = op.clone({op.operand(0): src})  # type: ignore[union-attr]
            builder.insert(new)
            copies[id(v)] = new.results[0]
        return copies[id(v)]

    for op, idx in uses:
        v = op.operand(idx)
        if id(v) in in_chain:
            op.set_operand(idx, copy(v))


def caller_sums_grads(mesh: Mesh, input_layouts: list, storage: list) -> bool:
    """Whether a program's gradients are left unreduced for its caller under
    ``reduce_grads="sharded"``: some mesh axis (of size > 1) splits a user input, and no trained
    parameter's ``storage`` layout is sharded along such an axis (its unreduced gradient would be
    whole where the reduced one is a shard: memory held for the whole step)."""
    from spmdc.dialects.shard import Replicate

    split = {a for lay in input_layouts if lay for a, p in enumerate(lay)
             if not isinstance(p, Replicate) and mesh.shape[a] > 1}
    return bool(split) and not any(not isinstance(lay[a], Replicate) for lay in storage for a in split)


def apply_plan(module: Operation, mesh: Mesh, plan: Plan, func_name: str = "main",
               reduce_grads: bool | str = True) -> dict:
    """Annotate ``@func_name`` of ``module`` with ``plan`` on ``mesh``; returns the resolved params.
    ``reduce_grads=False`` leaves the gradients' layouts to propagation (unreduced, for
    accumulating them over micro-batches before one reduction); ``"sharded"`` does so only
    where :func:`caller_sums_grads` (else as ``True``)."""
    func = next((op for op in module.body.ops if isinstance(op, FuncOp) and op.sym_name == func_name), None)
    if func is None:
        raise PlanError(f"no function '@{func_name}' to apply the plan to")
    if not any(isinstance(op, MeshOp) and op.sym_name == mesh.name for op in module.body.ops):
        module.body.insert(0, MeshOp.build(mesh.name, mesh.axis_names, mesh.shape))
    params: dict[str, tuple[int, ...]] = {}
    param_args: dict[str, Value] = {}
    user_args: list[Value] = []
    for i, a in enumerate(func.args):
        p = func.arg_attrs(i).get(PARAM_ATTR)
        if isinstance(p, StringAttr) and isinstance(a.type, TensorType):
            params[p.value] = a.type.shape
            param_args[p.value] = a
        else:
            user_args.append(a)
    resolved = plan.resolve_params(mesh, params)
    names = [a.name_hint or f"arg{a.index}" for a in user_args]
    # a training step takes every user input (model and loss inputs); a forward program may
    # take fewer than a plan written for training lays out
    in_layouts = plan.resolve_inputs(mesh, [a.type.shape for a in user_args], names,  # type: ignore[attr-defined]
                                     complete=TRAIN_STEP_ATTR in func.attributes)
    for a, lay in zip(user_args, in_layouts):
        func.set_arg_attr(a.index, SHARDING, ShardingAttr(mesh.name, lay))
    fwd = forward_ops(func)
    entry = func.body
    for fqn, glob in plan.bucket_of(param_args).items():   # manual buckets: read by bucket-collectives
        func.set_arg_attr(param_args[fqn].index, BUCKET_ATTR, StringAttr(glob))
    if plan.buckets == "auto":
        func.set_attr(BUCKETS_ATTR, StringAttr("auto"))
    for fqn, arg in param_args.items():
        r = resolved[fqn]
        func.set_arg_attr(arg.index, SHARDING, ShardingAttr(mesh.name, r.storage))
        if not arg.uses:
            continue
        used = _compute_value(arg)
        users = [u.owner for u in used.uses]
        first = min(users, key=lambda op: entry.index_of(op))
        ann = Builder.before(first).create(AnnotateOp, [used], {"sharding": ShardingAttr(mesh.name, r.compute)},
                                           location=first.location)
        ann.result.name_hint = (arg.name_hint or "p").replace(".", "_") + "_use"
        for op in users:
            for idx, v in enumerate(op.operands):
                if v is used:
                    op.set_operand(idx, ann.result)
        if r.compute != r.storage and plan.reshards(fqn, param_args):
            _regather_for_backward(func, used, ann, fwd, mesh.name, r.compute, arg.name_hint or "p")
    if reduce_grads == "sharded":
        trained = [resolved[a.value].storage for i in range(len(func.return_op.operands))
                   if isinstance(a := func.res_attrs(i).get(GRAD_OF_ATTR), StringAttr) and a.value in resolved]
        reduce_grads = not caller_sums_grads(mesh, in_layouts, trained)
    model_outputs = [i for i in range(len(func.return_op.operands)) if is_model_output(func, i)]
    out_specs = plan.resolve_outputs(mesh, [func.return_op.operand(i).type.shape for i in model_outputs])  # type: ignore[attr-defined]
    for i in range(len(func.return_op.operands)):
        attrs = func.res_attrs(i)
        g = attrs.get(GRAD_OF_ATTR)
        if isinstance(g, StringAttr) and g.value in resolved:
            if reduce_grads:
                func.set_res_attr(i, SHARDING, ShardingAttr(mesh.name, resolved[g.value].storage))
        elif isinstance(attrs.get(LOSS_ATTR), UnitAttr) or isinstance(attrs.get(GRAD_NORM_ATTR), UnitAttr):
            func.set_res_attr(i, SHARDING, ShardingAttr(mesh.name, tuple(resolved_rep(mesh))))
    for k, i in enumerate(model_outputs):
        if out_specs[k] is not None:
            func.set_res_attr(i, SHARDING, ShardingAttr(mesh.name, out_specs[k]))  # type: ignore[arg-type]
    return resolved


def planned_layouts(func: FuncOp) -> list[tuple]:
    """Every layout the plan wrote on ``func``: its arguments', results' and ``shard.annotate``s'."""
    attrs = [func.arg_attrs(i).get(SHARDING) for i in range(len(func.args))]
    attrs += [func.res_attrs(i).get(SHARDING) for i in range(len(func.return_op.operands))]
    attrs += [op.get_attr("sharding") for op in func.walk() if isinstance(op, AnnotateOp)]
    return [a.placements for a in attrs if isinstance(a, ShardingAttr)]


def is_model_output(func: FuncOp, i: int) -> bool:
    attrs = func.res_attrs(i)
    return not any(k in attrs for k in (GRAD_OF_ATTR, LOSS_ATTR, KIND_ATTR, GRAD_NORM_ATTR,
                                        GRAD_OF_INPUT_ATTR))


def resolved_rep(mesh: Mesh):
    from spmdc.dialects.shard import Replicate

    return [Replicate() for _ in mesh.axes]
