"""Counter-based random numbers in Triton kernels are the bits the torch implementation draws
(TRITON_INTERPRET=1): Philox-4x32-10 against ``tl.philox`` directly, and whole rank programs
whose dropout masks, uniform and integer draws are fused into kernels, on every rank of a
sharded layout."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from spmdc.codegen import load_program  # noqa: E402
from spmdc.dialects import torch_helpers  # noqa: E402
from spmdc.ir import parse_module  # noqa: E402
from spmdc.ir.printer import print_module  # noqa: E402
from spmdc.passes.manager import PassManager  # noqa: E402
from spmdc.passes.registry import parse_pipeline  # noqa: E402


@triton.jit
def _words(out0, out1, uni, seed, base, stream, N: tl.constexpr):
    idx = tl.arange(0, N).to(tl.int64) + base
    lo = (idx & 0xFFFFFFFF).to(tl.uint32)
    hi = (idx >> 32).to(tl.uint32)
    z = lo * 0
    a, b, _, _ = tl.philox(seed, lo, hi, z + stream, z)
    tl.store(out0 + tl.arange(0, N), a.to(tl.int32, bitcast=True))
    tl.store(out1 + tl.arange(0, N), b.to(tl.int32, bitcast=True))
    tl.store(uni + tl.arange(0, N), tl.uint_to_uniform_float(a))


@pytest.mark.parametrize("seed,base", [(0x123456789ABCDEF, 4294967290), (7, 0), (2 ** 62 + 3, 2 ** 40)])
def test_philox_words_and_uniforms_equal_triton(seed, base):
    n = 32
    w0, w1, u = torch.empty(n, dtype=torch.int32), torch.empty(n, dtype=torch.int32), torch.empty(n)
    _words[(1,)](w0, w1, u, seed, base, 11, N=n)
    idx = torch.arange(n, dtype=torch.int64) + base
    a, b, _, _ = torch_helpers.philox_4x32(seed, idx & 0xFFFFFFFF, idx >> 32, torch.full_like(idx, 11),
                                           torch.zeros_like(idx))
    assert torch.equal(a, w0.to(torch.int64) & 0xFFFFFFFF)
    assert torch.equal(b, w1.to(torch.int64) & 0xFFFFFFFF)
    assert torch.equal(torch_helpers.uint32_to_uniform(a), u)


PROGRAM = """
shard.mesh @m = <["x" = 2]>
func.func @main(%a: tensor<6x10xf32> {shard.sharding = #shard<@m, [S(1)]>})
    -> (tensor<6x10xf32> {shard.sharding = #shard<@m, [S(1)]>}, tensor<6x10xi64> {shard.sharding = #shard<@m, [S(1)]>},
        tensor<1x10xf32> {shard.sharding = #shard<@m, [S(1)]>}) {
  %m = tensor.random {distribution = "bernoulli", p = 0.7} : tensor<6x10xf32>
  %y = tensor.mul %a, %m : tensor<6x10xf32>
  %u = tensor.random {distribution = "uniform", low = -1.0, high = 2.0} : tensor<1x10xf32>
  %z = tensor.add %y, %u : (tensor<6x10xf32>, tensor<1x10xf32>) -> tensor<6x10xf32>
  %r = tensor.random {distribution = "randint", low = 3, high = 9} : tensor<6x10xi64>
  func.return %z, %r, %u : tensor<6x10xf32>, tensor<6x10xi64>, tensor<1x10xf32>
}
"""


@pytest.mark.parametrize("rank", [0, 1])
def test_fused_counter_mode_draws_equal_the_torch_program(rank):
    a = torch.randn(6, 10)
    outs = {}
    for target in ("torch", "triton"):
        m = parse_module(PROGRAM)
        passes = f"philox-rng,sharding-propagation,insert-redistribution,lower-redistribution,partition{{rank={rank}}}"
        PassManager(parse_pipeline(passes + (",fuse-kernels" if target == "triton" else ""))).run(m)
        if target == "triton":   # the draws are inside kernels, not torch calls
            assert print_module(m).count("tensor.random") == 3 and "kernel.fused" in print_module(m)
        fn, path = load_program(m, "main", target=target)
        if target == "triton":
            assert path.read_text().count("_philox_word(") >= 4 and "spmdc_ops.philox_random" not in path.read_text()
        torch.manual_seed(0)
        outs[target] = fn([a[:, 5 * rank: 5 * rank + 5].contiguous()], None)
    for x, y in zip(outs["torch"], outs["triton"], strict=True):
        assert x.dtype == y.dtype and torch.equal(x, y)
