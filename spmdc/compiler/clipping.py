"""Gradient clipping by global norm, inside the training step.

``add_gradient_clipping(module, max_norm)`` rewrites a captured training step (global shapes,
before the plan) so that it returns clipped gradients and their norm::

    %sq = tensor.mul %g, %g                       // per gradient
    %s = tensor.sum %sq {dims = [0, 1], ...}       // -> tensor<f32>
    %t = tensor.add %s_0, %s_1 ...                // the squared global norm
    %norm = tensor.sqrt %t
    %c = tensor.div %max_norm, (%norm + 1e-6)      // torch.nn.utils.clip_grad_norm_'s coefficient
    %coef = tensor.clamp %c {max = 1.0}
    %g_clipped = tensor.mul %g, %coef
    func.return ..., %g_clipped, ..., %norm {spmdc.grad_norm}

The sharding passes place the collectives: a gradient stored sharded is squared and summed on
its shard (the sums stay ``P(sum)`` through the adds), so the norm costs one all-reduce of a
scalar after the gradients' own reductions; no gradient is gathered.
"""

from __future__ import annotations

from typing import Any

from spmdc.dialects.attrs import GRAD_NORM_ATTR, GRAD_OF_ATTR, LOSS_ATTR
from spmdc.dialects.func import FuncOp
from spmdc.dialects.shard import AnnotateOp, Replicate, ShardingAttr, shard_dim
from spmdc.ir.attributes import UnitAttr
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder
from spmdc.ir.types import FunctionType, TensorType
from spmdc.passes.sharding_propagation import LATE
from spmdc.sharding.layouts import SHARDING


def add_gradient_clipping(module: Operation, max_norm: float, func_name: str = "main") -> int:
    """Clip the gradients ``@func_name`` returns to global norm ``max_norm``; returns how many."""
    from spmdc.dialects import tensor as T

    func = next(op for op in module.body.ops if isinstance(op, FuncOp) and op.sym_name == func_name)
    ret = func.return_op
    grads = [i for i in range(len(ret.operands)) if GRAD_OF_ATTR in func.res_attrs(i)]
    if not grads:
        return 0
    b = Builder.before(ret)
    loc = ret.location

    def scalar(value: float) -> object:
        return b.create(T.ConstantOp, [], {"value": _dense(value)}, location=loc).result

    groups: dict[tuple[int, ...], Any] = {}   # sharded mesh axes -> sum of squares (P over them)
    replicated = None
    stored = {}
    for i in grads:
        g = ret.operand(i)
        t = g.type
        if not isinstance(t, TensorType) or not t.is_float:
            raise ValueError(f"gradient #{i} of type {t} cannot be clipped")
        layout = func.res_attrs(i).get(SHARDING)
        if layout is not None:   # square the gradient where it is stored: its reduction comes first
            g = b.create(AnnotateOp, [g], {"sharding": layout, LATE: UnitAttr()}, location=loc).result
        stored[i] = g
        x = g if t.element_type == "f32" else b.create(T.CastOp, [g], result_type=t.with_element_type("f32")).result
        sq = b.create(T.MulOp, [x, x], location=loc).result
        s = b.create(T.SumOp, [sq], {"dims": list(range(t.rank)), "keepdim": False}, location=loc).result
        key = tuple(a for a, p in enumerate(layout.placements) if shard_dim(p) is not None) if layout else ()
        groups[key] = s if key not in groups else b.create(T.AddOp, [groups[key], s], location=loc).result
        if layout is not None:
            replicated = ShardingAttr(layout.mesh, tuple(Replicate() for _ in layout.placements))
    total = None
    for s in groups.values():   # one scalar all-reduce per set of sharded axes, then local adds
        if replicated is not None:
            s = b.create(AnnotateOp, [s], {"sharding": replicated}, location=loc).result
        total = s if total is None else b.create(T.AddOp, [total, s], location=loc).result
    norm = b.create(T.SqrtOp, [total], location=loc).result
    norm.name_hint = "grad_norm"
    denom = b.create(T.AddOp, [norm, scalar(1e-6)], location=loc).result
    coef = b.create(T.DivOp, [scalar(float(max_norm)), denom], location=loc).result
    coef = b.create(T.ClampOp, [coef], {"max": 1.0}, location=loc).result
    coef.name_hint = "clip_coef"
    for i in grads:
        g = stored[i]
        c = coef if g.type.element_type == "f32" else b.create(  # type: ignore[attr-defined]
            T.CastOp, [coef], result_type=TensorType((), g.type.element_type)).result  # type: ignore[attr-defined]
        clipped = b.create(T.MulOp, [g, c], location=loc).result
        clipped.name_hint = (g.name_hint or "grad") + "_clipped"
        ret.set_operand(i, clipped)
    ret.set_operands([*ret.operands, norm])
    func.set_function_type(FunctionType(func.function_type.inputs, tuple(v.type for v in ret.operands)))
    func.set_res_attr(len(ret.operands) - 1, GRAD_NORM_ATTR, UnitAttr())
    loss = next((func.res_attrs(k).get(SHARDING) for k in range(len(ret.operands) - 1)
                 if LOSS_ATTR in func.res_attrs(k)), None)
    if loss is not None:   # planned: the norm is replicated, like the loss
        func.set_res_attr(len(ret.operands) - 1, SHARDING, loss)
    return len(grads)


def _dense(value: float) -> object:
    from spmdc.ir.attributes import DenseAttr

    return DenseAttr(TensorType((), "f32"), (float(value),))
