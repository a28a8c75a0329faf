"""The Core ATen elementwise ops: torch semantics on their domains, type checks, sharding rules
and which instances have a kernel form."""

import pytest
import torch

from spmdc.dialects.func import FuncOp, ReturnOp
from spmdc.ir import InferError, TensorType, verify
from spmdc.ir.registry import lookup_op


def T(*shape, elt="f32"):
    return TensorType(tuple(shape), elt)


def build(name, operand_types, attrs=None):
    cls = lookup_op(name)
    f = FuncOp.build("f", operand_types, [])
    op = cls.create(list(f.body.args), attributes=attrs or {})
    f.set_function_type(type(f.function_type)(tuple(operand_types), tuple(op.result_types)))
    f.body.append(op)
    f.body.append(ReturnOp.create(list(op.results), result_types=[]))
    verify(f)
    return op


EDGES = [-1.0, 1.0, 0.0, -0.0, 0.5, -0.999, 0.999]


@pytest.mark.parametrize("name,x", [
    ("tensor.asin", torch.tensor(EDGES + [1.5, -2.0])),
    ("tensor.acos", torch.tensor(EDGES + [1.5, -2.0], dtype=torch.float64)),
    ("tensor.atanh", torch.tensor(EDGES + [3.0])),
    ("tensor.acosh", torch.tensor([1.0, 1.0001, 2.0, 1e30, 0.5, float("inf")])),
])
def test_inverse_functions_on_their_domain_and_outside(name, x):
    op = build(name, [T(*x.shape, elt="f64" if x.dtype == torch.float64 else "f32")])
    want = getattr(torch, name.split(".")[1])(x)
    got = op.reference(x)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert torch.isnan(got).any()  # the points outside the domain are NaN, as in torch


def test_elu_coefficients_and_leaky_relu_slope():
    x = torch.linspace(-3, 3, 13)
    elu = build("tensor.elu", [T(13)], {"alpha": 0.5, "scale": 2.0, "input_scale": 3.0})
    assert torch.equal(elu.reference(x), torch.where(x > 0, 2.0 * x, 2.0 * 0.5 * torch.expm1(3.0 * x)))
    assert torch.equal(build("tensor.elu", [T(13)]).reference(x), torch.nn.functional.elu(x))
    assert torch.equal(build("tensor.leaky_relu", [T(13)]).reference(x), torch.nn.functional.leaky_relu(x))


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("elt", ["f32", "i64"])
def test_div_rounding_modes(mode, elt):
    dtype = torch.float32 if elt == "f32" else torch.int64
    a = torch.tensor([7, -7, 7, -7, 0, 5], dtype=dtype)
    b = torch.tensor([2, 2, -2, -2, 3, 5], dtype=dtype)
    op = build("tensor.div", [T(6, elt=elt), T(6, elt=elt)], {"rounding_mode": mode})
    want = torch.div(a, b, rounding_mode=mode)
    assert torch.equal(op.reference(a, b), want)
    assert torch.equal(want[:4].abs(), torch.tensor([3, 3, 3, 3] if mode == "trunc" else [3, 4, 4, 3], dtype=dtype))


@pytest.mark.parametrize("name,types,attrs,fragment", [
    ("tensor.asin", [T(4, elt="i64")], {}, "floating-point"),
    ("tensor.round", [T(4, elt="i32")], {}, "floating-point"),
    ("tensor.atan2", [T(4, elt="i64"), T(4, elt="i64")], {}, "floating-point"),
    ("tensor.atan2", [T(4), T(4, elt="f64")], {}, "different element types"),
    ("tensor.isnan", [T(4, elt="i64")], {}, "floating-point"),
    ("tensor.fmod", [T(3, 4), T(5)], {}, "broadcast"),
    ("tensor.div", [T(4), T(4)], {"rounding_mode": "round"}, "rounding_mode"),
])
def test_type_errors(name, types, attrs, fragment):
    from spmdc.ir.attributes import StringAttr

    attrs = {k: StringAttr(v) for k, v in attrs.items()}
    with pytest.raises(InferError, match=fragment):
        lookup_op(name).infer_result_types(types, attrs)


def test_isinf_isnan_give_i1_of_the_input_shape():
    op = build("tensor.isinf", [T(2, 3, elt="bf16")])
    assert op.result.type == T(2, 3, elt="i1")
    x = torch.tensor([[1.0, float("inf"), float("nan")], [-float("inf"), 0.0, 3e38]]).bfloat16()
    assert torch.equal(op.reference(x), torch.isinf(x))


def test_only_a_true_float_quotient_passes_a_pending_sum():
    plain = build("tensor.div", [T(3, 4), T(4)]).sharding_rule()
    assert plain.partial_one == (0,)
    for types, attrs in (([T(3, 4), T(4)], {"rounding_mode": "trunc"}),
                         ([T(3, 4), T(4)], {"rounding_mode": "floor"}),
                         ([T(3, 4, elt="i64"), T(4, elt="i64")], {})):   # integer division truncates
        rule = build("tensor.div", types, attrs).sharding_rule()
        assert rule.partial_one == () and not rule.partial_all and not rule.blocked
    for name in ("tensor.fmod", "tensor.remainder", "tensor.atan2"):
        rule = build(name, [T(3, 4), T(4)]).sharding_rule()
        assert rule.partial_one == () and not rule.partial_all and not rule.blocked


@pytest.mark.parametrize("name,elt,fused", [
    ("tensor.asin", "f32", True), ("tensor.asin", "bf16", True), ("tensor.asin", "f64", False),
    ("tensor.round", "f64", True), ("tensor.tan", "f64", True), ("tensor.expm1", "f64", False),
    ("tensor.elu", "f16", True), ("tensor.leaky_relu", "f64", True),
])
def test_kernel_forms_where_exact(name, elt, fused):
    op = build(name, [T(4, elt=elt)])
    assert (op.kernel_role() == "elementwise") is fused


@pytest.mark.parametrize("name", ["tensor.fmod", "tensor.remainder"])
def test_remainders_fuse_on_integers_only(name):
    assert build(name, [T(4, elt="i32"), T(4, elt="i32")]).kernel_role() == "elementwise"
    assert build(name, [T(4), T(4)]).kernel_role() is None
    assert build("tensor.div", [T(4), T(4)], {"rounding_mode": "floor"}).kernel_role() is None
    assert build("tensor.div", [T(4), T(4)], {"rounding_mode": "trunc"}).kernel_role() == "elementwise"
