"""Handlers for pointwise aten ops: arithmetic, math, comparisons, logic, where, clamp, casts.

Python scalars become rank-0 ``tensor.constant``s that the binary ops broadcast; operands
are cast to the result element type torch computed (its type promotion), so the ``tensor``
ops always see one element type.
"""

from __future__ import annotations

from spmdc.dialects import tensor as T
from spmdc.dialects.tensor.base import torch_dtype
from spmdc.frontend.aten.base import Emitter, handles
from spmdc.ir.types import TensorType, element_type_of_torch

A = "torch.aten."


def _binary(e: Emitter, cls, i: int = 0, j: int = 1, alpha_index: int | None = None):
    elt = e.out_type().element_type
    a = e.operand_or_scalar(i, elt)
    b = e.operand_or_scalar(j, elt)
    if alpha_index is not None:
        alpha = e.const(alpha_index, 1)
        if alpha is not None and alpha != 1:
            b = e.create(T.MulOp, [b, e.scalar(alpha, elt)])
    return [e.create(cls, [a, b])]


for _name, _cls in (("add", T.AddOp), ("sub", T.SubOp)):
    handles(A + _name + ".Tensor", A + _name + ".Scalar")(
        lambda e, _cls=_cls: _binary(e, _cls, alpha_index=2))
for _name, _cls in (("mul", T.MulOp), ("div", T.DivOp)):
    handles(A + _name + ".Tensor", A + _name + ".Scalar")(lambda e, _cls=_cls: _binary(e, _cls))
handles(A + "maximum")(lambda e: _binary(e, T.MaximumOp))
handles(A + "minimum")(lambda e: _binary(e, T.MinimumOp))
handles(A + "pow.Tensor_Scalar", A + "pow.Tensor_Tensor", A + "pow.Scalar")(lambda e: _binary(e, T.PowOp))


@handles(A + "rsub.Scalar", A + "rsub.Tensor")
def _rsub(e: Emitter):
    # rsub(x, other, alpha) = other - alpha * x
    elt = e.out_type().element_type
    x, other = e.operand_or_scalar(0, elt), e.operand_or_scalar(1, elt)
    alpha = e.const(2, 1)
    if alpha != 1:
        x = e.create(T.MulOp, [x, e.scalar(alpha, elt)])
    return [e.create(T.SubOp, [other, x])]


@handles(A + "reciprocal")
def _reciprocal(e: Emitter):
    # reciprocal(x) = 1 / x (BatchNorm in eval mode: 1 / sqrt(running_var + eps))
    elt = e.out_type().element_type
    return [e.create(T.DivOp, [e.scalar(1, elt), e.cast(e.tensor(0), elt)])]


@handles(A + "div.Tensor_mode", A + "div.Scalar_mode")
def _div_mode(e: Emitter):
    mode = e.const(2)
    if mode is None:
        return _binary(e, T.DivOp)
    if mode not in ("trunc", "floor"):
        raise e.unsupported(f"with rounding_mode={mode!r} is not supported")
    elt = e.out_type().element_type
    return [e.create(T.DivOp, [e.operand_or_scalar(0, elt), e.operand_or_scalar(1, elt)], {"rounding_mode": mode})]


# torch's result type (integer and bool operands included) is the traced one; both operands are cast to it
for _name, _cls in (("fmod", T.FmodOp), ("remainder", T.RemainderOp)):
    handles(A + _name + ".Tensor", A + _name + ".Scalar")(lambda e, _cls=_cls: _binary(e, _cls))
handles(A + "atan2")(lambda e: _binary(e, T.Atan2Op))


_UNARY = {
    "neg": T.NegOp, "exp": T.ExpOp, "log": T.LogOp, "sqrt": T.SqrtOp, "rsqrt": T.RsqrtOp, "tanh": T.TanhOp,
    "relu": T.ReluOp, "sigmoid": T.SigmoidOp, "sin": T.SinOp, "cos": T.CosOp, "erf": T.ErfOp,
    "silu": T.SiluOp, "log1p": T.Log1pOp, "abs": T.AbsOp, "sign": T.SignOp,
    # integer and bool inputs compute in the default float type, torch's result type for them
    "acos": T.AcosOp, "acosh": T.AcoshOp, "asin": T.AsinOp, "asinh": T.AsinhOp, "atan": T.AtanOp,
    "atanh": T.AtanhOp, "cosh": T.CoshOp, "sinh": T.SinhOp, "tan": T.TanOp, "expm1": T.Expm1Op,
    "log10": T.Log10Op, "log2": T.Log2Op,
}
for _name, _cls in _UNARY.items():
    handles(A + _name)(lambda e, _cls=_cls: [e.create(_cls, [e.cast(e.tensor(0), e.out_type().element_type)])])


def _rounding(e: Emitter, cls):
    x = e.tensor(0)
    if not x.tensor_type.is_float:  # torch returns integers unchanged (bool: an error in torch itself)
        return [x]
    return [e.create(cls, [x])]


for _name, _cls in (("ceil", T.CeilOp), ("floor", T.FloorOp), ("round", T.RoundOp), ("trunc", T.TruncOp)):
    handles(A + _name)(lambda e, _cls=_cls: _rounding(e, _cls))


def _float_test(e: Emitter, cls):
    x = e.tensor(0)
    if not x.tensor_type.is_float:  # an integer is never infinite nor NaN
        return [e.splat(False, x.tensor_type.with_element_type("i1"))]
    return [e.create(cls, [x])]


handles(A + "isinf")(lambda e: _float_test(e, T.IsInfOp))
handles(A + "isnan")(lambda e: _float_test(e, T.IsNanOp))


@handles(A + "elu")
def _elu(e: Emitter):
    # elu(x, alpha=1, scale=1, input_scale=1); a coefficient of 1 is the absent attribute
    coef = {k: float(e.const(i, 1.0)) for i, k in ((1, "alpha"), (2, "scale"), (3, "input_scale"))}
    return [e.create(T.EluOp, [e.tensor(0)], {k: v for k, v in coef.items() if v != 1.0})]


@handles(A + "leaky_relu")
def _leaky_relu(e: Emitter):
    return [e.create(T.LeakyReluOp, [e.tensor(0)], {"negative_slope": float(e.const(1, 0.01))})]


@handles(A + "hardtanh")
def _hardtanh(e: Emitter):
    # hardtanh is torch's clamp into [min_val, max_val] in the input's type: on an integer
    # tensor the bounds are truncated to integers (C++'s conversion), not promoted
    x = e.tensor(0)
    conv = float if x.tensor_type.is_float else int
    lo, hi = conv(e.const(1, -1.0)), conv(e.const(2, 1.0))
    return [e.create(T.ClampOp, [x], {"min": lo, "max": hi})]


@handles(A + "gelu")
def _gelu(e: Emitter):
    approx = e.const(1, "none")
    attrs = {} if approx == "none" else {"approximate": approx}
    return [e.create(T.GeluOp, [e.tensor(0)], attrs)]


@handles(A + "gelu_backward")
def _gelu_backward(e: Emitter):
    approx = e.const(2, "none")
    attrs = {} if approx == "none" else {"approximate": approx}
    return [e.create(T.GeluBackwardOp, [e.tensor(0), e.tensor(1)], attrs)]


_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")


def result_element_type(e: Emitter, a: TensorType, b: TensorType | int | float | bool) -> str:
    """torch's common type of ``a`` and ``b`` (a tensor type or a Python scalar), asked of torch
    itself on meta tensors: a 0-dim tensor counts less than a dimensioned one of its category
    but, of a higher one, gives its own type (i64 tensor, f64 0-dim: f64); a Python float with
    an integer tensor gives the default float type."""
    import torch

    def meta(t: TensorType):
        return torch.empty((1,) * min(t.rank, 1), dtype=torch_dtype(t.element_type), device="meta")

    dtype = torch.result_type(meta(a), meta(b) if isinstance(b, TensorType) else b)
    elt = element_type_of_torch(dtype)
    if elt is None:
        raise e.unsupported(f"compares in {dtype}, which spmdc does not support")
    return elt


def _compare(e: Emitter, pred: str):
    # the comparison runs in the operands' common type (its result is i1, so it is not the traced type)
    a = e.tensor(0)
    raw = e.raw(1)
    if isinstance(raw, (int, float, bool)):
        elt = result_element_type(e, a.tensor_type, raw)
        return [e.create(T.CompareOp, [e.cast(a, elt), e.scalar(raw, elt)], {"predicate": pred})]
    b = e.as_value(raw)
    elt = result_element_type(e, a.tensor_type, b.tensor_type)
    return [e.create(T.CompareOp, [e.cast(a, elt), e.cast(b, elt)], {"predicate": pred})]


for _p in _PREDICATES:
    handles(A + _p + ".Tensor", A + _p + ".Scalar")(lambda e, _p=_p: _compare(e, _p))


def _logic(e: Emitter, cls, logical: bool):
    elt = e.out_type().element_type
    vals = []
    for i in (0, 1):
        v = e.tensor(i)
        if logical and v.tensor_type.element_type != "i1":
            v = e.create(T.CompareOp, [v, e.scalar(0, v.tensor_type.element_type)], {"predicate": "ne"})
        vals.append(e.cast(v, elt))
    return [e.create(cls, vals)]


for _name, _cls in (("and", T.AndOp), ("or", T.OrOp), ("xor", T.XorOp)):
    handles(A + f"bitwise_{_name}.Tensor")(lambda e, _cls=_cls: _logic(e, _cls, False))
    # bool tensor with a bool scalar: bool; with an int scalar: i64 (torch's promotion, the traced type)
    handles(A + f"bitwise_{_name}.Scalar")(lambda e, _cls=_cls: _binary(e, _cls))
    handles(A + f"logical_{_name}")(lambda e, _cls=_cls: _logic(e, _cls, True))


@handles(A + "bitwise_not")
def _bitwise_not(e: Emitter):
    return [e.create(T.NotOp, [e.tensor(0)])]


@handles(A + "logical_not")
def _logical_not(e: Emitter):
    v = e.tensor(0)
    if v.tensor_type.element_type == "i1":
        return [e.create(T.NotOp, [v])]
    return [e.create(T.CompareOp, [v, e.scalar(0, v.tensor_type.element_type)], {"predicate": "eq"})]


@handles(A + "where.self", A + "where.ScalarSelf", A + "where.ScalarOther", A + "where.Scalar")
def _where(e: Emitter):
    elt = e.out_type().element_type
    cond = e.cast(e.tensor(0), "i1")
    return [e.create(T.SelectOp, [cond, e.operand_or_scalar(1, elt), e.operand_or_scalar(2, elt)])]


@handles(A + "masked_fill.Scalar", A + "masked_fill.Tensor")
def _masked_fill(e: Emitter):
    elt = e.out_type().element_type
    x = e.cast(e.tensor(0), elt)
    return [e.create(T.SelectOp, [e.cast(e.tensor(1), "i1"), e.operand_or_scalar(2, elt), x])]


@handles(A + "clamp", A + "clamp_min", A + "clamp_max")
def _clamp(e: Emitter):
    x = e.cast(e.tensor(0), e.out_type().element_type)
    name = e.rec.name.rsplit(".", 1)[-1]
    if name == "clamp":
        lo, hi = e.const(1, None), e.const(2, None)
    else:
        lo, hi = (e.const(1), None) if name == "clamp_min" else (None, e.const(1))
    attrs = {k: (float(v) if x.tensor_type.is_float else v) for k, v in (("min", lo), ("max", hi)) if v is not None}
    if not attrs:
        return [x]
    return [e.create(T.ClampOp, [x], attrs)]


@handles(A + "clamp.Tensor")
def _clamp_tensor(e: Emitter):
    # torch: maximum with min (NaN propagating), then minimum with max; operands promoted together
    elt = e.out_type().element_type
    x = e.cast(e.tensor(0), elt)
    lo, hi = e.raw(1), (e.raw(2) if e.num_operands > 2 else None)
    if lo is None and hi is None:
        raise e.unsupported("needs at least one of min and max")
    if lo is not None:
        x = e.create(T.MaximumOp, [x, e.cast(e.as_value(lo), elt)])
    if hi is not None:
        x = e.create(T.MinimumOp, [x, e.cast(e.as_value(hi), elt)])
    return [x]


@handles(A + "threshold_backward")
def _threshold_backward(e: Emitter):
    grad, x = e.tensor(0), e.tensor(1)
    elt = x.tensor_type.element_type
    mask = e.create(T.CompareOp, [x, e.scalar(e.const(2), elt)], {"predicate": "le"})
    return [e.create(T.SelectOp, [mask, e.scalar(0, grad.tensor_type.element_type), grad])]


@handles(A + "_to_copy", "torch.prims.convert_element_type", A + "to.dtype", A + "type_as",
         A + "_to_dtype")
def _convert(e: Emitter):
    return [e.cast(e.tensor(0), e.out_type().element_type)]


@handles(A + "clone", A + "alias", A + "contiguous", A + "detach", A + "lift_fresh_copy", A + "copy")
def _identity(e: Emitter):
    name = e.rec.name
    if name == A + "copy":  # copy(self, src): the values of src in self's dtype
        return [e.cast(e.broadcast(e.tensor(1), e.out_type().shape), e.out_type().element_type)]
    return [e.cast(e.tensor(0), e.out_type().element_type)]
