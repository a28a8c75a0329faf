"""Every Triton kernel kind against the reference interpreter, under TRITON_INTERPRET=1.

Each case is a small IR function; ``fuse-kernels`` turns it into one ``kernel.fused``
region of the expected kind, the Triton target runs it, and the result must match the
interpreter on the unfused program (fp32, 1e-5 relative, absolute floor 1e-6 x the
output's largest magnitude). Sizes 1, 7 and 129 exercise the
masks; non-contiguous inputs (transposed and strided views) exercise the index arithmetic.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from spmdc.codegen.cache import load_program  # noqa: E402
from spmdc.codegen.python_emitter import emit_python  # noqa: E402
from spmdc.ir.parser import parse_module  # noqa: E402
from spmdc.passes.manager import PassManager  # noqa: E402
from spmdc.passes.registry import parse_pipeline  # noqa: E402
from spmdc.runtime.interpreter import interpret  # noqa: E402


def run_both(text, args, pipeline="fuse-kernels", kinds=None):
    """(triton outputs, interpreter outputs) of ``@main``; checks the kinds of the regions made."""
    module = parse_module(text)
    want = interpret(module, [a.contiguous() for a in args])
    PassManager(parse_pipeline(pipeline)).run(module)
    made = [op.attr_value("kind") for op in module.walk() if op.name == "kernel.fused"]
    if kinds is not None:
        assert made == kinds
    fn, _ = load_program(module, "main", target="triton")
    return fn(list(args), None), want


def check(text, args, **kw):
    got, want = run_both(text, args, **kw)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        # 1e-5 relative; the absolute floor scales with the output (a dot product of length
        # 129 that cancels to ~0 differs by an ulp of its terms, not of its result)
        scale = float(w.abs().max()) if w.numel() and w.is_floating_point() else 1.0
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6 * max(1.0, scale))


def t(*shape):
    return "x".join(map(str, shape)) + "xf32"


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


SIZES = [(1, 1), (7, 7), (3, 129)]


@pytest.mark.parametrize("m,n", SIZES)
def test_elementwise_chain_with_broadcasting(m, n):
    text = f"""
func.func @main(%x: tensor<{t(m, n)}>, %b: tensor<{t(n)}>, %s: tensor<{t(m, 1)}>) -> tensor<{t(m, n)}> {{
  %0 = tensor.add %x, %b : (tensor<{t(m, n)}>, tensor<{t(n)}>) -> tensor<{t(m, n)}>
  %1 = tensor.mul %0, %s : (tensor<{t(m, n)}>, tensor<{t(m, 1)}>) -> tensor<{t(m, n)}>
  %c = tensor.constant {{value = dense<0.5> : tensor<f32>}} : tensor<f32>
  %2 = tensor.maximum %1, %c : (tensor<{t(m, n)}>, tensor<f32>) -> tensor<{t(m, n)}>
  %3 = tensor.exp %2 : tensor<{t(m, n)}>
  %4 = tensor.sigmoid %3 : tensor<{t(m, n)}>
  func.return %4 : tensor<{t(m, n)}>
}}"""
    check(text, [randn(m, n), randn(n, seed=1), randn(m, 1, seed=2)], kinds=["elementwise"])


def test_elementwise_non_contiguous_inputs_and_two_outputs():
    m, n = 7, 129
    text = f"""
func.func @main(%x: tensor<{t(m, n)}>, %y: tensor<{t(m, n)}>) -> (tensor<{t(m, n)}>, tensor<{t(m, n)}>) {{
  %0 = tensor.sub %x, %y : tensor<{t(m, n)}>
  %1 = tensor.tanh %0 : tensor<{t(m, n)}>
  %2 = tensor.mul %1, %0 : tensor<{t(m, n)}>
  func.return %0, %2 : tensor<{t(m, n)}>, tensor<{t(m, n)}>
}}"""
    x = randn(n, m).t()                       # transposed view
    y = randn(m, 2 * n, seed=1)[:, ::2]        # strided view
    assert not x.is_contiguous() and not y.is_contiguous()
    check(text, [x, y], kinds=["elementwise"])


def test_masks_compares_and_select():
    text = f"""
func.func @main(%x: tensor<{t(2, 7, 7)}>, %m: tensor<1x7x7xi1>) -> tensor<{t(2, 7, 7)}> {{
  %n = tensor.not %m : tensor<1x7x7xi1>
  %ninf = tensor.constant {{value = dense<-1.0e+04> : tensor<f32>}} : tensor<f32>
  %z = tensor.constant {{value = dense<0.0> : tensor<f32>}} : tensor<f32>
  %lt = tensor.compare %x, %z {{predicate = "lt"}} : (tensor<{t(2, 7, 7)}>, tensor<f32>) -> tensor<2x7x7xi1>
  %o = tensor.or %lt, %n : (tensor<2x7x7xi1>, tensor<1x7x7xi1>) -> tensor<2x7x7xi1>
  %r = tensor.select %o, %ninf, %x : (tensor<2x7x7xi1>, tensor<f32>, tensor<{t(2, 7, 7)}>) -> tensor<{t(2, 7, 7)}>
  %a = tensor.abs %r : tensor<{t(2, 7, 7)}>
  %c = tensor.clamp %a {{max = 3.0, min = 0.25}} : tensor<{t(2, 7, 7)}>
  func.return %c : tensor<{t(2, 7, 7)}>
}}"""
    mask = torch.tril(torch.ones(7, 7, dtype=torch.bool)).unsqueeze(0)
    check(text, [randn(2, 7, 7), mask], kinds=["elementwise"])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("n", [1, 7, 129])
def test_gelu(n, approximate):
    text = f"""
func.func @main(%x: tensor<{t(3, n)}>) -> tensor<{t(3, n)}> {{
  %0 = tensor.gelu %x {{approximate = "{approximate}"}} : tensor<{t(3, n)}>
  func.return %0 : tensor<{t(3, n)}>
}}"""
    x = torch.cat([randn(3, n) * 3, torch.full((3, n), 1e-3)], 1)[:, :n]
    check(text, [x], kinds=["elementwise"])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward(approximate):
    text = f"""
func.func @main(%g: tensor<{t(3, 33)}>, %x: tensor<{t(3, 33)}>) -> tensor<{t(3, 33)}> {{
  %0 = tensor.gelu_backward %g, %x {{approximate = "{approximate}"}} : tensor<{t(3, 33)}>
  func.return %0 : tensor<{t(3, 33)}>
}}"""
    x = torch.cat([randn(3, 30) * 3, torch.full((3, 3), 1e-3)], 1)
    check(text, [randn(3, 33), x], kinds=["elementwise"])


@pytest.mark.parametrize("scale", [1e-9, 1e-3, 3.0])
def test_log1p_keeps_small_values_exact(scale):
    text = f"""
func.func @main(%x: tensor<{t(4, 33)}>) -> tensor<{t(4, 33)}> {{
  %0 = tensor.log1p %x : tensor<{t(4, 33)}>
  func.return %0 : tensor<{t(4, 33)}>
}}"""
    check(text, [randn(4, 33).abs() * scale], kinds=["elementwise"])


def test_silu_pow_rsqrt_cast():
    text = f"""
func.func @main(%x: tensor<{t(5, 7)}>) -> tensor<5x7xf16> {{
  %0 = tensor.silu %x : tensor<{t(5, 7)}>
  %two = tensor.constant {{value = dense<2.0> : tensor<f32>}} : tensor<f32>
  %1 = tensor.pow %0, %two : (tensor<{t(5, 7)}>, tensor<f32>) -> tensor<{t(5, 7)}>
  %one = tensor.constant {{value = dense<1.0> : tensor<f32>}} : tensor<f32>
  %2 = tensor.add %1, %one : (tensor<{t(5, 7)}>, tensor<f32>) -> tensor<{t(5, 7)}>
  %3 = tensor.rsqrt %2 : tensor<{t(5, 7)}>
  %4 = tensor.cast %3 : (tensor<{t(5, 7)}>) -> tensor<5x7xf16>
  func.return %4 : tensor<5x7xf16>
}}"""
    check(text, [randn(5, 7)], kinds=["elementwise"])


@pytest.mark.parametrize("rows,n", [(1, 1), (7, 7), (3, 129)])
def test_softmax_with_prologue(rows, n):
    text = f"""
func.func @main(%x: tensor<{t(2, rows, n)}>) -> tensor<{t(2, rows, n)}> {{
  %c = tensor.constant {{value = dense<0.125> : tensor<f32>}} : tensor<f32>
  %0 = tensor.mul %x, %c : (tensor<{t(2, rows, n)}>, tensor<f32>) -> tensor<{t(2, rows, n)}>
  %1 = tensor.softmax %0 {{dim = 2}} : tensor<{t(2, rows, n)}>
  func.return %1 : tensor<{t(2, rows, n)}>
}}"""
    check(text, [randn(2, rows, n) * 4], kinds=["reduction"])


def test_log_softmax_large_row_non_contiguous():
    n = 1500  # more than one column block
    text = f"""
func.func @main(%x: tensor<{t(3, n)}>) -> tensor<{t(3, n)}> {{
  %0 = tensor.log_softmax %x {{dim = 1}} : tensor<{t(3, n)}>
  func.return %0 : tensor<{t(3, n)}>
}}"""
    check(text, [randn(n, 3).t()], kinds=["reduction"])


def _layer_norm(m, n):
    return f"""
func.func @main(%x: tensor<{t(m, n)}>, %r: tensor<{t(m, n)}>, %w: tensor<{t(n)}>, %b: tensor<{t(n)}>)
    -> (tensor<{t(m, n)}>, tensor<{t(m, n)}>) {{
  %h = tensor.add %x, %r : tensor<{t(m, n)}>
  %var = tensor.var %h {{correction = 0, dims = [1], keepdim = true}} : (tensor<{t(m, n)}>) -> tensor<{t(m, 1)}>
  %mean = tensor.mean %h {{dims = [1], keepdim = true}} : (tensor<{t(m, n)}>) -> tensor<{t(m, 1)}>
  %eps = tensor.constant {{value = dense<1.0e-05> : tensor<f32>}} : tensor<f32>
  %0 = tensor.add %var, %eps : (tensor<{t(m, 1)}>, tensor<f32>) -> tensor<{t(m, 1)}>
  %1 = tensor.rsqrt %0 : tensor<{t(m, 1)}>
  %2 = tensor.sub %h, %mean : (tensor<{t(m, n)}>, tensor<{t(m, 1)}>) -> tensor<{t(m, n)}>
  %3 = tensor.mul %2, %1 : (tensor<{t(m, n)}>, tensor<{t(m, 1)}>) -> tensor<{t(m, n)}>
  %4 = tensor.mul %3, %w : (tensor<{t(m, n)}>, tensor<{t(n)}>) -> tensor<{t(m, n)}>
  %5 = tensor.add %4, %b : (tensor<{t(m, n)}>, tensor<{t(n)}>) -> tensor<{t(m, n)}>
  func.return %5, %h : tensor<{t(m, n)}>, tensor<{t(m, n)}>
}}"""


@pytest.mark.parametrize("m,n", [(1, 7), (7, 129), (5, 1)])
def test_layer_norm(m, n):
    args = [randn(m, n), randn(m, n, seed=1), randn(n, seed=2), randn(n, seed=3)]
    check(_layer_norm(m, n), args, kinds=["reduction", "reduction", "elementwise"])


@pytest.mark.parametrize("m,n", [(1, 1), (7, 7), (4, 129)])
def test_rms_norm(m, n):
    text = f"""
func.func @main(%x: tensor<{t(m, n)}>, %w: tensor<{t(n)}>) -> tensor<{t(m, n)}> {{
  %two = tensor.constant {{value = dense<2.0> : tensor<f32>}} : tensor<f32>
  %0 = tensor.pow %x, %two : (tensor<{t(m, n)}>, tensor<f32>) -> tensor<{t(m, n)}>
  %1 = tensor.mean %0 {{dims = [1], keepdim = true}} : (tensor<{t(m, n)}>) -> tensor<{t(m, 1)}>
  %eps = tensor.constant {{value = dense<1.0e-06> : tensor<f32>}} : tensor<f32>
  %2 = tensor.add %1, %eps : (tensor<{t(m, 1)}>, tensor<f32>) -> tensor<{t(m, 1)}>
  %3 = tensor.rsqrt %2 : tensor<{t(m, 1)}>
  %4 = tensor.mul %x, %3 : (tensor<{t(m, n)}>, tensor<{t(m, 1)}>) -> tensor<{t(m, n)}>
  %5 = tensor.mul %4, %w : (tensor<{t(m, n)}>, tensor<{t(n)}>) -> tensor<{t(m, n)}>
  func.return %5 : tensor<{t(m, n)}>
}}"""
    check(text, [randn(m, n), randn(n, seed=1)], kinds=["reduction", "elementwise"])


def test_sum_and_max_without_keepdim():
    text = f"""
func.func @main(%x: tensor<{t(2, 3, 129)}>) -> (tensor<{t(2, 3)}>, tensor<{t(2, 3)}>) {{
  %e = tensor.exp %x : tensor<{t(2, 3, 129)}>
  %0 = tensor.sum %e {{dims = [2], keepdim = false}} : (tensor<{t(2, 3, 129)}>) -> tensor<{t(2, 3)}>
  %1 = tensor.max %x {{dims = [2], keepdim = false}} : (tensor<{t(2, 3, 129)}>) -> tensor<{t(2, 3)}>
  func.return %0, %1 : tensor<{t(2, 3)}>, tensor<{t(2, 3)}>
}}"""
    check(text, [randn(2, 3, 129)], kinds=["reduction", "reduction"])


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 7, 7), (129, 33, 7), (5, 129, 40)])
def test_matmul(m, k, n):
    text = f"""
func.func @main(%a: tensor<{t(m, k)}>, %b: tensor<{t(k, n)}>) -> tensor<{t(m, n)}> {{
  %0 = tensor.matmul %a, %b : (tensor<{t(m, k)}>, tensor<{t(k, n)}>) -> tensor<{t(m, n)}>
  func.return %0 : tensor<{t(m, n)}>
}}"""
    check(text, [randn(m, k), randn(n, k, seed=1).t()], pipeline="fuse-kernels{matmul-epilogue}",
          kinds=["matmul"])


@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_matmul_with_epilogue(act):
    m, k, n = 7, 40, 129
    attr = ' {approximate = "tanh"}' if act == "gelu" else ""
    text = f"""
func.func @main(%a: tensor<{t(m, k)}>, %w: tensor<{t(n, k)}>, %bias: tensor<{t(n)}>, %res: tensor<{t(m, n)}>)
    -> (tensor<{t(m, n)}>, tensor<{t(m, n)}>) {{
  %wt = tensor.permute %w {{perm = [1, 0]}} : (tensor<{t(n, k)}>) -> tensor<{t(k, n)}>
  %0 = tensor.matmul %a, %wt : (tensor<{t(m, k)}>, tensor<{t(k, n)}>) -> tensor<{t(m, n)}>
  %1 = tensor.add %0, %bias : (tensor<{t(m, n)}>, tensor<{t(n)}>) -> tensor<{t(m, n)}>
  %2 = tensor.{act} %1{attr} : tensor<{t(m, n)}>
  %3 = tensor.add %2, %res : tensor<{t(m, n)}>
  func.return %3, %0 : tensor<{t(m, n)}>, tensor<{t(m, n)}>
}}"""
    args = [randn(m, k), randn(n, k, seed=1), randn(n, seed=2), randn(n, m, seed=3).t()]
    check(text, args, pipeline="fuse-kernels{matmul-epilogue}", kinds=["matmul"])


def test_batched_matmul_with_broadcast_batch():
    text = f"""
func.func @main(%q: tensor<{t(2, 3, 7, 16)}>, %k: tensor<{t(1, 3, 16, 7)}>) -> tensor<{t(2, 3, 7, 7)}> {{
  %0 = tensor.matmul %q, %k : (tensor<{t(2, 3, 7, 16)}>, tensor<{t(1, 3, 16, 7)}>) -> tensor<{t(2, 3, 7, 7)}>
  %c = tensor.constant {{value = dense<0.25> : tensor<f32>}} : tensor<f32>
  %1 = tensor.mul %0, %c : (tensor<{t(2, 3, 7, 7)}>, tensor<f32>) -> tensor<{t(2, 3, 7, 7)}>
  func.return %1 : tensor<{t(2, 3, 7, 7)}>
}}"""
    q = randn(2, 7, 3, 16).permute(0, 2, 1, 3)
    check(text, [q, randn(1, 3, 16, 7, seed=1)], pipeline="fuse-kernels{matmul-epilogue}", kinds=["matmul"])


def test_generated_kernels_are_readable():
    module = parse_module(_layer_norm(4, 8))
    PassManager(parse_pipeline("fuse-kernels")).run(module)
    src = emit_python(module, "main", target="triton")
    assert src.count("@triton.jit") == 3 and "_tanh" not in src  # three kernels; no helper they do not call
    assert "# var over the last dim of [4, 8]: one program per row (4 rows)" in src
    assert "# elementwise over [4, 8] (32 points)" in src
    assert "tl.rsqrt(" in src
    assert "torch.var" not in src and "torch.rsqrt" not in src
    assert emit_python(module, "main") != src  # the torch target keeps aten calls


def test_cache_key_includes_the_target_and_torch_target_runs_regions():
    from spmdc.codegen.cache import program_key

    module = parse_module(_layer_norm(3, 8))
    PassManager(parse_pipeline("fuse-kernels")).run(module)
    assert program_key(module, "main", "torch") != program_key(module, "main", "triton")
    args = [randn(3, 8), randn(3, 8, seed=1), randn(8, seed=2), randn(8, seed=3)]
    fn_torch, path_torch = load_program(module, "main", target="torch")
    fn_triton, path_triton = load_program(module, "main", target="triton")
    assert path_torch != path_triton and "import triton" not in path_torch.read_text()
    for a, b in zip(fn_torch(args, None), fn_triton(args, None), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
