"""Calibrating a device profile on the ranks at hand (spmdc.tools.calibrate) and the optimizer
update's time in the dry run's step (spmdc.api.predict.optimizer_seconds).

Two gloo ranks measure together; every rank gets the same medians, each a positive figure, the
overlap a share in [0, 1] (measured on the runtime's own fsdp program, its collectives started early
against synchronous); the calibrated profile is the table's entry with those figures, no
longer marked a guess, and a dry run prices a step with it. The optimizer's update is counted per
parameter tensor (a dispatch mode over one real update): AdamW runs more ops per tensor than SGD,
and a training step's predicted time includes the update once.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from spmdc.api.dry_run import dry_run
from spmdc.api.predict import _add_call, optimizer_ops, optimizer_seconds, pipeline_step
from spmdc.compiler.devices import device_profile
from spmdc.frontend.workloads import load_workload
from spmdc.runtime.launcher import launch
from spmdc.sharding.mesh import Mesh
from spmdc.tools.calibrate import _overlap_in_place, calibrated_profile, measure_device, median_figures

sys.path.insert(0, str(Path(__file__).parent))
import calibrate_workers as W  # noqa: E402

FIGURES = ("launch_us", "dtensor_op_us", "latency_us", "intra_gbps", "inter_gbps", "flops", "hbm_gbps", "overlap",
           "idle_speedup")


@pytest.fixture(scope="module")
def figures():
    return launch(measure_device, 2, (5,), timeout_s=300)


def test_every_rank_gets_the_same_positive_figures(figures):
    assert figures[0] == figures[1]
    f = figures[0]
    assert set(FIGURES) <= set(f) and f["node_size"] == 2
    assert all(f[k] > 0 for k in FIGURES if k != "overlap"), f
    assert 0.0 <= f["overlap"] <= 1.0 and f["idle_speedup"] >= 1.0 and f["sync_us"] >= 0.0
    assert f["scatter_staging"] == 0.0   # the runtime exchanges its own packed buffer's pieces on gloo
    # one call of each collective the runtime issues, per group size: alpha and bandwidth
    assert {(kind, k) for kind, k, _, _ in f["collectives"]} == {("all_reduce", 2), ("all_gather", 2),
                                                                 ("reduce_scatter", 2), ("all_to_all", 2)}
    assert all(alpha >= 1.0 and 0 < gbps <= f["hbm_gbps"] for _, _, alpha, gbps in f["collectives"])


def test_a_calibration_is_each_figures_median_over_its_launches():
    """One launch's draw (here the second's launch cost and overlap) does not set the profile."""
    runs = [{"launch_us": 9.0, "overlap": 0.0, "node_size": 4,
             "collectives": (("all_reduce", 4, 300.0, 0.5), ("all_gather", 4, 200.0, 1.0)),
             "bucket_members": (("all_gather", 4, 10.0),)},
            {"launch_us": 40.0, "overlap": 0.61, "node_size": 4,
             "collectives": (("all_reduce", 4, 100.0, 0.9), ("all_gather", 4, 250.0, 0.2)),
             "bucket_members": (("all_gather", 4, 30.0),)},
            {"launch_us": 12.0, "overlap": 0.05, "node_size": 4,
             "collectives": (("all_reduce", 4, 200.0, 0.7), ("all_gather", 4, 150.0, 0.8)),
             "bucket_members": (("all_gather", 4, 20.0),)}]
    m = median_figures(runs)
    assert (m["launch_us"], m["overlap"], m["node_size"]) == (12.0, 0.05, 4)
    # each collective's alpha and bandwidth their own medians (not one launch's pair)
    assert m["collectives"] == (("all_gather", 4, 200.0, 0.8), ("all_reduce", 4, 200.0, 0.7))
    assert m["bucket_members"] == (("all_gather", 4, 20.0),)
    assert calibrated_profile("cpu", m).launch_us == 12.0


def test_every_rank_times_the_same_stretch_then_half_of_them():
    """The runtime's kernel and update costs and the idle speedup are timed over a stretch of wall
    time every rank runs through (so that all of them run at once throughout; a fixed number of steps
    let the first-woken ranks finish before the others started): each rank's calls cover at least
    the stretch and overlap the other's; then only rank 0 calls while rank 1 waits for it."""
    got = launch(W.windows, 2, (0.3,), timeout_s=120)
    for r in (0, 1):
        calls = got[r]["every"]
        assert len(calls) >= 3 and calls[-1][1] - calls[0][0] >= 0.3
    (a0, a1), (b0, b1) = [(got[r]["every"][0][0], got[r]["every"][-1][1]) for r in (0, 1)]
    assert max(a0, b0) < min(a1, b1) - 0.2   # (run at once for most of the stretch)
    assert len(got[0]["alone"]) >= 3 and got[1]["alone"] == []
    assert got[1]["left_alone"] >= got[0]["alone"][-1][1]   # rank 1 waited for rank 0's stretch


class _OneRank:
    """What _overlap_in_place asks of torch.distributed, on one rank that counts its steps."""

    class ReduceOp:
        MIN = "min"

    def barrier(self):
        pass

    def all_reduce(self, t, op=None):   # (another rank expects fewer steps: the count every rank takes)
        t.fill_(min(int(t), 4))


def test_the_overlap_is_measured_in_place_on_the_runtimes_programs():
    """The overlap is how much faster the runtime's program with started collectives runs than the
    same program with synchronous ones, over the part that could hide (the smaller of its compute
    and its collectives); every rank steps each program the same number of times (the fewest any
    rank expects), taking turns; a program slower with its collectives started hides nothing."""
    calls = {"overlapped": 0, "synchronous": 0}

    def train(seconds):
        def step():
            calls[name[seconds]] += 1
            return seconds
        return step

    name = {0.010: "overlapped", 0.014: "synchronous"}
    # compute 6 ms, synchronous collectives 8 ms: 4 of the 6 ms that could hide are hidden
    assert _overlap_in_place(train, 0.010, 0.014, 0.006, _OneRank(), reps=3, turns=3) == pytest.approx(4 / 6)
    assert calls == {"overlapped": 3 * (2 + 4), "synchronous": 3 * (2 + 4)}   # (2 to estimate, 4 agreed)
    name = {0.016: "overlapped", 0.014: "synchronous"}
    assert _overlap_in_place(train, 0.016, 0.014, 0.006, _OneRank(), reps=3) == 0.0
    name = {0.006: "overlapped", 0.014: "synchronous"}
    assert _overlap_in_place(train, 0.006, 0.014, 0.006, _OneRank(), reps=3) == 1.0


def test_calibrated_calls_price_the_collectives(figures):
    p = calibrated_profile("cpu", figures[0])
    alpha = {kind: a for kind, _, a, _ in p.collectives}
    assert p.call_us("all_gather", 2, 0) == pytest.approx(alpha["all_gather"])
    assert p.call_us("all_gather", 2, 1 << 20) > p.call_us("all_gather", 2, 16 << 10)
    assert p.call_us("all_gather", 4, 0) == p.call_us("all_gather", 2, 0)   # the nearest group size measured
    assert p.call_us("broadcast", 2, 1) is None and device_profile("cpu").call_us("all_reduce", 2, 1) is None
    # an expert dispatch or combine is one all_to_all of its payload
    rows: dict = {}
    _add_call(rows, "comm.expert_dispatch", ("ep",), 1 << 14, Mesh({"ep": 2}), p)
    assert rows[("ep", "comm.expert_dispatch")].seconds == pytest.approx(p.call_us("all_to_all", 2, 1 << 14) * 1e-6)
    w = load_workload("mlp")
    report = dry_run(w.model, w.inputs, mesh=Mesh({"dp": 2}), plan="fsdp", device=p, train=True, loss_fn=w.loss_fn,
                     loss_inputs=w.loss_inputs, optimizer="adamw")
    for row in report.roles[0].prediction.comm:   # each call priced as measured
        kind = row.kind.removeprefix("comm.").removesuffix("_bucket")
        if kind in alpha:
            assert row.seconds >= row.count * alpha[kind] * 1e-6 * 0.999
    # every bucketed kind's members were timed, per group size
    assert {(kind, k) for kind, k, _ in p.bucket_members} == {("all_reduce", 2), ("all_gather", 2),
                                                            ("reduce_scatter", 2)}
    assert all(us >= 0.0 for _, _, us in p.bucket_members)


def test_a_buckets_members_add_their_host_time():
    """A bucketed call costs its call plus each member's packing and unpacking (the profile's
    measured µs per member for that kind, the nearest group size); a plain call and a profile that
    measured none add nothing."""
    p = dataclasses.replace(device_profile("cpu"), collectives=(("all_gather", 4, 100.0, 1.0),),
                            bucket_members=(("all_gather", 2, 30.0), ("all_gather", 4, 50.0)))
    mesh = Mesh({"dp": 4})

    def seconds(kind, members, profile=p):
        rows: dict = {}
        _add_call(rows, kind, ("dp",), 1 << 12, mesh, profile, members=members)
        return rows[("dp", kind)].seconds

    call = p.call_us("all_gather", 4, 1 << 12) * 1e-6
    assert seconds("comm.all_gather", 1) == pytest.approx(call)
    assert seconds("comm.all_gather_bucket", 3) == pytest.approx(call + 3 * 50e-6)
    assert p.member_us("all_gather", 8) == 50.0 and p.member_us("reduce_scatter", 4) == 0.0
    bare = dataclasses.replace(p, bucket_members=())
    assert seconds("comm.all_gather_bucket", 3, bare) == pytest.approx(call)


def test_the_calibrated_profile_prices_a_step(figures):
    p = calibrated_profile("cpu", figures[0])
    base = device_profile("cpu")
    assert p.name == "cpu-calibrated" and not p.rough and base.rough
    assert (p.latency_us, p.flops, p.node_size) == (figures[0]["latency_us"], figures[0]["flops"], 2)
    w = load_workload("mlp")
    report = dry_run(w.model, w.inputs, mesh=Mesh({"dp": 2}), plan="fsdp", device=p, train=True, loss_fn=w.loss_fn,
                     loss_inputs=w.loss_inputs, optimizer="adamw")
    (role,) = report.roles
    assert role.prediction.step_seconds > 0 and role.prediction.overlap == p.overlap


def test_the_optimizer_update_is_counted_per_tensor():
    adamw, sgd = optimizer_ops("adamw"), optimizer_ops("sgd")
    assert adamw[0] > sgd[0] >= 1
    dev = dataclasses.replace(device_profile("cpu"), dtensor_op_us=10.0)
    # ops on each of 3 tensors, the per-update ones once, plus the bytes each op reads and writes
    expect = (3 * adamw[0] + adamw[1]) * 10e-6 + adamw[0] * 2 * 3 * 4096 / (dev.hbm_gbps * 1e9)
    assert optimizer_seconds("adamw", [4096] * 3, dev) == pytest.approx(expect)
    assert optimizer_seconds(None, [4096], dev) == 0.0


def test_a_training_step_includes_the_update_once():
    w = load_workload("mlp")
    dev = device_profile("cpu")

    def step(optimizer):
        (role,) = dry_run(w.model, w.inputs, mesh=Mesh({"dp": 2}), plan="fsdp", device=dev, train=True,
                          loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, optimizer=optimizer).roles
        return role.prediction

    with_adamw, without = step("adamw"), step(None)
    tensors = sum(1 for p in w.model.parameters() if p.requires_grad)
    assert without.update_seconds == 0.0
    assert with_adamw.update_seconds >= tensors * optimizer_ops("adamw")[0] * dev.dtensor_op_us * 1e-6
    assert with_adamw.step_seconds == pytest.approx(without.step_seconds + with_adamw.update_seconds)


def test_a_pipelines_fill_and_drain_on_ranks_sharing_cores():
    """pipeline_step: a device per rank (idle_speedup 1) adds (groups - 1) slowest stage micro-batches;
    ranks sharing cores take the longer of the busiest rank's time and the whole path at the idle speed."""
    gpu, shared = device_profile("h100"), dataclasses.replace(device_profile("cpu"), idle_speedup=2.5)
    assert gpu.idle_speedup == 1.0 and pipeline_step(10.0, 2.0, 4, gpu) == pytest.approx(16.0)
    assert pipeline_step(10.0, 2.0, 2, shared) == pytest.approx(10.0)            # (12 / 2.5 < 10)
    assert pipeline_step(10.0, 20.0, 4, shared) == pytest.approx(70.0 / 2.5)     # the path is longer
    w = load_workload("gpt2-tiny", batch=4)
    from spmdc.sharding.pipeline_plan import PipelinePlan

    def step(device):
        report = dry_run(w.model, w.inputs, mesh=None, plan=PipelinePlan.from_mesh("pp=2", "dp"), device=device,
                         train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, optimizer="adamw")
        return [(r.prediction.step_seconds, r.prediction.stage_seconds, r.prediction.bubble_seconds)
                for r in report.roles]
    one, two = step(device_profile("cpu")), step(dataclasses.replace(device_profile("cpu"), idle_speedup=2.0))
    for (s1, stage1, b1), (s2, stage2, b2) in zip(one, two):
        assert stage1 == pytest.approx(stage2) and stage1 > 0
        assert s2 < s1 and b2 < b1
        assert s1 - b1 == pytest.approx(s2 - b2)   # the work itself is priced alike


DP2 = Mesh({"dp": 2})
SYNCS = """
shard.mesh @mesh = <["dp" = 2]>
func.func @main(%w0: tensor<4x8xf32>, %w1: tensor<4x8xf32>, %x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %h0 = comm.all_gather_start %w0 {axis = "dp", dim = 0, mesh = @mesh}
      : (tensor<4x8xf32>) -> !comm.handle<tensor<8x8xf32>>
  %a = comm.wait %h0 : (!comm.handle<tensor<8x8xf32>>) -> tensor<8x8xf32>
  %h1 = comm.all_gather_start %w1 {axis = "dp", dim = 0, mesh = @mesh}
      : (tensor<4x8xf32>) -> !comm.handle<tensor<8x8xf32>>
  %y = tensor.matmul %x, %a : tensor<8x8xf32>
  %b = comm.wait %h1 : (!comm.handle<tensor<8x8xf32>>) -> tensor<8x8xf32>
  %z = tensor.matmul %y, %b : tensor<8x8xf32>
  %r = comm.all_reduce %z {axes = ["dp"], mesh = @mesh, op = "sum"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %s = comm.all_reduce %r {axes = ["dp"], mesh = @mesh, op = "sum"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  func.return %s : tensor<8x8xf32>
}
"""


def test_sync_points_are_waits_after_computing_alone():
    """A wait counts when a kernel ran since the last one (the first: the ranks come from their own
    work); a start does not wait; waits back to back meet peers already together."""
    from spmdc.api.predict import sync_points
    from spmdc.compiler.compilation import main_function
    from spmdc.ir.parser import parse_module

    func = main_function(parse_module(SYNCS))
    assert sync_points(func) == 3   # the first wait, the wait after %y, the all-reduce after %z (not the second)


def test_each_sync_point_is_priced_sync_us():
    """The dry run charges sync_us per point (0 on a device per rank), in the step's collectives:
    FSDP waits more often than data parallelism on the same model, and a pipeline's stages also
    wait on each other's messages."""
    w = load_workload("gpt2-tiny", batch=4)
    base = device_profile("cpu")
    assert device_profile("h100").sync_us == 0.0 and base.sync_us == 0.0

    def pred(plan, device, mesh=DP2):
        return [r.prediction for r in dry_run(w.model, w.inputs, mesh=mesh, plan=plan, device=device, train=True,
                                              loss_fn=w.loss_fn, loss_inputs=w.loss_inputs,
                                              optimizer="adamw").roles]
    skewed = dataclasses.replace(base, sync_us=1000.0)
    (dp0,), (dp1,) = pred("dp", base), pred("dp", skewed)
    (fs0,), (fs1,) = pred("fsdp", base), pred("fsdp", skewed)
    assert 1 <= dp1.sync_points < fs1.sync_points
    for a, b in ((dp0, dp1), (fs0, fs1)):
        assert a.sync_points == b.sync_points
        assert b.comm_seconds - a.comm_seconds == pytest.approx(b.sync_points * 1e-3)
    from spmdc.sharding.pipeline_plan import PipelinePlan

    pp = PipelinePlan.from_mesh("pp=2", "dp")
    flat, waits = pred(pp, base, None), pred(pp, skewed, None)
    for a, b in zip(flat, waits):   # each stage: its programs' points per micro-batch and its receives
        assert b.sync_points > 0 and b.comm_seconds > a.comm_seconds
        assert b.stage_seconds > a.stage_seconds


def test_a_tied_weights_sum_is_priced_as_the_runtime_issues_it():
    """gpt2-tiny's wte/lm_head is read by both stages. fsdp on dp=2 in both: each rank sums its shard
    with one rank of the other stage (half the bytes, a group of 2); fsdp in stage 0 and megatron in
    stage 1 (other layouts): the whole gradient over the 4 ranks. Each priced as that calibrated call."""
    from spmdc.api.predict import all_reduce_seconds
    from spmdc.sharding.pipeline_plan import PipelinePlan

    w = load_workload("gpt2-tiny", batch=4)
    dev = dataclasses.replace(device_profile("cpu"), collectives=(("all_reduce", 2, 100.0, 1.0),
                                                                  ("all_reduce", 4, 400.0, 1.0)))
    whole = 256 * 16 * 4
    mixed = PipelinePlan.from_dict({"microbatches": 2, "stages": [
        {"ranks": [0, 1], "mesh": "dp=2", "plan": "fsdp"}, {"ranks": [2, 3], "mesh": "tp=2", "plan": "megatron"}]})
    for plan, nbytes, ranks in ((PipelinePlan.from_mesh("pp=2,dp=2", "fsdp"), whole // 2, 2), (mixed, whole, 4)):
        report = dry_run(w.model, w.inputs, mesh=None, plan=plan, device=dev, train=True, loss_fn=w.loss_fn,
                         loss_inputs=w.loss_inputs, optimizer="adamw")
        for role in report.roles:
            (row,) = [r for r in role.prediction.comm if (r.axes, r.kind) == ("pp", "all_reduce")]
            assert (row.count, row.bytes) == (1, nbytes)
            assert row.seconds == pytest.approx(all_reduce_seconds(nbytes, ranks, dev))
            assert row.seconds == pytest.approx((100.0 if ranks == 2 else 400.0) * 1e-6 + nbytes * 1e-9)
