"""gpt2-tiny and llama-tiny with ``target="triton"`` on 2 gloo ranks match one device.

Forward and one training step, every fused region a Triton kernel (run by the Triton
interpreter on CPU, hence the tiny shapes); plus the kernel-count goal: gpt2-tiny's
forward launches at most half as many kernels as it has aten ops.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from spmdc.api.worker import run_steps  # noqa: E402
from spmdc.codegen.kernel_stats import kernel_stats  # noqa: E402
from spmdc.compiler import compile_rank, compile_step  # noqa: E402
from spmdc.examples import gpt2_tiny, llama_tiny  # noqa: E402
from spmdc.runtime.launcher import launch  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402

TINY = dict(batch=2, seq=4, vocab_size=16, d_model=8, n_head=2, n_layer=1)
# (workload, plan, mesh)
CASES = [(gpt2_tiny, "megatron", Mesh({"tp": 2})), (llama_tiny, "dp", Mesh({"dp": 2}))]


def _factory(mod):
    import inspect

    params = inspect.signature(mod.factory).parameters
    return mod.factory(**{k: v for k, v in TINY.items() if k in params})


def eager(mod):
    model, ((x,), (y,)), loss_fn = _factory(mod)
    out = model(x).detach()
    loss = loss_fn(model(x), y)
    loss.backward()
    return out, loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    old = os.environ.get("SPMDC_CACHE_DIR")
    os.environ["SPMDC_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))  # the ranks inherit it
    steps = []
    for mod, plan, mesh in CASES:
        model, ((x,), (y,)), loss_fn = _factory(mod)
        steps.append(compile_step(model, (x,), mesh=mesh, plan=plan))
        steps.append(compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,)))
    try:
        yield steps, launch(run_steps, 2, (steps, "codegen", "triton"))
    finally:
        if old is None:
            os.environ.pop("SPMDC_CACHE_DIR", None)
        else:
            os.environ["SPMDC_CACHE_DIR"] = old


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0].__name__.split(".")[-1] for c in CASES])
def test_triton_target_matches_one_device(runs, case):
    steps, results = runs
    out, loss, grads = eager(CASES[case][0])
    for rank in range(2):
        fwd, train = results[rank][2 * case], results[rank][2 * case + 1]
        assert fwd["kernel_stats"].fused_regions > 0 and train["kernel_stats"].fused_regions > 0
        torch.testing.assert_close(fwd["outputs"][0], out, rtol=1e-5, atol=1e-5)
        for kind, got in zip(steps[2 * case + 1].result_kinds, train["outputs"], strict=True):
            want = loss if kind == "loss" else grads[kind.split(":", 1)[1]]
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{kind}: {m}")


def test_gpt2_forward_launches_at_most_half_the_aten_ops():
    model, ((x,), _), _ = gpt2_tiny.factory()
    step = compile_step(model, (x,), mesh=Mesh({"dp": 2}), plan="dp")
    before = step.rank_module(0)
    stats = compile_rank(step, 0, "triton").kernel_stats
    assert stats.aten_ops == kernel_stats(before).aten_ops
    assert stats.kernels * 2 <= stats.aten_ops, stats.summary()
