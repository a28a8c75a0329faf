"""``tensor`` ops: torch reference implementations agree with torch and with shape inference."""

import zlib

import pytest
import torch
import torch.nn.functional as F

from spmdc.dialects.func import FuncOp, ReturnOp
from spmdc.dialects.tensor import TensorOp
from spmdc.ir import DenseAttr, InferError, TensorType, verify
from spmdc.ir.core import Block
from spmdc.ir.registry import all_ops, lookup_op
from spmdc.ir.types import ELEMENT_TYPE_INFO

DTYPES = {name: getattr(torch, e.torch) for name, e in ELEMENT_TYPE_INFO.items()}


def T(*shape, elt="f32"):
    return TensorType(tuple(shape), elt)


def rand(t: TensorType, gen, positive=False):
    dtype = DTYPES[t.element_type]
    if t.is_float:
        x = torch.randn(t.shape, generator=gen, dtype=torch.float64)
        x = x.abs() + 0.1 if positive else x
        return x.to(dtype)
    if t.element_type == "i1":
        return torch.randint(0, 2, t.shape, generator=gen).bool()
    x = torch.randint(-9, 10, t.shape, generator=gen)
    if positive:
        x = x.abs() + 1
    return x.to(dtype)


# name, operand types, attributes, explicit result types (None: inferred), torch function, positive inputs
CASES = [
    ("tensor.add", [T(3, 4), T(4)], {}, None, lambda a, b: a + b, False),
    ("tensor.add", [T(2, 1, 3, elt="i32"), T(4, 1, elt="i32")], {}, None, torch.add, False),
    ("tensor.sub", [T(3, 4), T(3, 1)], {}, None, torch.sub, False),
    ("tensor.mul", [T(3, 4), T()], {}, None, torch.mul, False),
    ("tensor.div", [T(3, 4), T(3, 4)], {}, None, torch.div, True),
    ("tensor.div", [T(5, elt="i32"), T(5, elt="i32")], {}, None,
     lambda a, b: torch.div(a, b, rounding_mode="trunc"), True),
    ("tensor.maximum", [T(2, 3), T(3)], {}, None, torch.maximum, False),
    ("tensor.minimum", [T(2, 3, elt="i64"), T(2, 3, elt="i64")], {}, None, torch.minimum, False),
    ("tensor.neg", [T(2, 3)], {}, None, torch.neg, False),
    ("tensor.neg", [T(4, elt="i8")], {}, None, torch.neg, False),
    ("tensor.exp", [T(2, 3)], {}, None, torch.exp, False),
    ("tensor.log", [T(2, 3)], {}, None, torch.log, True),
    ("tensor.sqrt", [T(2, 3, elt="f64")], {}, None, torch.sqrt, True),
    ("tensor.rsqrt", [T(2, 3)], {}, None, torch.rsqrt, True),
    ("tensor.tanh", [T(2, 3, elt="bf16")], {}, None, torch.tanh, False),
    ("tensor.relu", [T(2, 3)], {}, None, torch.relu, False),
    ("tensor.relu", [T(6, elt="i32")], {}, None, torch.relu, False),
    ("tensor.cast", [T(2, 3)], {}, [T(2, 3, elt="bf16")], lambda a: a.to(torch.bfloat16), False),
    ("tensor.cast", [T(4, elt="i32")], {}, [T(4, elt="f32")], lambda a: a.float(), False),
    ("tensor.sum", [T(2, 3, 4)], {"dims": [1]}, None, lambda a: a.sum(1), False),
    ("tensor.sum", [T(2, 3, 4)], {"dims": [0, 2], "keepdim": True}, None,
     lambda a: a.sum((0, 2), keepdim=True), False),
    ("tensor.sum", [T(3, 4, elt="i32")], {"dims": [0]}, None, lambda a: a.sum(0, dtype=torch.int32), False),
    ("tensor.sum", [T(3, 4)], {"dims": []}, None, lambda a: a, False),
    ("tensor.max", [T(2, 3, 4)], {"dims": [2]}, None, lambda a: a.amax(2), False),
    ("tensor.max", [T(2, 3)], {"dims": [0, 1], "keepdim": True}, None, lambda a: a.amax((0, 1), keepdim=True),
     False),
    ("tensor.mean", [T(2, 3, 4)], {"dims": [0, 1, 2]}, None, lambda a: a.mean(), False),
    ("tensor.mean", [T(2, 3)], {"dims": [1], "keepdim": True}, None, lambda a: a.mean(1, keepdim=True), False),
    ("tensor.permute", [T(2, 3, 4)], {"perm": [2, 0, 1]}, None, lambda a: a.permute(2, 0, 1), False),
    ("tensor.reshape", [T(2, 3, 4)], {}, [T(6, 4)], lambda a: a.reshape(6, 4), False),
    ("tensor.reshape", [T(2, 3)], {}, [T(3, 1, 2)], lambda a: a.reshape(3, 1, 2), False),
    ("tensor.broadcast", [T(3, 1)], {}, [T(2, 3, 4)], lambda a: a.expand(2, 3, 4), False),
    ("tensor.matmul", [T(3, 4), T(4, 5)], {}, None, torch.matmul, False),
    ("tensor.matmul", [T(2, 1, 3, 4), T(5, 4, 2)], {}, None, torch.matmul, False),
    ("tensor.matmul", [T(3, 4, elt="f64"), T(2, 4, 5, elt="f64")], {}, None, torch.matmul, False),
    ("tensor.linear", [T(3, 4), T(4, 5), T(5)], {}, None, lambda a, b, c: a @ b + c, False),
    # bf16: the bias added to the float32 product, one rounding (not the product rounded first)
    ("tensor.linear", [T(3, 4, elt="bf16"), T(4, 5, elt="bf16"), T(5, elt="bf16")], {}, None,
     lambda a, b, c: (a.float() @ b.float() + c.float()).to(torch.bfloat16), False),
    # activation.py
    ("tensor.sigmoid", [T(2, 3)], {}, None, torch.sigmoid, False),
    ("tensor.sin", [T(2, 3)], {}, None, torch.sin, False),
    ("tensor.cos", [T(2, 3, elt="f64")], {}, None, torch.cos, False),
    ("tensor.erf", [T(2, 3)], {}, None, torch.erf, False),
    ("tensor.log1p", [T(2, 3)], {}, None, lambda a: torch.log(1 + a.double()).to(a.dtype), True),
    ("tensor.silu", [T(2, 3, elt="bf16")], {}, None, lambda a: a * torch.sigmoid(a), False),
    ("tensor.abs", [T(2, 3)], {}, None, torch.abs, False),
    ("tensor.abs", [T(5, elt="i32")], {}, None, torch.abs, False),
    ("tensor.sign", [T(2, 3)], {}, None, torch.sign, False),
    ("tensor.sign", [T(6, elt="i64")], {}, None, torch.sign, False),
    ("tensor.gelu", [T(2, 3)], {}, None, F.gelu, False),
    ("tensor.gelu", [T(2, 3)], {"approximate": "none"}, None, F.gelu, False),
    ("tensor.gelu", [T(2, 3)], {"approximate": "tanh"}, None, lambda a: F.gelu(a, approximate="tanh"), False),
    # GELU's vjp, by autograd
    ("tensor.gelu_backward", [T(2, 3), T(2, 3)], {}, None, lambda g, x: torch.func.vjp(F.gelu, x)[1](g)[0], False),
    ("tensor.gelu_backward", [T(2, 3), T(2, 3)], {"approximate": "tanh"}, None,
     lambda g, x: torch.func.vjp(lambda a: F.gelu(a, approximate="tanh"), x)[1](g)[0], False),
    ("tensor.gelu_backward", [T(2, 3, elt="bf16"), T(2, 3, elt="bf16")], {}, None,
     lambda g, x: torch.func.vjp(F.gelu, x)[1](g)[0], False),
    ("tensor.pow", [T(2, 3), T()], {}, None, torch.pow, True),
    ("tensor.pow", [T(2, 3), T(3)], {}, None, torch.pow, True),
    ("tensor.pow", [T(4, elt="i64"), T(elt="i64")], {}, None, torch.pow, True),
    ("tensor.clamp", [T(2, 3)], {"min": -0.5, "max": 0.5}, None, lambda a: a.clamp(-0.5, 0.5), False),
    ("tensor.clamp", [T(2, 3)], {"max": 0}, None, lambda a: a.clamp(max=0), False),
    ("tensor.clamp", [T(6, elt="i64")], {"min": 0, "max": 5}, None, lambda a: a.clamp(0, 5), False),
    # Core ATen elementwise ops (acos, acosh, asin, atanh need inputs in their domain:
    # tests/unit/dialects/test_elementwise_core.py)
    ("tensor.tan", [T(2, 3)], {}, None, torch.tan, False),
    ("tensor.sinh", [T(2, 3)], {}, None, torch.sinh, False),
    ("tensor.cosh", [T(2, 3, elt="f64")], {}, None, torch.cosh, False),
    ("tensor.atan", [T(2, 3)], {}, None, torch.atan, False),
    ("tensor.asinh", [T(2, 3, elt="bf16")], {}, None, torch.asinh, False),
    ("tensor.atan2", [T(2, 3), T(3)], {}, None, torch.atan2, False),
    ("tensor.expm1", [T(2, 3)], {}, None, torch.expm1, False),
    ("tensor.log2", [T(2, 3)], {}, None, torch.log2, True),
    ("tensor.log10", [T(2, 3)], {}, None, torch.log10, True),
    ("tensor.ceil", [T(2, 3)], {}, None, torch.ceil, False),
    ("tensor.floor", [T(2, 3, elt="bf16")], {}, None, torch.floor, False),
    ("tensor.trunc", [T(2, 3)], {}, None, torch.trunc, False),
    ("tensor.round", [T(2, 3, elt="f64")], {}, None, torch.round, False),
    ("tensor.fmod", [T(2, 3), T(3)], {}, None, torch.fmod, True),
    ("tensor.fmod", [T(2, 3, elt="i32"), T(3, elt="i32")], {}, None, torch.fmod, True),
    ("tensor.remainder", [T(2, 3, elt="i64"), T(elt="i64")], {}, None, torch.remainder, True),
    ("tensor.div", [T(2, 3), T(3)], {"rounding_mode": "floor"}, None,
     lambda a, b: torch.div(a, b, rounding_mode="floor"), True),
    ("tensor.isinf", [T(2, 3)], {}, None, torch.isinf, False),
    ("tensor.isnan", [T(2, 3, elt="bf16")], {}, None, torch.isnan, False),
    ("tensor.elu", [T(2, 3)], {"alpha": 0.5, "scale": 2.0}, None, lambda a: F.elu(a, 0.5) * 2.0, False),
    ("tensor.leaky_relu", [T(2, 3)], {"negative_slope": 0.2}, None, lambda a: F.leaky_relu(a, 0.2), False),
    # compare.py
    *[("tensor.compare", [T(3, 4, elt=elt), T(4, elt=elt)], {"predicate": p}, None, getattr(torch, p), False)
      for p, elt in [("eq", "i32"), ("ne", "i1"), ("lt", "f32"), ("le", "i64"), ("gt", "bf16"), ("ge", "i8")]],
    ("tensor.and", [T(4, elt="i1"), T(4, elt="i1")], {}, None, torch.logical_and, False),
    ("tensor.and", [T(2, 3, elt="i64"), T(3, elt="i64")], {}, None, lambda a, b: a & b, False),
    ("tensor.or", [T(2, 1, elt="i1"), T(3, elt="i1")], {}, None, torch.logical_or, False),
    ("tensor.or", [T(5, elt="i32"), T(elt="i32")], {}, None, lambda a, b: a | b, False),
    ("tensor.xor", [T(4, elt="i1"), T(4, elt="i1")], {}, None, torch.logical_xor, False),
    ("tensor.xor", [T(4, elt="i8"), T(4, elt="i8")], {}, None, lambda a, b: a ^ b, False),
    ("tensor.not", [T(5, elt="i1")], {}, None, torch.logical_not, False),
    ("tensor.not", [T(5, elt="i32")], {}, None, lambda a: ~a, False),
    ("tensor.select", [T(3, 4, elt="i1"), T(3, 4), T()], {}, None, torch.where, False),
    ("tensor.select", [T(4, elt="i1"), T(3, 1, elt="i64"), T(4, elt="i64")], {}, None, torch.where, False),
    # nn.py
    ("tensor.all", [T(2, 3, 4, elt="i1")], {"dims": [1, 2]}, None, lambda a: a.all(2).all(1), False),
    ("tensor.any", [T(2, 3, elt="i1")], {"dims": [0], "keepdim": True}, None, lambda a: a.any(0, keepdim=True), False),
    ("tensor.attention", [T(2, 3, 5, 4), T(2, 3, 6, 4), T(2, 3, 6, 2)], {"scale": 0.7}, None,
     lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) * 0.7, -1) @ v, False),
    ("tensor.attention", [T(1, 2, 4, 4), T(1, 2, 4, 4), T(1, 2, 4, 4)], {"is_causal": True, "scale": 0.5}, None,
     lambda q, k, v: torch.softmax((q @ k.transpose(-2, -1) * 0.5).masked_fill(
         ~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf")), -1) @ v, False),
    ("tensor.attention", [T(1, 4, 3, 2), T(1, 2, 5, 2), T(1, 2, 5, 3)], {"enable_gqa": True, "scale": 1.0}, None,
     lambda q, k, v: torch.softmax(q @ k.repeat_interleave(2, 1).transpose(-2, -1), -1) @ v.repeat_interleave(2, 1),
     False),
    # convolution against unfold + matmul (an independent formulation)
    ("tensor.conv", [T(2, 3, 7, 6), T(4, 3, 3, 2)], {"stride": [2, 1], "padding": [1, 0], "dilation": [1, 2]}, None,
     lambda x, w: (w.reshape(4, -1) @ F.unfold(x, (3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1))
                   ).reshape(2, 4, 4, 4), False),
    ("tensor.conv", [T(2, 4, 9), T(6, 2, 3)], {"stride": [1], "padding": [1], "dilation": [1], "groups": 2}, None,
     lambda x, w: torch.cat([(w[3 * g:3 * g + 3].reshape(3, -1) @ F.unfold(
         x[:, 2 * g:2 * g + 2, None, :], (1, 3), padding=(0, 1))).reshape(2, 3, 9) for g in range(2)], 1), False),
    ("tensor.softmax", [T(2, 3, 4)], {"dim": 2}, None, lambda a: torch.softmax(a, 2), False),
    ("tensor.softmax", [T(3, 4, elt="f64")], {"dim": 0}, None, lambda a: torch.softmax(a, 0), False),
    ("tensor.log_softmax", [T(2, 5)], {"dim": 1}, None, lambda a: torch.log_softmax(a, 1), False),
    ("tensor.cumsum", [T(2, 5)], {"dim": 1}, None, lambda a: torch.cumsum(a, 1), False),
    ("tensor.cumsum", [T(2, 5, elt="i64")], {"dim": 1}, None, lambda a: torch.cumsum(a, 1), False),
    ("tensor.cumsum", [T(3, 4, elt="i32")], {"dim": 0}, None, lambda a: torch.cumsum(a, 0, dtype=torch.int32), False),
    ("tensor.var", [T(2, 3, 4)], {"dims": [2], "correction": 0, "keepdim": True}, None,
     lambda a: a.var(2, correction=0, keepdim=True), False),
    ("tensor.var", [T(3, 4)], {"dims": [0, 1], "correction": 1}, None, lambda a: a.var(), False),
    ("tensor.var", [T(3, 4, 2)], {"dims": [0, 2], "correction": 1.5}, None,
     lambda a: ((a - a.mean((0, 2), keepdim=True)) ** 2).sum((0, 2)) / (6 - 1.5), False),
    ("tensor.var", [T(3, 4)], {"dims": [], "correction": 0}, None, torch.zeros_like, False),
    # index.py (positive inputs: integer operands are 1..10, valid indices for dims of size 11)
    ("tensor.slice", [T(2, 8)], {"dim": 1, "start": 1, "end": 7, "step": 2}, None, lambda a: a[:, 1:7:2], False),
    ("tensor.slice", [T(5, 3, elt="i32")], {"dim": 0, "start": 2, "end": 5, "step": 1}, None, lambda a: a[2:5], False),
    ("tensor.slice", [T(4, 3)], {"dim": 0, "start": 2, "end": 2, "step": 1}, None, lambda a: a[2:2], False),
    ("tensor.insert_slice", [T(2, 8), T(2, 3)], {"dim": 1, "start": 1, "end": 7, "step": 2}, None,
     lambda d, s: _assigned(d, (slice(None), slice(1, 7, 2)), s), False),
    ("tensor.reverse", [T(2, 3, 4)], {"dims": [0, 2]}, None, lambda a: a.flip(0, 2), False),
    ("tensor.reverse", [T(3, elt="i64")], {"dims": []}, None, lambda a: a, False),
    ("tensor.concat", [T(2, 3), T(2, 5), T(2, 1)], {"dim": 1}, None, lambda *xs: torch.cat(xs, 1), False),
    ("tensor.concat", [T(4, elt="i64")], {"dim": 0}, None, lambda a: a, False),
    ("tensor.pad", [T(2, 8, elt="i64")], {"low": [0, 0], "high": [0, 1], "value": -100}, None,
     lambda a: F.pad(a, (0, 1), value=-100), False),
    ("tensor.pad", [T(3, 4)], {"low": [1, -1], "high": [-1, 2], "value": 0.5}, None,
     lambda a: F.pad(a, (-1, 2, 1, -1), value=0.5), False),
    ("tensor.embedding", [T(11, 4), T(2, 3, elt="i64")], {}, None, lambda w, i: w[i], True),
    ("tensor.embedding", [T(11, 4, elt="bf16"), T(5, elt="i32")], {}, None, lambda w, i: w[i], True),
    ("tensor.gather", [T(3, 11), T(3, 2, elt="i64")], {"dim": 1}, None, lambda x, i: torch.gather(x, 1, i), True),
    ("tensor.gather", [T(11, 4), T(5, 3, elt="i32")], {"dim": 0}, None, lambda x, i: torch.gather(x, 0, i), True),
    ("tensor.scatter", [T(3, 11), T(3, 1, elt="i64"), T(3, 1)], {"dim": 1}, None,
     lambda x, i, s: x.scatter(1, i, s), True),
    ("tensor.scatter", [T(3, 11), T(3, 6, elt="i64"), T(3, 6)], {"dim": 1, "reduce": "add"}, None,
     lambda x, i, s: x.scatter_add(1, i, s), True),
    ("tensor.index", [T(11, 12, 3), T(2, 1, elt="i64"), T(1, 4, elt="i64")], {}, None, lambda x, i, j: x[i, j], True),
    ("tensor.index", [T(11, 3, elt="i64"), T(5, elt="i32")], {}, None, lambda x, i: x[i], True),
    ("tensor.index_put", [T(11, 3), T(6, elt="i64"), T(6, 3)], {"accumulate": True}, None,
     lambda x, i, v: x.index_add(0, i, v), True),
    ("tensor.index_put", [T(11, 12), T(2, 1, elt="i64"), T(1, 3, elt="i64"), T()], {}, None,
     lambda x, i, j, v: _assigned(x, (i, j), v), True),
    # reduction.py / sort.py / index.py / random.py (reduction-core helper)
    ("tensor.min", [T(2, 3, 4)], {"dims": [0, 2], "keepdim": True}, None,
     lambda a: a.amin((0, 2), keepdim=True), False),
    ("tensor.min", [T(3, 4, elt="i32")], {"dims": [1]}, None, lambda a: a.amin(1), False),
    ("tensor.prod", [T(3, 4)], {"dims": [1]}, None, lambda a: a.prod(1), False),
    ("tensor.prod", [T(3, 4, elt="i64")], {"dims": [0, 1]}, None, lambda a: a.prod(), True),
    ("tensor.argmax", [T(3, 5)], {"dim": 1, "keepdim": True}, None, lambda a: a.argmax(1, keepdim=True), False),
    ("tensor.argmin", [T(3, 5)], {"keepdim": False}, None, lambda a: a.argmin(), False),
    ("tensor.histc", [T(4, 6)], {"bins": 5, "min": -1.0, "max": 1.0}, None,
     lambda a: torch.histc(a, 5, -1.0, 1.0), False),
    ("tensor.cumprod", [T(2, 5)], {"dim": 1}, None, lambda a: torch.cumprod(a, 1), False),
    ("tensor.cumprod", [T(3, 4, elt="i32")], {"dim": 0}, None, lambda a: torch.cumprod(a, 0, dtype=torch.int32), True),
    ("tensor.index_select", [T(11, 4), T(6, elt="i64")], {"dim": 0}, None,
     lambda x, i: torch.index_select(x, 0, i), True),
    ("tensor.scatter_reduce", [T(3, 11), T(3, 6, elt="i64"), T(3, 6)],
     {"dim": 1, "reduce": "amax", "include_self": False}, None,
     lambda x, i, s: x.scatter_reduce(1, i, s, "amax", include_self=False), True),
]


def _assigned(x, index, v):
    """A copy of ``x`` with ``x[index] = v``."""
    r = x.clone()
    r[index] = v
    return r


def build(name, operand_types, attrs, result_types):
    """A verified function ``f(args) { %r = op(args); return %r }``; returns the op."""
    cls = lookup_op(name)
    f = FuncOp.build("f", operand_types, [])
    op = cls.create(list(f.body.args), attributes=attrs, result_types=result_types)
    f.set_function_type(type(f.function_type)(tuple(operand_types), tuple(op.result_types)))
    f.body.append(op)
    f.body.append(ReturnOp.create(list(op.results), result_types=[]))
    verify(f)
    return op


def test_every_tensor_op_is_checked_against_torch():
    tensor_ops = {cls.name for cls in all_ops() if issubclass(cls, TensorOp)}
    # attention_grad: below; random ops: tests/unit/dialects/test_random.py (bitwise against torch's draws)
    covered = {c[0] for c in CASES} | {"tensor.constant", "tensor.attention_grad", "tensor.random", "tensor.rng_seed",
                                       "tensor.acos", "tensor.acosh", "tensor.asin", "tensor.atanh",  # see CASES
                                       # two results or a random draw: tests/unit/dialects/test_reduction_core.py
                                       "tensor.topk", "tensor.sort", "tensor.randperm",
                                       # against torch in test_nn_core.py (pools, distances, grids, bags)
                                       "tensor.adaptive_avg_pool", "tensor.adaptive_avg_pool_grad", "tensor.avg_pool",
                                       "tensor.avg_pool_grad", "tensor.max_pool", "tensor.upsample_nearest",
                                       "tensor.cdist", "tensor.cdist_grad", "tensor.pdist", "tensor.pdist_grad",
                                       "tensor.grid_sample", "tensor.grid_sample_grad", "tensor.embedding_bag_max",
                                       # against torch / a reference loop in test_shape_core.py
                                       "tensor.diagonal", "tensor.diagonal_scatter", "tensor.grouped_matmul",
                                       "tensor.iota",
                                       "tensor.grouped_matmul_wgrad",
                                       # against torch's sort-and-index form in test_expert_ops.py
                                       "tensor.expert_counts", "tensor.expert_route", "tensor.expert_dispatch",
                                       "tensor.expert_combine",
                                       "tensor.conv_input_grad", "tensor.conv_weight_grad"}  # the last two: below
    missing = sorted(tensor_ops - covered)
    assert not missing, f"add cases comparing the torch implementation with torch to CASES for: {missing}"
    assert len(tensor_ops) > 40


@pytest.mark.parametrize("name,types,attrs,results,fn,positive", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_reference_matches_torch(name, types, attrs, results, fn, positive):
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    op = build(name, types, attrs, results)
    inputs = [rand(t, gen, positive) for t in types]
    got = op.reference(*inputs)
    want = fn(*inputs)
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
    if got.dtype.is_floating_point:
        torch.testing.assert_close(got, want)
    else:
        assert torch.equal(got, want)
    # the declared (verified) result type agrees with what torch produced
    rt = op.result.type
    assert rt.shape == tuple(want.shape) and DTYPES[rt.element_type] == want.dtype
    inferred = type(op).infer_result_types(list(types), op.attributes)
    if results is None:
        assert inferred == [TensorType(tuple(want.shape), rt.element_type)]
    else:
        assert inferred is None  # result type comes from the IR, not inference
    for x, t in zip(inputs, types):  # inputs are not modified in place
        assert tuple(x.shape) == t.shape


@pytest.mark.parametrize("dense", [
    DenseAttr(T(2, 3), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)),
    DenseAttr(T(2, 2, elt="i32"), (7,)),
    DenseAttr(T(elt="f64"), (2.5,)),
    DenseAttr(T(3, elt="i1"), (True, False, True)),
])
def test_constant_reference(dense):
    op = build("tensor.constant", [], {"value": dense}, None)
    assert op.result.type == dense.type
    got = op.reference()
    assert got.dtype == DTYPES[dense.type.element_type] and tuple(got.shape) == dense.type.shape
    assert got.flatten().tolist() == dense.flat_values()


@pytest.mark.parametrize("name,types,attrs,fragment", [
    ("tensor.add", [T(3), T(4)], {}, "not broadcast-compatible"),
    ("tensor.add", [T(3), T(3, elt="f16")], {}, "different element types"),
    ("tensor.exp", [T(3, elt="i32")], {}, "floating-point"),
    ("tensor.matmul", [T(3, 4), T(5, 6)], {}, "contracting dims differ: 4"),
    ("tensor.matmul", [T(4), T(4, 2)], {}, "rank >= 2"),
    ("tensor.linear", [T(3, 4), T(4, 5), T(4)], {}, "bias must be a vector of 5 elements"),
    ("tensor.linear", [T(2, 3, 4), T(4, 5), T(5)], {}, "operands must be matrices"),
    ("tensor.sum", [T(3, 4)], {"dims": [5]}, "out of range"),
    ("tensor.permute", [T(3, 4)], {"perm": [0]}, "has 1 entries"),
    ("tensor.mean", [T(3, elt="i64")], {"dims": [0]}, "floating-point"),
    ("tensor.index", [T(4, 3), T(4, elt="i1")], {}, "must be an i32 or i64 tensor"),
    ("tensor.gather", [T(4, 3), T(4, 1, elt="i16")], {"dim": 1}, "must be an i32 or i64 tensor"),
    ("tensor.embedding", [T(8, 3), T(4, elt="i8")], {}, "must be an i32 or i64 tensor"),
])
def test_create_raises_infer_error(name, types, attrs, fragment):
    block = Block(types)
    with pytest.raises(InferError, match=fragment):
        lookup_op(name).create(list(block.args), attributes=attrs)


def test_ops_without_inference_need_result_types():
    block = Block([T(2, 3)])
    with pytest.raises(ValueError, match="cannot infer its result types"):
        lookup_op("tensor.reshape").create(list(block.args))



@pytest.mark.parametrize("causal,gqa,masked,heads", [(True, False, False, 2), (False, True, False, 1),
                                                     (False, False, True, 2), (False, False, False, 1)],
                         ids=["causal", "gqa", "masked", "one-key-head-broadcast"])
def test_attention_grad_matches_autograd_of_torch_attention(causal, gqa, masked, heads):
    """tensor.attention_grad (probabilities recomputed) against autograd through torch's own
    scaled_dot_product_attention: dq, dk, dv."""
    gen = torch.Generator().manual_seed(7)
    hk = heads
    q = torch.randn(2, 2, 5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, hk, 6 if not causal else 5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, hk, k.shape[2], 4, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 1, 5, k.shape[2], generator=gen) > 0.3 if masked else None
    if mask is not None:
        mask[..., 0] = True   # every query sees some key
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=0.4, enable_gqa=gqa)
    do = torch.randn(o.shape, generator=gen, dtype=torch.float64)
    o.backward(do)
    types = [TensorType(tuple(t.shape), "f64") for t in (do, q, k, v, o)]
    attrs = {"scale": 0.4, "is_causal": causal, "enable_gqa": gqa}
    if masked:
        types.append(TensorType(tuple(mask.shape), "i1"))
    op = build("tensor.attention_grad", types, attrs, types[1:4])
    args = [do, q.detach(), k.detach(), v.detach(), o.detach()] + ([mask] if masked else [])
    dq, dk, dv = op.reference(*args)
    for got, want in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("spatial,attrs", [
    (1, {"stride": [2], "padding": [1], "dilation": [1], "groups": 1}),
    (2, {"stride": [1, 2], "padding": [1, 0], "dilation": [2, 1], "groups": 1}),
    (2, {"stride": [1, 1], "padding": [0, 1], "dilation": [1, 1], "groups": 2}),
], ids=["conv1d-stride", "conv2d-dilation", "conv2d-groups"])
def test_conv_grads_match_autograd_of_torch_convolution(spatial, attrs):
    """tensor.conv_input_grad / conv_weight_grad against autograd through torch's convolution."""
    gen = torch.Generator().manual_seed(3)
    g = attrs["groups"]
    x = torch.randn(2, 4, *([7] * spatial), generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 4 // g, *([3] * spatial), generator=gen, dtype=torch.float64, requires_grad=True)
    conv = getattr(F, f"conv{spatial}d")
    y = conv(x, w, None, attrs["stride"], attrs["padding"], attrs["dilation"], g)
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    y.backward(dy)
    tx, tw, ty = (TensorType(tuple(t.shape), "f64") for t in (x, w, y))
    dx = build("tensor.conv_input_grad", [ty, tw], attrs, [tx]).reference(dy, w.detach())
    dw = build("tensor.conv_weight_grad", [tx, ty], attrs, [tw]).reference(x.detach(), dy)
    torch.testing.assert_close(dx, x.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(dw, w.grad, rtol=1e-10, atol=1e-10)


def test_linear_rounds_once_as_eager_linear_does():
    """``tensor.linear`` (made by ``fuse-bias-add``) is eager's ``F.linear`` in bf16: the product
    1 + 2^-8 is a tie bf16 rounds to 1, so matmul-then-add gives 1 - 1 = 0; eager adds the bias
    -1 before its one rounding and gives 2^-8."""
    x = torch.tensor([[1.0, 2.0 ** -8]], dtype=torch.bfloat16)
    w = torch.ones(2, 1, dtype=torch.bfloat16)
    b = torch.tensor([-1.0], dtype=torch.bfloat16)
    eager = F.linear(x, w.t(), b)
    assert eager.item() == 2.0 ** -8 and (torch.matmul(x, w) + b).item() == 0.0
    op = build("tensor.linear", [T(1, 2, elt="bf16"), T(2, 1, elt="bf16"), T(1, elt="bf16")], {}, None)
    assert torch.equal(op.reference(x, w, b), eager)
