"""``remat`` (spmdc.passes.remat): elementwise values alive at the peak recomputed where they are
read again. gpt2-tiny's fsdp step on 2 gloo ranks gives bitwise the same loss and gradients with and
without it (recomputed ops read the same operands), never writes into its arguments, issues the same
collectives, recomputes ops and estimates a lower peak with it (under bf16 too, where parameters'
casts are recomputed); a forward/backward pair without
collectives measures exactly one buffer less. The pass's own rules are in tests/lit/passes/remat.mlir.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import in_place_workers as W  # noqa: E402

from spmdc.runtime.launcher import launch  # noqa: E402


@pytest.fixture(scope="module")
def both():
    return launch(W.same_step_both_ways, 2, ("remat",), timeout_s=600)


def test_remat_step_is_bitwise_the_same_with_the_same_collectives(both):
    for r in (both[0], both[1]):
        on, off = r[True], r[False]
        assert on["lines"] > off["lines"]   # ops recomputed
        assert len(on["results"]) == len(off["results"])
        for a, b in zip(on["results"], off["results"]):
            assert torch.equal(a, b)
        assert on["args_kept"] and off["args_kept"]
        assert on["counts"] == off["counts"]


def test_remat_lowers_the_estimated_peak(both):
    for r in (both[0], both[1]):
        assert r[True]["estimate"] < r[False]["estimate"]


@pytest.fixture(scope="module")
def both_bf16():
    return launch(W.same_step_both_ways, 2, ("remat", "bf16"), timeout_s=600)


@pytest.fixture(scope="module")
def both_llama():
    return launch(W.same_step_both_ways, 2, ("remat", None, "llama"), timeout_s=600)


def _bitwise_same(on: dict, off: dict) -> None:
    assert on["lines"] > off["lines"]
    assert len(on["results"]) == len(off["results"])
    for a, b in zip(on["results"], off["results"]):
        assert torch.equal(a, b)
    assert on["args_kept"] and off["args_kept"]
    assert on["counts"] == off["counts"]
    assert on["estimate"] < off["estimate"]


def test_remat_under_mixed_precision_recomputes_parameter_casts_bitwise(both_bf16):
    """bf16: each parameter's cast (gathered in the forward and again in the backward) is recomputed
    from the parameter; the loss and gradients are bitwise the same, the arguments untouched, the
    collectives the same, the estimate lower."""
    for r in (both_bf16[0], both_bf16[1]):
        assert r[True]["casts"] > r[False]["casts"]   # recomputed before the backward's gathers
        _bitwise_same(r[True], r[False])


def test_remat_recomputes_a_chain_bitwise(both_llama):
    """A Llama: SiLU's output (``x * sigmoid(x)``, read again by the gradient of its product with the
    up projection) is recomputed with its sigmoid from the gate projection the backward keeps anyway."""
    for r in (both_llama[0], both_llama[1]):
        assert r[True]["sigmoids"] > r[False]["sigmoids"]
        _bitwise_same(r[True], r[False])


_PAIR = """
func.func @main(%x: tensor<128x128xf32>, %w: tensor<128x128xf32>, %v: tensor<128x512xf32>)
    -> (tensor<128x128xf32>, tensor<128x128xf32>) {
  %a = tensor.matmul %x, %w : tensor<128x128xf32>
  %g = tensor.tanh %a : tensor<128x128xf32>
  %y = tensor.matmul %g, %w : tensor<128x128xf32>
  %big = tensor.matmul %y, %v : (tensor<128x128xf32>, tensor<128x512xf32>) -> tensor<128x512xf32>
  %s = tensor.sum %big {dims = [1], keepdim = true} : (tensor<128x512xf32>) -> tensor<128x1xf32>
  %dy = tensor.mul %y, %s : (tensor<128x128xf32>, tensor<128x1xf32>) -> tensor<128x128xf32>
  %dw = tensor.matmul %g, %dy : tensor<128x128xf32>
  %da = tensor.mul %a, %dw : tensor<128x128xf32>
  func.return %da, %dy : tensor<128x128xf32>, tensor<128x128xf32>
}
"""


def test_a_recomputed_activation_is_measured_one_buffer_lower():
    """Measured (no collectives: no timing in it): %g (64 KiB) is alive unread at the peak (%big's
    sum, %a, %y and %big alive too) without the pass; recomputed before %dw it is not, and the
    values are bitwise the same."""
    from spmdc.codegen.cache import load_program
    from spmdc.ir.parser import parse_module
    from spmdc.passes.memory import peak_bytes
    from spmdc.passes.remat import PASS
    from spmdc.runtime.memory import measure_peak

    g = torch.Generator().manual_seed(0)
    x, w, v = torch.randn(128, 128, generator=g), torch.randn(128, 128, generator=g), torch.randn(128, 512, generator=g)
    got = {}
    for remat in (False, True):
        module = parse_module(_PAIR, "<pair>")
        if remat:
            PASS().run(module)
        fn, _ = load_program(module, "main")
        args = [x.clone(), w.clone(), v.clone()]
        out, peak = measure_peak(fn, args, None)
        assert all(torch.equal(a, b) for a, b in zip(args, (x, w, v)))
        got[remat] = (out, peak, peak_bytes(module))
    assert all(torch.equal(a, b) for a, b in zip(got[True][0], got[False][0]))
    one = 128 * 128 * 4
    assert got[False][1] - got[True][1] == one
    assert got[False][2] - got[True][2] == one


def test_a_forward_program_whose_value_moves_whole_compiles_for_triton():
    """gpt2-tiny's forward under fsdp+tp (rank 2, collectives scheduled): a layer norm's first ops,
    read only after the gather that follows them, move there whole; their originals are erased, so no
    fused Triton kernel is left without a result (it failed to generate before)."""
    from spmdc.compiler import compile_rank, compile_step
    from spmdc.examples import gpt2_tiny
    from spmdc.sharding.mesh import Mesh

    model, ((x,), _), _ = gpt2_tiny.factory()
    step = compile_step(model, (x,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", overlap=True)
    prog = compile_rank(step, 2, target="triton")
    fused = [op for op in prog.module.walk() if op.name == "kernel.fused"]
    assert fused and all(op.results for op in fused)
    assert "tl.store" in prog.source or "@triton.jit" in prog.source
