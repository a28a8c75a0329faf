"""Kernel forms of the Core ATen elementwise ops against torch (the interpreter), TRITON_INTERPRET=1.

Each case is one op in a small function that ``fuse-kernels`` must turn into an elementwise
kernel (or must leave alone, where no kernel form is exact). Inputs sweep the op's domain and
the special values (signed zeros, infinities, NaN, tiny and huge magnitudes); results must
match to a few units in the last place, NaN for NaN, and exactly where the op is exact
(roundings, tests, integer remainders).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from spmdc.codegen.cache import load_program  # noqa: E402
from spmdc.ir.parser import parse_module  # noqa: E402
from spmdc.passes.manager import PassManager  # noqa: E402
from spmdc.passes.registry import parse_pipeline  # noqa: E402
from spmdc.runtime.interpreter import interpret  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy on inf/NaN inside the interpreter

ELT = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32"}
SPECIAL = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40, 1e-30, 3e38, -3e38]


def run_both(op: str, args, attrs: str = "", result: str | None = None):
    """(fused kinds, triton outputs, interpreter outputs) of ``%r = tensor.<op> args...``."""
    types = [f"tensor<{'x'.join(map(str, a.shape))}x{ELT[a.dtype]}>" for a in args]
    res = result or types[0]
    names = ", ".join(f"%a{i}" for i in range(len(args)))
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    text = (f"func.func @main({params}) -> {res} {{\n"
            f"  %r = tensor.{op} {names} {attrs} : ({', '.join(types)}) -> {res}\n"
            f"  func.return %r : {res}\n}}")
    module = parse_module(text)
    want = interpret(module, list(args))[0]
    PassManager(parse_pipeline("fuse-kernels")).run(module)
    kinds = [o.attr_value("kind") for o in module.walk() if o.name == "kernel.fused"]
    fn, _ = load_program(module, "main", target="triton")
    return kinds, fn(list(args), None)[0], want


def ulps(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest distance in units of ``want``'s last place (NaN where exactly one is NaN)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.double(), want.double()
    nan = torch.isnan(g) | torch.isnan(w)
    assert torch.equal(torch.isnan(g), torch.isnan(w)), f"NaN at {torch.nonzero(torch.isnan(g) ^ torch.isnan(w))}"
    same = (g == w) | nan
    spacing = torch.from_numpy(np.spacing(want.abs().float().numpy().astype(np.float32))).double()
    if want.dtype == torch.bfloat16:
        spacing = spacing * 2 ** 16
    err = ((g - w).abs() / spacing).masked_fill(same, 0.0)
    return float(err.max()) if err.numel() else 0.0


def same_zeros(got: torch.Tensor, want: torch.Tensor) -> bool:
    zero = (got == 0) & (want == 0)
    return torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero]))


def identical(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Bit for bit up to NaN payloads: same NaNs, same values, same signs of zeros."""
    return (got.dtype == want.dtype and torch.equal(torch.isnan(got), torch.isnan(want))
            and torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0)) and same_zeros(got, want))


def grid(lo: float, hi: float, n: int = 601, extra=()) -> torch.Tensor:
    return torch.cat([torch.linspace(lo, hi, n), torch.tensor([*SPECIAL, *extra])]).float().reshape(-1, 1)


WIDE = torch.cat([grid(-12, 12), torch.logspace(-38, 38, 200).reshape(-1, 1),
                  -torch.logspace(-38, 38, 200).reshape(-1, 1)])
UNIT = grid(-1, 1, extra=(1.0, -1.0, 0.99999994, -0.99999994, 1.0000001, -1.0000001, 2.0, -7.0))

# op, input, largest error in ulps (fp32; torch's own functions are within 1-2 ulps of exact)
FLOAT_MATH = [
    ("tan", grid(-4, 4), 4), ("sinh", WIDE[WIDE.abs().nan_to_num() < 88.7].reshape(-1, 1), 6),
    ("cosh", WIDE[WIDE.abs().nan_to_num() < 88.7].reshape(-1, 1), 6), ("asin", UNIT, 3), ("acos", UNIT, 3),
    ("atan", WIDE, 2), ("asinh", WIDE, 3), ("acosh", torch.cat([WIDE, grid(1, 1.001, 101)]), 3),
    ("atanh", torch.cat([UNIT, WIDE]), 3), ("expm1", torch.cat([WIDE, grid(-1e-3, 1e-3, 101)]), 3),
    ("log2", WIDE.abs(), 2), ("log10", WIDE.abs(), 4),
]


@pytest.mark.parametrize("op,x,bound", FLOAT_MATH, ids=[c[0] for c in FLOAT_MATH])
def test_float_math_matches_torch(op, x, bound):
    kinds, got, want = run_both(op, [x])
    assert kinds == ["elementwise"]
    assert ulps(got, want) <= bound
    assert same_zeros(got, want)


@pytest.mark.parametrize("op", ["sinh", "cosh"])
def test_hyperbolic_functions_overflow_only_with_their_result(op):
    # torch's CPU kernel gives inf from |x| = 88.7 (where exp overflows); the kernel form gives the
    # true value, finite up to 89.4 (CUDA's sinhf/coshf do the same)
    x = torch.tensor([[88.8], [-89.2], [89.3], [89.5], [-90.0]])
    _, got, _ = run_both(op, [x])
    exact = getattr(torch, op)(x.double()).float()
    assert ulps(got, exact) <= 6
    assert torch.isfinite(got[:3]).all() and torch.isinf(got[3:]).all()


@pytest.mark.parametrize("op", ["asinh", "atan", "expm1", "tan", "acos"])
def test_bf16_computes_in_fp32_and_rounds_once(op):
    x = (torch.linspace(-0.95, 0.95, 257)).to(torch.bfloat16).reshape(1, -1)
    kinds, got, want = run_both(op, [x])
    assert kinds == ["elementwise"] and got.dtype == torch.bfloat16
    assert ulps(got, want) <= 1       # one bf16 rounding of values a few fp32 ulps apart


@pytest.mark.parametrize("op", ["asin", "sinh", "expm1", "atan2", "elu"])
def test_f64_has_no_fp32_polynomial_kernel(op):
    x = torch.linspace(-0.9, 0.9, 7, dtype=torch.float64).reshape(1, -1)
    kinds, got, want = run_both(op, [x, x.flip(1)] if op == "atan2" else [x])
    assert kinds == []                 # runs as torch, exactly
    assert torch.equal(got, want)


ROUNDING_INPUT = torch.cat([
    torch.arange(-40, 41).float() / 4,                                    # every quarter: the halves tie
    torch.tensor([0.49999997, -0.49999997, 0.50000006, 1.4999999, 2.5000002, -2.4999998, 8388607.5,
                  8388609.0, 16777216.0, 1e30, -1e30, *SPECIAL]),
    torch.randn(200, generator=torch.Generator().manual_seed(0)) * 100,
]).reshape(-1, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("op", ["ceil", "floor", "trunc", "round"])
def test_roundings_are_exact(op, dtype):
    x = ROUNDING_INPUT.to(dtype)
    if dtype == torch.bfloat16:   # the interpreter's bf16 -> fp32 flushes subnormals (a GPU's shift does not)
        x = x[(x.abs() >= 1e-37) | (x == 0) | x.isnan()].reshape(-1, 1)
    kinds, got, want = run_both(op, [x])
    assert kinds == ["elementwise"]
    assert identical(got, want)


def test_atan2_quadrants_signed_zeros_and_infinities():
    v = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 0.3, -0.3, 1.0, -1.0, 7.5, -7.5, 1e30, -1e30,
                      float("inf"), float("-inf"), float("nan")])
    y, x = (t.reshape(-1, 1).contiguous() for t in torch.meshgrid(v, v, indexing="ij"))
    y, x = y.reshape(15, 15), x.reshape(15, 15)
    kinds, got, want = run_both("atan2", [y, x])
    assert kinds == ["elementwise"]
    assert ulps(got, want) <= 2
    ok = ~torch.isnan(want)
    assert torch.equal(torch.signbit(got[ok]), torch.signbit(want[ok]))
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(7, 129, generator=g) * 3, torch.randn(129, generator=g) * 3
    _, got, want = run_both("atan2", [a, b], result="tensor<7x129xf32>")
    assert ulps(got, want) <= 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["isinf", "isnan"])
def test_float_tests(op, dtype):
    x = torch.tensor([SPECIAL + [1.0, -2.0]]).to(dtype)
    kinds, got, want = run_both(op, [x], result=f"tensor<1x{x.shape[1]}xi1>")
    assert kinds == ["elementwise"] and got.dtype == torch.bool
    assert torch.equal(got, want)


@pytest.mark.parametrize("attrs", ["", "{alpha = 1.5, input_scale = 0.5, scale = 2.0}"])
def test_elu(attrs):
    x = torch.cat([grid(-20, 20), grid(-1e-3, 1e-3, 51)])
    kinds, got, want = run_both("elu", [x], attrs)
    assert kinds == ["elementwise"]
    assert ulps(got, want) <= 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_leaky_relu_rounds_like_torch(dtype):
    x = grid(-50, 50).to(dtype)
    kinds, got, want = run_both("leaky_relu", [x], "{negative_slope = 0.1}")
    assert kinds == ["elementwise"]
    if dtype == torch.bfloat16:
        # the interpreter rounds fp32 -> bf16 toward zero (GPUs round to nearest even, as torch): one ulp
        assert ulps(got, want) <= 1
    else:
        assert identical(got, want)


@pytest.mark.parametrize("op,attrs", [("clamp", "{max = 0.5, min = -0.25}"), ("relu", ""), ("maximum", ""),
                                      ("minimum", "")])
def test_nan_propagates_through_min_and_max(op, attrs):
    x = torch.tensor([[float("nan"), 1.0, -1.0, float("inf"), 0.3]])
    args = [x, x.flip(1)] if op in ("maximum", "minimum") else [x]
    kinds, got, want = run_both(op, args, attrs)
    assert kinds == ["elementwise"]
    assert torch.isnan(want[0, 0]) and identical(got, want)


def test_f64_clamp_bounds_keep_every_digit():
    x = torch.tensor([[0.1, 0.09999999999999999, 0.2]], dtype=torch.float64)
    _, got, want = run_both("clamp", [x], "{min = 0.1}")
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("op", ["fmod", "remainder"])
def test_integer_remainders_are_exact(op, dtype):
    a = torch.arange(-12, 13, dtype=dtype).reshape(-1, 1).expand(25, 6).contiguous()
    b = torch.tensor([-5, -3, -1, 1, 2, 7], dtype=dtype)
    kinds, got, want = run_both(op, [a, b], result=f"tensor<25x6x{ELT[dtype]}>")
    assert kinds == ["elementwise"]
    assert torch.equal(got, want)


@pytest.mark.parametrize("op,attrs", [("fmod", ""), ("remainder", ""), ("div", '{rounding_mode = "floor"}')])
def test_float_remainders_have_no_kernel_form(op, attrs):
    # Triton's float % is a - b * trunc(a / b) on NVIDIA GPUs (off by b when the quotient rounds
    # to an integer); torch's div_floor is its own algorithm
    a = torch.tensor([[5.5, -5.5, 1e10, 0.3]])
    b = torch.tensor([[2.0, 2.0, 3.0, 0.1]])
    kinds, got, want = run_both(op, [a, b], attrs)
    assert kinds == []
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_trunc_division_kernel(dtype):
    # the quotient is correctly rounded before the trunc (an approximate one flips it at integers)
    g = torch.Generator().manual_seed(2)
    a = torch.cat([torch.randn(3, 100, generator=g) * 50, torch.tensor([[7.0] * 50 + [-7.0] * 50]),
                   torch.arange(-50, 50).float().reshape(1, -1) * 3]).to(dtype)
    b = torch.cat([torch.randn(3, 100, generator=g), torch.full((1, 100), 2.0), torch.full((1, 100), 3.0)]).to(dtype)
    kinds, got, want = run_both("div", [a, b], '{rounding_mode = "trunc"}')
    assert kinds == ["elementwise"]
    assert identical(got, want)
