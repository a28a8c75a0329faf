"""Distributed runs match one device (veScale's measure), on 4 gloo ranks in one launch.

Every compiled step (workload x plan x forward/training) runs on every rank; results are
reassembled to full tensors and compared with eager PyTorch on one device:
forward outputs rtol 1e-5 / atol 1e-6, loss and gradients rtol 1e-4 / atol 1e-5.
"""

import pytest
import torch

from spmdc.api.worker import run_steps
from spmdc.compiler import compile_step
from spmdc.examples import mlp
from spmdc.runtime.launcher import LaunchError, launch
from spmdc.sharding.mesh import Mesh

# (plan, mesh, mlp sizes): the last ones are uneven over 4 ranks (torch.chunk pieces)
CASES = [("dp", Mesh({"dp": 4}), {}), ("fsdp", Mesh({"dp": 4}), {}), ("megatron", Mesh({"tp": 4}), {}),
         ("sp", Mesh({"tp": 4}), {}), ("fsdp+tp", Mesh({"dp": 2, "tp": 2}), {}),
         ("fsdp", Mesh({"dp": 4}), {"batch": 6, "d_hidden": 30, "d_out": 7}),
         ("megatron", Mesh({"tp": 4}), {"batch": 5, "d_hidden": 13}),
         ("fsdp+tp", Mesh({"dp": 2, "tp": 2}), {"batch": 7, "d_hidden": 14, "d_out": 5}),
         # bucket-collectives: one all_gather_bucket / reduce_scatter_bucket per block
         ("fsdp", Mesh({"dp": 4}), {"bucket": True}),
         ("fsdp", Mesh({"dp": 4}), {"bucket": True, "batch": 6, "d_hidden": 30, "d_out": 7}),
         ("dp", Mesh({"dp": 4}), {"bucket": True})]   # DDP: gradient all-reduces in buckets


def _sizes(sizes):
    return {k: v for k, v in sizes.items() if k != "bucket"}


def eager_reference(sizes):
    model, ((x,), (y,)), loss_fn = mlp.factory(**_sizes(sizes))
    out = model(x).detach()
    loss = loss_fn(model(x), y)
    loss.backward()
    return out, loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def runs():
    steps = []
    for plan, mesh, sizes in CASES:
        model, ((x,), (y,)), loss_fn = mlp.factory(**_sizes(sizes))
        bucket = bool(sizes.get("bucket"))
        steps.append(compile_step(model, (x,), mesh=mesh, plan=plan, bucket=bucket))
        steps.append(compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                                  bucket=bucket))
    results = launch(run_steps, 4, (steps,))
    return steps, results


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[c[0] + ("-bucket" if c[2].get("bucket") else "") + ("-uneven" if _sizes(c[2]) else "")
                              for c in CASES])
def test_mlp_matches_one_device(runs, case):
    steps, results = runs
    out, loss, grads = eager_reference(CASES[case][2])
    for rank in range(4):
        fwd, train = results[rank][2 * case], results[rank][2 * case + 1]
        torch.testing.assert_close(fwd["outputs"][0], out, rtol=1e-5, atol=1e-6)
        for kind, got in zip(steps[2 * case + 1].result_kinds, train["outputs"], strict=True):
            want = loss if kind == "loss" else grads[kind.split(":", 1)[1]]
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{kind}: {m}")


def test_collectives_issued_equal_those_in_the_program(runs):
    steps, results = runs
    for rank in range(4):
        for r in results[rank]:
            assert r["issued"] == r["comm_ops"]


def test_buckets_replace_per_parameter_collectives(runs):
    steps, results = runs
    i = next(k for k, c in enumerate(CASES) if c[2] == {"bucket": True})
    train = results[0][2 * i + 1]["comm_ops"]
    # 4 parameters in one block ('fc1', 'fc2' are two blocks by name: one bucket each of weight+bias)
    assert train.get("comm.all_gather_bucket", 0) >= 2 and train.get("comm.reduce_scatter_bucket", 0) == 2
    assert "comm.reduce_scatter" not in train


def test_ddp_buckets_gradient_all_reduces(runs):
    steps, results = runs
    i = next(k for k, c in enumerate(CASES) if c[0] == "dp" and c[2] == {"bucket": True})
    plain = next(k for k, c in enumerate(CASES) if c[0] == "dp" and not c[2])
    train, before = results[0][2 * i + 1]["comm_ops"], results[0][2 * plain + 1]["comm_ops"]
    # 4 gradients (fc1 and fc2, weight and bias: two blocks of two) and the loss: 5 all-reduces
    # become 2 buckets (one per block: they stay apart, each launched as soon as it is ready) + the loss
    assert before == {"comm.all_reduce": 5}
    assert train == {"comm.all_reduce": 1, "comm.all_reduce_bucket": 2}


def test_failing_rank_ends_the_launch_with_its_message():
    from failing_rank import fail_on_rank_one

    with pytest.raises(LaunchError, match="rank 1 failed: .*deliberate failure on rank 1"):
        launch(fail_on_rank_one, 2, (), timeout_s=60)


@pytest.mark.parametrize("fail", [False, True], ids=["ranks-succeed", "rank-fails"])
def test_what_ranks_print_at_exit_stays_off_the_terminal(capfd, fail):
    """A rank's stderr goes to the launch's log also after its function ends (a gloo group left alive by
    a failed rank used to abort at exit with "terminate called ..." and a fatal-error dump on the terminal)."""
    from failing_rank import noisy_at_exit

    if fail:
        with pytest.raises(LaunchError, match="rank 1 failed: .*deliberate failure on rank 1"):
            launch(noisy_at_exit, 2, (True,), timeout_s=60)
    else:
        assert launch(noisy_at_exit, 2, (False,), timeout_s=60) == {0: 0, 1: 1}
    out, err = capfd.readouterr()
    assert "teardown noise" not in out + err, out + err


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_spawned_ranks_with_their_own_hash_seeds_compute_what_forked_ranks_do(runs, monkeypatch):
    """Ranks forked from the launcher's fork server share its string-hash seed; spawned ranks (as
    torchrun starts them) each draw their own. Nothing a rank computes or issues may depend on it:
    the same programs on spawned ranks give the forked ranks' outputs, gradients and collectives,
    bitwise."""
    import multiprocessing

    from failing_rank import run_steps_reporting_hash_seed

    steps, forked = runs
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    queue = multiprocessing.get_context("spawn").SimpleQueue()
    spawned = launch(run_steps_reporting_hash_seed, 4, (steps, queue), timeout_s=300)
    hashes = dict(queue.get() for _ in range(4))
    assert sorted(hashes) == [0, 1, 2, 3] and len(set(hashes.values())) > 1, hashes   # other seeds per rank
    for rank in range(4):
        assert _same(spawned[rank], forked[rank]), rank
