"""Calibrate a device profile on the ranks at hand: a few seconds of collectives and kernels.

    figures = launch(measure_device, 4)[0]          # on every rank at once; every rank gets the medians
    profile = calibrated_profile("cpu", figures)    # the table's entry with the measured figures

The dry run (:mod:`spmdc.api.predict`) prices a step with a :class:`~spmdc.compiler.devices.DeviceProfile`:
a roofline per op plus a launch, α-β per collective. The table's entries are data-sheet figures;
the ``cpu`` entry is a guess, and gloo ranks sharing a few cores are nothing like a data sheet.
:func:`measure_device` measures what the model needs, with every rank running at once (so the
ranks' contention for the cores is in the figures):

* ``launch_us``: one kernel as spmdc's runtime runs it: each rank trains a small model
  (:data:`RUNTIME_MODEL`) on a mesh of its own and the program's time less its kernels' roofline is
  spread over the kernels the dry run counts (the generated code, views and autograd around them
  included: on gloo ranks sharing cores ~10x a bare op); at least a bare op's dispatch (a loop of
  matmul, view, permute, reshape, mul, add, softmax, sum, expand, contiguous on 64×32 float32);
* ``dtensor_op_us``: one op of ``torch.optim``'s AdamW update on that model's DTensor parameters
  (its time over the ops it issues, :func:`~spmdc.api.predict.optimizer_ops`); at least a bare
  in-place ``mul_``/``add_`` on a DTensor;
* ``latency_us``: an all-reduce of one element over the job, less its launch, over the
  ``2·(n-1)`` steps the α-β model charges it (:class:`~spmdc.sharding.cost.AxisCost`);
* ``intra_gbps``/``inter_gbps``: from an all-reduce of 4 MiB less the small one's time (every rank
  on one machine: ``node_size`` is the job);
* ``flops``: a 256×256×256 float32 matmul; ``hbm_gbps``: a 32 MiB copy (read and write);
* ``overlap``: the share of its collectives' time spmdc's runtime hides behind its compute, measured
  in place: :data:`RUNTIME_MODEL` trained under ``fsdp`` over the whole job with its collectives
  started early (``schedule-collectives``) against the same program with each collective synchronous
  (``--no-overlap``), the difference over the part that could hide (the smaller of the program on a
  mesh of its own and the synchronous program's collectives) (:func:`_overlap_in_place`; 1: all of
  it, 0: none; 4 or 8 gloo ranks sharing 2 cores: ~0.05-0.3). A big all-reduce beside as many
  matmuls, timed a few times, had given 0.0-0.7 from one calibration to the next;
* ``collectives``: per kind spmdc's runtime issues (all-reduce, all-gather, reduce-scatter, all-to-all) and
  group size, the time of one call as α + payload / bandwidth, fitted to calls of 16 KiB and 1 MiB
  per rank with every group of that size running at once (what the dry run prices each call with,
  in place of the ring model's α-β per hop, which on gloo ranks sharing cores is off by ~10x);
* ``bucket_members``: per bucketed kind (all-gather, reduce-scatter, all-reduce) and group size, the
  host time one more member adds to a bucket (packing it, unpacking each rank's piece): a bucket of
  :data:`MEMBERS` tensors against one tensor of the same bytes (an fsdp bucket holds a block's
  parameters, ~10 of them);
* ``sync_us``: what each of a program's :func:`~spmdc.api.predict.sync_points` (a wait on peers
  after computing alone) costs beyond the call's price: rounds of a few ms of the ops above each
  followed by a small all-reduce, less the ops alone and the all-reduce after a barrier
  (:func:`_sync_cost`; on ranks sharing cores the slowest peer's lag, ~0.8-1.2 ms on 4 ranks
  sharing 2 cores, ~1-1.7 ms on 8); ~0 for a device per rank;
* ``idle_speedup``: how much faster that program runs on half the ranks while the others wait in a
  barrier (ranks sharing cores: a pipeline's fill and drain run that much faster; 1 for a device per rank);
* ``scatter_staging``: the memory the backend allocates of its own while the runtime reduce-scatters
  64 KiB per rank (:func:`~spmdc.runtime.collectives.scatter_packed`), per operand byte (its
  measured peak above what was live and the result, :func:`~spmdc.runtime.memory.measure_peak`;
  0 on gloo, whose pieces the runtime exchanges pair by pair into the pack, and on NCCL).

Each figure is the median over its repetitions, then over the ranks, then over :data:`LAUNCHES`
separate launches (:func:`calibrate`): from one launch to the next on 4 ranks sharing 2 cores, the
launch cost measured 9-18 us, the idle speedup 1.06-2.02, the sync cost 0.02-0.48 ms and the overlap
0.00-0.61 (the ranks placed on the cores otherwise each time), and one launch's draw moved every
prediction of a measurement with it. Used by
``bench/plan_accuracy.py`` (predictions on a calibrated ``cpu`` profile against measured runs).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from spmdc.compiler.devices import BUCKETED_KINDS, COLLECTIVE_KINDS

__all__ = ["LAUNCHES", "calibrate", "calibrated_profile", "measure_device", "median_figures"]


def _median_seconds(fn: Callable[[], Any], reps: int, barrier: Callable[[], Any] | None = None) -> float:
    times = []
    for _ in range(reps):
        if barrier is not None:
            barrier()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_device(reps: int = 20) -> dict[str, float]:
    """On every rank of a (gloo or NCCL) process group: the figures above, the same on every rank."""
    import torch
    import torch.distributed as dist

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo")
    try:
        n = dist.get_world_size()
        dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else \
            torch.device("cpu")
        sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
        x, w = torch.randn(64, 32, device=dev), torch.randn(32, 32, device=dev)
        rounds = 10

        def ops() -> None:   # what a small model's program runs: matmuls, views, elementwise, reductions
            y = x
            for _ in range(rounds):
                y = torch.mm(y, w).view(8, 8, 32).permute(1, 0, 2).reshape(64, 32)
                y = torch.softmax(y * 0.5 + x, dim=-1).sum(dim=0, keepdim=True).expand(64, 32).contiguous()
            sync()

        launch = _median_seconds(ops, reps) / (10 * rounds)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        mesh = init_device_mesh(dev.type, (n,))
        d = DTensor.from_local(torch.ones(64, 32, device=dev), mesh, [Shard(0)], run_check=False)

        def dtensor_ops() -> None:   # what torch.optim's update runs on a parameter
            for _ in range(rounds):
                d.mul_(0.5)
                d.add_(d, alpha=0.1)
            sync()

        dtensor_op = _median_seconds(dtensor_ops, reps) / (2 * rounds)
        small, big = torch.ones(1, device=dev), torch.ones(1 << 20, device=dev)   # 4 B, 4 MiB
        t_small = _median_seconds(lambda: (dist.all_reduce(small), sync()), reps, dist.barrier)
        t_big = _median_seconds(lambda: (dist.all_reduce(big), sync()), max(3, reps // 4), dist.barrier)
        a = torch.randn(256, 256, device=dev)
        t_mm = _median_seconds(lambda: (a @ a, sync()), reps)
        src = torch.ones(8 << 20, device=dev)   # 32 MiB
        dst = torch.empty_like(src)
        t_copy = _median_seconds(lambda: (dst.copy_(src), sync()), max(3, reps // 4))
        skew = _sync_cost(dist, ops, small) if n > 1 else 0.0
        scatter = _scatter_staging(dist, dev, n) if n > 1 else 0.0
        program_us, update_us, speedup, overlap = _runtime_costs(dev, n, 2 * 256 ** 3 / t_mm,
                                                        2 * src.numel() * src.element_size() / t_copy / 1e9)
        steps = max(1, 2 * (n - 1))
        moved = 2 * big.numel() * big.element_size() * (n - 1) / max(n, 1)   # ring all-reduce: bytes per rank
        mine = {"launch_us": max(launch * 1e6, program_us), "dtensor_op_us": max(dtensor_op * 1e6, update_us),
                "latency_us": max(1.0, (t_small - launch) * 1e6 / steps),
                "intra_gbps": moved / max(t_big - t_small, 1e-9) / 1e9 if n > 1 else 0.0,
                "flops": 2 * 256 ** 3 / t_mm,
                "hbm_gbps": 2 * src.numel() * src.element_size() / t_copy / 1e9,
                "overlap": overlap, "idle_speedup": speedup,
                "sync_us": skew * 1e6,
                "scatter_staging": scatter}
        copy_gbps = 2 * src.numel() * src.element_size() / t_copy / 1e9
        costs = _collective_costs(dev, n, 2 * reps, copy_gbps) if n > 1 else {}
        every: list[Any] = [None] * n
        dist.all_gather_object(every, (mine, costs))
        out: dict[str, Any] = {k: statistics.median(r[0][k] for r in every) for k in mine}
        if costs:
            out["collectives"] = tuple((kind, k, statistics.median(r[1][(kind, k)][0] for r in every),
                                        statistics.median(r[1][(kind, k)][1] for r in every))
                                       for kind, k in sorted(costs))
            out["bucket_members"] = tuple((kind, k, statistics.median(r[1][(kind, k)][2] for r in every))
                                          for kind, k in sorted(costs) if kind in BUCKETED)
        if n == 1:
            for key in ("intra_gbps", "latency_us", "overlap", "scatter_staging", "idle_speedup", "sync_us"):
                out.pop(key)
        else:
            out["inter_gbps"] = out["intra_gbps"]
            out["node_size"] = n
        return out
    finally:
        if own:
            dist.destroy_process_group()


RUNTIME_MODEL = ("gpt2-tiny", {"n_layer": 1, "batch": 4})   # what _runtime_costs compiles and runs
SYNC_WORK = 4   # the work between waits _sync_cost measures: this many rounds of measure_device's ops


def _sync_cost(dist: Any, work: Callable[[], Any], small: Any, reps: int = 12, turns: int = 20) -> float:
    """Seconds a collective waits beyond its price when the ranks come to it from their own work
    (:func:`~spmdc.api.predict.sync_points`), on this rank: ``reps`` rounds of :data:`SYNC_WORK`
    times ``work`` (~2-5 ms on ranks sharing cores, what a small model computes between waits) each
    followed by a small all-reduce, less as many rounds of the work alone (every rank at once) and
    as many all-reduces each after a barrier (how :func:`_collective_costs` prices a call), per
    round, in ``turns`` turns (the median of 20: with 5, one launch's figure was 0.5-1.6 ms on 4
    ranks sharing 2 cores, with 20 0.8-1.2 ms). On ranks sharing cores the scheduler runs the ranks
    unevenly, and a rank that finished its work waits for the slowest peer (measured on 2 cores:
    ~0.8-1.2 ms per wait for 4 ranks, ~1-1.7 ms for 8; it grows with the work between waits); with a
    device per rank it is ~0 (a device's skew is in its compute)."""
    def loop(what: str) -> float:
        dist.barrier()
        took = 0.0
        t = time.perf_counter()
        for _ in range(reps):
            if what == "aligned":   # (only the call is timed, as _collective_costs times it)
                dist.barrier()
                t = time.perf_counter()
                dist.all_reduce(small)
                took += time.perf_counter() - t
                continue
            for _ in range(SYNC_WORK):
                work()
            if what == "both":
                dist.all_reduce(small)
        return (took if what == "aligned" else time.perf_counter() - t) / reps

    times: dict[str, list[float]] = {"both": [], "alone": [], "aligned": []}
    for _ in range(turns):   # (taking turns: a burst of other work slows each a little)
        for what, got in times.items():
            got.append(loop(what))
    both, alone, aligned = (statistics.median(times[k]) for k in ("both", "alone", "aligned"))
    return max(0.0, both - alone - aligned)


RUNTIME_WINDOW_S = 1.5   # seconds every rank trains RUNTIME_MODEL for (_runtime_costs), then half the ranks


def _for_a_while(dist: Any, fn: Callable[[], Any], seconds: float, at_least: int, mine: bool = True) -> list[Any]:
    """``fn()``'s results, called back to back from a barrier for ``seconds`` of wall time (at least
    ``at_least`` times) where ``mine``, while the other ranks wait in the next barrier."""
    dist.barrier()
    out = []
    end = time.perf_counter() + seconds
    while mine and (time.perf_counter() < end or len(out) < at_least):
        out.append(fn())
    dist.barrier()
    return out


def _agreed(dist: Any, fn: Callable[[], float], seconds: float, at_least: int) -> list[float]:
    """``fn()``'s seconds, called back to back from a barrier as many times on every rank (``fn``
    issues collectives): the fewest any rank expects to fill ``seconds`` from two calls, at least
    ``at_least``."""
    import torch

    dist.barrier()
    took = max(1e-6, min(fn(), fn()))
    count = torch.tensor([max(at_least, int(seconds / took))])
    dist.all_reduce(count, op=dist.ReduceOp.MIN)
    dist.barrier()
    return [fn() for _ in range(int(count))]


def _overlap_in_place(train: Callable[[Any], Callable[[], float]], overlapped: Any, synchronous: Any, alone: float,
                      dist: Any, reps: int, turns: int = 3) -> float:
    """The share of the collectives' time the runtime hides behind compute: ``train(cm)`` times a
    step of ``overlapped`` (:data:`RUNTIME_MODEL` under ``fsdp`` over the job, its collectives started
    early) and of ``synchronous`` (the same, ``overlap=False``), in ``turns`` turns of
    :data:`RUNTIME_WINDOW_S` / ``turns`` seconds each (every rank the same number of steps);
    ``(synchronous - overlapped) / min(alone, synchronous - alone)`` of their median steps, ``alone``
    the program's seconds on a mesh of its own (its compute), clamped to [0, 1]."""
    times: dict[str, list[float]] = {"overlapped": [], "synchronous": []}
    for _ in range(turns):   # (taking turns: a burst of other work slows each a little)
        for key, cm in (("overlapped", overlapped), ("synchronous", synchronous)):
            times[key] += _agreed(dist, train(cm), RUNTIME_WINDOW_S / turns, max(3, reps // turns))
    ov, syn = statistics.median(times["overlapped"]), statistics.median(times["synchronous"])
    hideable = min(alone, syn - alone)
    return min(1.0, max(0.0, (syn - ov) / hideable)) if hideable > 0 else 0.0


def _runtime_costs(dev: Any, n: int, flops: float, hbm_gbps: float,
                   reps: int = 12) -> tuple[float, float, float, float]:
    """What a kernel and an optimizer op cost when spmdc's runtime runs them, every rank at once: ``(µs per kernel,
    µs per update op, idle speedup, overlap)``. Each rank compiles :data:`RUNTIME_MODEL` on a mesh of its own
    (one rank: no collectives) and trains it; a kernel's cost is the program's time (forward and backward) less
    the roofline of its kernels at ``flops``/``hbm_gbps``, over the kernels the dry run counts (the generated
    code's Python, views and the autograd around it included); an update op's is the time of ``torch.optim``'s
    AdamW update over the ops it issues (:func:`optimizer_ops`). The raw torch op figures above miss both (the
    runtime's kernel: ~5-10x a bare op on gloo ranks sharing cores; a DTensor AdamW op ~2-3x a bare ``mul_``),
    and the dry run prices with these. The idle speedup: the program's time with every rank running over its
    time on half the ranks while the others wait (ranks sharing cores: ~2; a device per rank: 1). Each is the
    median step of :data:`RUNTIME_WINDOW_S` seconds of training (at least ``reps`` steps). The overlap: the same
    model trained under ``fsdp`` over the job, its collectives started early and synchronous
    (:func:`_overlap_in_place`; 0 for one rank)."""
    import dataclasses

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.api.dry_run import dry_run
    from spmdc.api.entry import CompiledModule, Optimizer
    from spmdc.api.predict import optimizer_ops
    from spmdc.compiler.devices import device_profile
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.mesh import Mesh

    name, sizes = RUNTIME_MODEL
    own = init_device_mesh(dev.type, (n, 1), mesh_dim_names=("rank", "dp"))["dp"]
    w = load_workload(name, **sizes)

    def compiled(**kw: Any) -> Any:
        torch.manual_seed(0)
        return CompiledModule(w.model, tuple(w.inputs), train=True, loss_fn=w.loss_fn,
                              loss_inputs=tuple(w.loss_inputs), example_kwargs=w.kwargs,
                              optimizer=Optimizer("adamw", lr=1e-3), **kw)

    batch = (*w.inputs, *w.loss_inputs)

    def timed(cm: Any) -> Callable[[], tuple[float, float]]:
        def step() -> tuple[float, float]:
            cm.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            cm.backward(*batch, **w.kwargs)
            t1 = time.perf_counter()
            cm.optimizer.step()
            return t1 - t0, time.perf_counter() - t1
        return step

    cm = compiled(mesh=Mesh({"dp": 1}), device_mesh=own, plan="dp")
    train = timed(cm)
    train(), train()   # (the first allocates the optimizer's state; warm up)
    # every rank trains for the same stretch of wall time, so that they all run at once throughout
    # (timing a fixed number of steps, the first ranks the scheduler woke after a barrier could
    # finish theirs before the others started: measured 2-3x apart, turn to turn, on 4 ranks)
    steps = _for_a_while(dist, train, RUNTIME_WINDOW_S, reps)
    program, update = [p for p, _ in steps], [u for _, u in steps]
    # half the ranks again while the others wait (a pipeline's fill and drain)
    halves = _for_a_while(dist, train, RUNTIME_WINDOW_S, reps, dist.get_rank() % 2 == 0)
    alone = [p for p, _ in halves]
    every: list[Any] = [None] * n
    dist.all_gather_object(every, statistics.median(program) / statistics.median(alone) if alone else None)
    speedup = statistics.median(x for x in every if x is not None) if n > 1 else 1.0
    roofline = dataclasses.replace(device_profile("cpu"), flops=flops, hbm_gbps=hbm_gbps, launch_us=0.0)
    report = dry_run(w.model, w.inputs, mesh=Mesh({"dp": 1}), plan="dp", device=roofline, train=True,
                     loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, kwargs=w.kwargs)
    kernels, seconds = report.roles[0].prediction.kernels, report.roles[0].prediction.compute_seconds
    per, fixed = optimizer_ops("adamw")
    params = [p for p in cm.parameters() if p.requires_grad]
    moved = per * 2 * sum(p.numel() * p.element_size() for p in params) / (hbm_gbps * 1e9)
    overlap = 0.0
    if n > 1:   # the runtime's own collectives over the whole job, started early or where needed
        fsdp = [compiled(mesh=Mesh({"dp": n}), plan="fsdp", overlap=ov) for ov in (True, False)]
        for c in fsdp:
            timed(c)()   # (allocates the optimizer's state)
        mine = _overlap_in_place(lambda c: (lambda: timed(c)()[0]), *fsdp, statistics.median(program), dist, reps)
        dist.all_gather_object(every, mine)
        overlap = statistics.median(every)
    return (max(0.0, statistics.median(program) - seconds) / max(kernels, 1) * 1e6,
            max(0.0, statistics.median(update) - moved) / (per * len(params) + fixed) * 1e6, max(1.0, speedup),
            overlap)


SMALL, LARGE = 16 << 10, 1 << 20   # payload bytes per rank of a collective call measured
KINDS = COLLECTIVE_KINDS   # the runtime's calls, measured per group size
BUCKETED = BUCKETED_KINDS   # the kinds the runtime also issues as buckets, their members timed
MEMBERS = 16   # tensors in the bucket _collective_costs times (SMALL bytes in all) against one of SMALL bytes


def _collective_costs(dev: Any, n: int, reps: int,
                      copy_gbps: float) -> dict[tuple[str, int], tuple[float, float, float]]:
    """Per collective kind spmdc's runtime issues (:data:`KINDS`:
    :class:`~spmdc.runtime.collectives.Collectives`, gloo's pairwise exchanges included) and group
    size ``k`` (each divisor of ``n`` from 2, every group of that size running at once, as a mesh
    axis's do): ``(α µs per call, GB/s of payload, µs per bucket member)``, the first two fitted to
    calls of 16 KiB and 1 MiB of payload per rank (the operand bytes the dry run counts), the median
    of ``reps`` calls each, the calls taking turns; the bandwidth at most ``copy_gbps`` (a call that
    took no longer for 1 MiB than for 16 KiB still copies its bytes). The last (:data:`BUCKETED`
    kinds; 0 for the others): a bucketed call (``all_gather_bucket`` ...) of :data:`MEMBERS` tensors
    of 16 KiB in all less one of a single 16 KiB tensor, over the members added."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.runtime.collectives import Collectives

    out = {}
    for k in [k for k in range(2, n + 1) if n % k == 0]:
        comm = Collectives(init_device_mesh(dev.type, (n // k, k), mesh_dim_names=("rest", "g")))
        calls = {}
        for kind in KINDS:
            for nbytes in (SMALL, LARGE):
                x = torch.ones(nbytes // 4, device=dev)
                calls[(kind, nbytes)] = {"all_reduce": lambda x=x: comm.all_reduce(x, ["g"], "sum"),
                                         "all_gather": lambda x=x: comm.all_gather(x, "g", 0, (k * x.numel(),)),
                                         "reduce_scatter": lambda x=x: comm.reduce_scatter(x, "g", 0, "sum"),
                                         "all_to_all": lambda x=x: comm.all_to_all(x, "g", 0, 0, tuple(x.shape))}[kind]
            for m in ((1, MEMBERS) if kind in BUCKETED else ()):
                xs = [torch.ones(SMALL // 4 // m, device=dev) for _ in range(m)]
                calls[(kind, -m)] = {
                    "all_reduce": lambda xs=xs: comm.all_reduce_bucket(xs, ["g"], "sum"),
                    "all_gather": lambda xs=xs: comm.all_gather_bucket(xs, "g", [0] * len(xs),
                                                                       [(k * x.numel(),) for x in xs]),
                    "reduce_scatter": lambda xs=xs: comm.reduce_scatter_bucket(xs, "g", [0] * len(xs), "sum")}[kind]
        times: dict[tuple[str, int], list[float]] = {key: [] for key in calls}
        for _ in range(reps):   # the calls take turns: a burst of other work slows each a little
            for key, call in calls.items():
                times[key] += [_median_seconds(call, 1, dist.barrier)]
        for kind in KINDS:
            small, large = (statistics.median(times[(kind, b)]) for b in (SMALL, LARGE))
            per_byte = max(large - small, 0.0) / (LARGE - SMALL)
            gbps = min(copy_gbps, 1 / per_byte / 1e9) if per_byte > 0 else copy_gbps
            member = 0.0
            if kind in BUCKETED:
                one, many = (statistics.median(times[(kind, -m)]) for m in (1, MEMBERS))
                member = max(0.0, many - one) / (MEMBERS - 1) * 1e6
            out[(kind, k)] = (max(1.0, (small - SMALL / (gbps * 1e9)) * 1e6), gbps, member)
    return out


def _scatter_staging(dist: Any, dev: Any, n: int) -> float:
    """Bytes the backend allocates of its own while spmdc's runtime reduce-scatters a packed bucket
    (:func:`spmdc.runtime.collectives.scatter_packed`), per byte of the bucket, rounded to a quarter
    (0 on gloo, exchanged pair by pair and reduced in place, and on NCCL)."""
    import torch

    from spmdc.runtime.collectives import scatter_packed
    from spmdc.runtime.memory import measure_peak

    whole = torch.ones(n * (1 << 14), device=dev)   # 64 KiB per rank

    def scatter() -> torch.Tensor:
        works, mine = scatter_packed(whole, "sum", dist.group.WORLD, n, dist.get_rank())
        for w in works:
            w.wait()
        return mine()

    _, peak = measure_peak(scatter)
    piece = whole.numel() // n * whole.element_size()   # (this rank's piece is the result, not staging)
    return max(0.0, round(4 * (peak - piece) / (whole.numel() * whole.element_size())) / 4)


LAUNCHES = 3
"""Separate launches :func:`calibrate` measures in, each figure their median (see the module doc)."""


def calibrate(nproc: int, reps: int = 20, launches: int = LAUNCHES, timeout_s: float = 600.0) -> dict[str, Any]:
    """:func:`measure_device` on ``nproc`` ranks in ``launches`` separate launches, each figure the
    median over them (:func:`median_figures`)."""
    from spmdc.runtime.launcher import launch

    return median_figures([launch(measure_device, nproc, (reps,), timeout_s=timeout_s)[0] for _ in range(launches)])


def median_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over ``runs`` (:func:`measure_device`'s figures from separate launches);
    a collective's α and bandwidth, a bucket member's cost, each the median of its own::

        median_figures([{"launch_us": 9.0, ...}, {"launch_us": 18.0, ...}, {"launch_us": 12.0, ...}])
        # {"launch_us": 12.0, ...}
    """
    out: dict[str, Any] = {}
    for key, first in runs[0].items():
        if key in ("collectives", "bucket_members"):
            entries: dict[tuple, list] = {}
            for run in runs:
                for kind, k, *values in run.get(key, ()):
                    entries.setdefault((kind, k), []).append(values)
            out[key] = tuple((kind, k, *(statistics.median(col) for col in zip(*vals)))
                             for (kind, k), vals in sorted(entries.items()))
        elif isinstance(first, (int, float)):
            out[key] = statistics.median(run[key] for run in runs if key in run)
        else:
            out[key] = first
    return out


def calibrated_profile(base: str, figures: dict[str, float]) -> Any:
    """The device table's ``base`` entry with the measured ``figures`` (:func:`measure_device`),
    named ``<base>-calibrated`` and no longer marked a guess."""
    import dataclasses

    from spmdc.compiler.devices import device_profile

    p = device_profile(base, {k: v for k, v in figures.items() if k not in ("collectives", "bucket_members")})
    return dataclasses.replace(p, name=f"{p.name}-calibrated", rough=False,
                               collectives=tuple(tuple(c) for c in figures.get("collectives", ())),
                               bucket_members=tuple(tuple(c) for c in figures.get("bucket_members", ())))
