"""What ``spmdc run`` prints after the ranks finish: the steps, the collectives, device groups and
pipeline stages, memory and files written, and ``--check``'s comparison with one device.

    results = launch(run_rank, nproc, (job,))        # {rank: what the rank reported}
    results = report_switches(console, results)      # the ranks that left the job dropped
    report(console, cfg, job, plan, results)         # the tables
    ok = check_against_one_device(console, cfg, plan, results[min(results)], batch_pieces(cfg, mesh, plan))

These functions print what the ranks measured (losses, step times, collective counts and bytes,
peaks); nothing here runs the model but ``--check``'s eager reference.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text


def report_switches(console: Any, results: dict[int, Any]) -> dict[int, Any]:
    """One line per ``--switch`` (seconds, bytes, ranks that left); the results of the ranks still in the job."""
    r0 = results[min(results)]
    for sw in r0.get("switched", []):
        left = sorted(r for r, res in results.items() if res.get("left") and res["switched"][-1]["step"] == sw["step"])
        console.print(f"switched to {sw['plan']} after step {sw['step']}: {sw['seconds']:.2f} s (compile "
                      f"{sw['compile']:.2f} s, transfer {1000 * sw['transfer']:.1f} ms), {sw['tensors']} tensors, "
                      f"{sw['bytes_total']:,} bytes sent by all ranks in one batched send/recv"
                      + (f"; ranks {left} left the job" if left else ""))
    results = {r: res for r, res in results.items() if not res.get("left")}
    return results


def report(console: Any, cfg: Any, job: dict[str, Any], plan: Any, results: dict[int, Any]) -> None:
    """Every table of a finished run (see the module doc)."""
    from spmdc.sharding.pipeline_plan import PipelinePlan

    r0 = results[min(results)]
    report_steps(console, cfg, r0, results)
    steps = report_collectives(console, cfg, r0)
    report_groups(console, plan, job, results, steps)
    report_expert_load(console, results, steps)
    last = job["switch"][-1]["plan"] if job["switch"] else plan
    if isinstance(last, PipelinePlan):
        report_pipeline(console, last, results, steps)
    report_memory_and_files(console, cfg, r0)


def report_steps(console: Any, cfg: Any, r0: dict[str, Any], results: dict[int, Any]) -> None:
    """Each step's loss (or output norm), the slowest rank's time, and from that rank's record
    (:mod:`spmdc.tools.run_metrics`) tokens/s or samples/s per device, TFLOP/s and MFU (when a
    peak is known); the largest peak memory of any rank (CUDA; n/a on CPU)."""
    table = Table(title="steps")
    recs = [r["metrics"] for r in results.values() if r.get("metrics")]
    unit = recs[0][0]["unit"] if recs and recs[0] and recs[0][0]["per_device"] is not None else None
    mfu = bool(recs) and any(rec["mfu"] is not None for rec in recs[0])
    cols = ["step", "loss" if cfg.train else "|output|", "step ms (slowest rank)"]
    if recs:
        cols += ([{"tps": "tokens/s per device", "sps": "samples/s per device"}[unit]] if unit else []) + \
            ["peak memory", "TFLOP/s per device"] + (["MFU"] if mfu else [])
    for col in cols:
        table.add_column(col, justify="right")
    start_step = r0.get("start_step", 0)
    for k, loss in enumerate(r0["losses"]):
        slowest = max(r["times"][k] for r in results.values())
        row = [str(start_step + k + 1), f"{loss:.6f}", f"{1000 * slowest:.1f}"]
        if recs:
            rec = max((r[k] for r in recs), key=lambda rec: rec["seconds"])   # the slowest rank's rates
            memory = [r[k]["memory"] for r in recs if r[k]["memory"] is not None]
            row += ([f"{rec['per_device']:,.0f}"] if unit else []) + \
                [f"{max(memory) / 1024 ** 3:.2f} GiB" if memory else "n/a",
                 f"{rec['tflops']:.4g}" if rec["tflops"] is not None else "n/a"]
            if mfu:
                row.append(f"{'~' if rec['rough'] else ''}{100 * rec['mfu']:.3g}%" if rec["mfu"] is not None else "n/a")
        table.add_row(*row)
    console.print(table)
    if mfu and r0.get("mfu_of"):
        console.print(f"{r0['mfu_of']}; model FLOPs: {6 if cfg.train else 2}·N per "
                      f"{'token' if unit == 'tps' else 'sample'} (N: parameters, embeddings left out)")


def report_collectives(console: Any, cfg: Any, r0: dict[str, Any]) -> int:
    """Rank 0's collectives per step (count, bytes); returns the steps they are averaged over."""
    comm = Table(title="collectives per step (rank 0)")
    for col in ("op", "count", "bytes"):
        comm.add_column(col, justify="right" if col != "op" else "left")
    steps = max(r0.get("steps_here", cfg.steps), 1)
    if r0.get("switched"):
        comm.title = "collectives per step (rank 0, on the last plan)"
    for name in sorted(r0["counts"]):
        comm.add_row(name, f"{r0['counts'][name] / steps:g}", f"{r0['bytes'].get(name, 0) / steps:,.0f}")
    comm.add_row("total", f"{sum(r0['counts'].values()) / steps:g}",
                 f"{sum(r0['bytes'].values()) / steps:,.0f}", style="bold")
    console.print(comm)
    return steps


def report_expert_load(console: Any, results: dict[int, Any], steps: int) -> None:
    """Expert parallelism: the tokens each rank's experts received per step (forward dispatches,
    all MoE layers added), and the busiest rank against the mean (1.00: balanced)."""
    loads = {r: res.get("expert_rows") or {} for r, res in sorted(results.items())}
    if not any(loads.values()):
        return
    table = Table(title="tokens per expert per step (expert parallelism, all MoE layers)")
    for col in ("rank", "experts", "tokens per expert", "tokens"):
        table.add_column(col, justify="right" if col != "tokens per expert" else "left")
    totals = {}
    for r, load in loads.items():
        if not load:
            continue
        experts = sorted(load)
        totals[r] = sum(load.values()) / steps
        table.add_row(str(r), f"{experts[0]}-{experts[-1]}", " ".join(f"{load[e] / steps:g}" for e in experts),
                      f"{totals[r]:g}")
    console.print(table)
    dropped = sum(sum((res.get("expert_dropped") or {}).values()) for res in results.values())
    if dropped:
        console.print(Text(f"dropped by the expert capacity: {dropped / steps:g} tokens per step "
                           "(their expert outputs are zero)", style="yellow"))
    mean = sum(totals.values()) / len(totals)
    if mean:
        console.print(f"load balance: busiest rank {max(totals.values()) / mean:.2f}x the mean")


def report_groups(console: Any, plan: Any, job: dict[str, Any], results: dict[int, Any], steps: int) -> None:
    """Device groups: each group's first rank's collectives per step."""
    from spmdc.sharding.device_groups import HeteroPlan

    if isinstance(plan, HeteroPlan) and not job["switch"] and all(g.ranks[0] in results for g in plan.groups):
        by_group = Table(title="collectives per step by device group (each group's first rank)")
        for col in ("group", "ranks", "mesh", "op", "count", "bytes"):
            by_group.add_column(col, justify="right" if col in ("count", "bytes") else "left")
        for g in plan.groups:
            rg = results[g.ranks[0]]
            for name in sorted(rg["counts"]):
                by_group.add_row(g.name, f"{g.ranks[0]}-{g.ranks[-1]}", str(g.mesh), name,
                                 f"{rg['counts'][name] / steps:g}", f"{rg['bytes'].get(name, 0) / steps:,.0f}")
        console.print(by_group)


def report_pipeline(console: Any, plan: Any, results: dict[int, Any], steps: int) -> None:
    """Stages, each rank's schedule as a time grid and what each rank moved and held."""
    r0 = results[min(results)]
    if r0.get("stages"):
        t = Table(title="pipeline stages")
        for col in ("stage", "ranks", "mesh", "plan", "modules", "inputs", "outputs"):
            t.add_column(col)
        for (k, mods, ins, outs), s in zip(r0["stages"], plan.stages):
            t.add_row(str(k), ",".join(map(str, s.ranks)), str(s.mesh), str(getattr(s.plan, "name", s.plan)), mods,
                      ins, outs)
        console.print(t)
    if r0.get("timeline"):
        console.print(f"schedule {plan.schedule}, {plan.microbatches} micro-batches (time units: F 1, B 2, "
                      "last stage FB 3; '.' idle):")
        console.print(r0["timeline"], markup=False, highlight=False)
    t = Table(title="per rank and step: point-to-point traffic and the activations held by the schedule")
    for col in ("rank", "stage", "sends", "bytes sent", "recvs", "peak held (B)"):
        t.add_column(col, justify="right")
    for r in sorted(results):
        res = results[r]
        c, b = res["counts"], res["bytes"]
        t.add_row(str(r), str(res.get("stage", "")), f"{c.get('send', 0) / steps:g}",
                  f"{b.get('send', 0) / steps:,.0f}",
                  f"{c.get('recv', 0) / steps:g}", f"{res.get('peak_stash', 0):,}")
    console.print(t)


def report_memory_and_files(console: Any, cfg: Any, r0: dict[str, Any]) -> None:
    """Kernels, the step's estimated and measured peak, and what was written where."""
    start_step = r0.get("start_step", 0)
    if r0.get("kernels"):
        console.print(f"kernels (target {r0['target']}): {r0['kernels']}")
    if r0.get("peak_bytes") is not None:
        note = f" with --checkpoint {cfg.options.checkpoint}" if cfg.options.checkpoint else ""
        line = (f"memory the step allocates beyond parameters and inputs (rank 0{note}): "
                f"estimated peak {r0['peak_bytes'] / 1024:,.1f} KiB (static liveness with collective buffers)")
        if r0.get("measured_peak"):
            k, peak = r0["measured_peak"]
            line += f", measured {peak / 1024:,.1f} KiB (step {start_step + k + 1}, {_measured_by()})"
        console.print(line)
        rows = r0.get("live_at_peak") or []
        if rows:   # (a CPU run: torch.profiler's memory timeline)
            shown = ", ".join(f"{op} {n}x {b / 1024:,.1f} KiB" for op, n, b in rows[:6])
            more = f", {len(rows) - 6} more ops" if len(rows) > 6 else ""
            console.print(f"  live at the measured peak, by the op that made them: {shown}{more}")
    for what, where in (("IR after every pass", cfg.dump_ir), ("generated code of every rank", cfg.dump_codegen),
                        ("rank 0's op-by-op trace of the last step", cfg.eager_trace)):
        if where:
            console.print(f"{what} written to {where}{'' if where == cfg.eager_trace else '/'}")
    if cfg.save:
        console.print(f"checkpoint of step {start_step + cfg.steps} written to {cfg.save}/")


def _measured_by() -> str:
    import torch

    return "cuda max_memory_allocated" if torch.cuda.is_available() else "torch.profiler"


def batch_pieces(cfg: Any, mesh: Any, plan: Any) -> int:
    """How many pieces the ranks split the batch into: a one-mesh plan's data-parallel axes
    (:func:`~spmdc.runtime.input_check.batch_axes`), a pipeline's replicas (every stage's dp size;
    its micro-batches are in the reference's settings already), device groups' replicas summed when
    every replica holds the same rows; 1 for other plans, and for a model whose forward draws random
    numbers (dropout): eager PyTorch run piece by piece draws other numbers than the ranks do, so its
    differences are no measure of the ranks' rounding."""
    from spmdc.frontend.workloads import load_workload
    from spmdc.tools.run_cmd import workload_args

    try:
        w = load_workload(cfg.workload, **workload_args(cfg))
        # (the first tensor input, positional or keyword: a Hugging Face model is fed input_ids=...)
        first = next(t for t in (*w.inputs, *w.kwargs.values()) if hasattr(t, "dim"))
        if not first.dim() or not first.shape[0]:
            return 1
        pieces = _replicas(mesh, plan, first.dim(), first.shape[0])
    except Exception:   # (a plan without a preset's input layouts: no split replayed)
        return 1
    if pieces <= 1 or _draws_random(w):   # (split, eager would draw other numbers: dropout masks per piece)
        return 1
    rounds = cfg.options.grad_accum * getattr(plan, "microbatches", 1)
    return pieces if first.shape[0] % (pieces * rounds) == 0 else 1


def _replicas(mesh: Any, plan: Any, ndim: int, batch: int) -> int:
    """The number of equal pieces of a batch of ``batch`` rows the ranks of ``plan`` hold (1: none)."""
    from spmdc.runtime.input_check import LocalBatches, batch_replicas
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.pipeline_plan import PipelinePlan

    if isinstance(plan, PipelinePlan):
        return LocalBatches.for_stages(plan.stages, ndim=ndim, where="--check").replicas
    if isinstance(plan, HeteroPlan):
        rows = plan.split_sizes(batch, "the batch")
        dps = [batch_replicas(g.plan, g.mesh, ndim) for g in plan.groups]
        if len({r / d for r, d in zip(rows, dps)}) != 1 or any(r % d for r, d in zip(rows, dps)):
            return 1
        return sum(dps)
    if mesh is None or not hasattr(mesh, "axis_size"):
        return 1
    ranks = batch_replicas(plan, mesh, ndim)
    per_rank = -(-batch // ranks)   # (a Shard(0) layout's pieces, as torch.chunk's: 2 rows on 4 ranks, 2 of 1)
    return -(-batch // per_rank)


def _draws_random(w: Any) -> bool:
    """Whether the workload's forward, in the modes its factory set, draws from the CPU generator."""
    import torch

    state = torch.get_rng_state()
    try:
        with torch.no_grad():
            w.model(*w.inputs, **w.kwargs)
        return not torch.equal(state, torch.get_rng_state())
    finally:
        torch.set_rng_state(state)


def _split_replay(cfg: Any, seed: int, settings: Any, before: Any, pieces: int) -> dict[str, Any] | None:
    """Eager PyTorch on one device with the batch split into the ranks' ``pieces`` (gradients summed
    piece by piece, as the ranks sum them); None for one piece or a batch the pieces do not divide."""
    import dataclasses

    from spmdc.tools.reference import eager_reference
    from spmdc.tools.run_cmd import workload_args

    if pieces <= 1:
        return None
    try:
        return eager_reference(cfg.workload, cfg.steps, cfg.train, seed,
                               dataclasses.replace(settings, grad_accum=settings.grad_accum * pieces), before,
                               workload_args=workload_args(cfg))
    except ValueError:   # (a batch the pieces do not divide evenly: not replayed)
        return None


def _judged_without_float64(console: Any, err: Exception, cfg: Any, seed: int, settings: Any, before: Any,
                            rows: list, ref: dict[str, Any], r0: dict[str, Any], rtol: float, atol: float,
                            pieces: int) -> bool:
    """The second opinion when the float64 run cannot run the model (an op without float64 kernels):
    where the ranks split the batch into ``pieces``, eager float32 with the batch split as they split
    it (their summation order) says how far rounding alone moves the values
    (:func:`spmdc.tools.reference.judge_by_float32`); elsewhere the values over tolerance stand."""
    from spmdc.tools.reference import judge_by_float32

    first = str(err).splitlines()[0] if str(err) else ""
    why = f"the float64 run that tells rounding noise from a bug cannot run this model ({type(err).__name__}: {first})"
    split = _split_replay(cfg, seed, settings, before, pieces)
    if split is None:
        console.print(Text(f"--check: {why}: the values over tolerance stand", style="yellow"))
        return False
    console.print(Text(f"--check: {why}: judged against eager float32 with the batch split in the ranks' {pieces} "
                       "pieces (their summation order) instead", style="yellow"))
    return judge_by_float32(rows, ref, split, r0, rtol, atol)


def check_against_one_device(console: Any, cfg: Any, plan: Any, r0: dict[str, Any], pieces: int = 1,
                             trail: Any = None) -> bool:
    """``--check``: the run against eager PyTorch on one device (losses, parameters), with a float64
    (or, under mixed precision, float32 and the batch split into the ranks' ``pieces``; for a model
    float64 cannot run, the batch split alone) second opinion on values over tolerance; prints the
    table. Under low precision, where the trajectories part, ``trail`` (the run's state before
    each step, :class:`spmdc.tools.step_replay.StateTrail`) lets eager replay the steps one by one."""
    from spmdc.tools.reference import NOISE_FACTOR, TrainSettings, compare, eager_reference, judge_by_float64
    from spmdc.tools.run_cmd import reference_settings, workload_args

    start_step = r0.get("start_step", 0)
    before = None
    if start_step:
        before = (start_step, TrainSettings(**r0["resumed_settings"]))
        console.print(f"--check: the reference trains steps 1-{start_step} (as saved) before the compared ones")
    seed = r0.get("resumed_seed", cfg.seed)   # a resumed run's random numbers go on from the saved run's
    settings = reference_settings(cfg, plan)
    try:
        ref = eager_reference(cfg.workload, cfg.steps, cfg.train, seed, settings, before,
                              workload_args=workload_args(cfg))
    except RuntimeError as e:   # (eager PyTorch refuses the model as set: no reference, said so)
        mp = f" under --mixed-precision {cfg.mixed_precision}" if cfg.mixed_precision else ""
        first = str(e).splitlines()[0] if str(e) else ""
        console.print(Text(f"check failed: eager PyTorch on one device cannot run this model{mp} "
                           f"({type(e).__name__}: {first}), so there is nothing to compare the run with", style="red"))
        return False
    # a resumed run whose history trained under mixed precision carries that rounding into the
    # compared steps (eager replays the history in it, in another order): judged as low precision
    low_precision = cfg.mixed_precision or (before[1].mixed_precision if before else None)
    rtol, atol = cfg.tolerances_for(low_precision is not None)
    ok, rows = compare(ref, r0, rtol, atol)
    # noise or a bug? ask a float64 run (see spmdc.tools.reference.judge_by_float64); under mixed
    # precision both sides round to bf16/fp16 on purpose and a float64 run is no arbiter
    second = not ok and cfg.train and low_precision is None
    if second:
        import torch

        try:
            ref64 = eager_reference(cfg.workload, cfg.steps, cfg.train, seed, settings, before, dtype=torch.float64,
                                    workload_args=workload_args(cfg))
        except RuntimeError as e:   # (an op without float64 kernels, e.g. grouped_mm in HF's MoE experts)
            ok = _judged_without_float64(console, e, cfg, seed, settings, before, rows, ref, r0, rtol, atol, pieces)
        else:
            ok = judge_by_float64(rows, ref, ref64, r0, atol, rtol)
            if not ok:   # eager's own rounding may sit near float64 by chance: ask another summation order
                split = _split_replay(cfg, seed, settings, before, max(pieces, 2))
                if split is not None and compare(ref, {"losses": split["losses"], "state": {}}, rtol, atol)[0]:
                    # (the same training, rounded otherwise: its losses match eager's; a loss the pieces
                    # average otherwise, e.g. over a varying count of labelled tokens, is not asked)
                    console.print(f"--check: eager float32 with the batch in {max(pieces, 2)} pieces (another "
                                  "summation order) also asked: its error against float64 counts as eager's")
                    ok = judge_by_float64(rows, ref, ref64, r0, atol, rtol, split)
    low = not ok and cfg.train and low_precision is not None
    if low:   # as close to eager low precision as eager float32 is? (spmdc.tools.reference.judge_by_float32)
        import dataclasses

        from spmdc.tools.reference import judge_by_float32

        def fp32(s: Any) -> Any:
            return dataclasses.replace(s, mixed_precision=None)
        ref32 = eager_reference(cfg.workload, cfg.steps, cfg.train, seed, fp32(settings),
                                before and (before[0], fp32(before[1])), workload_args=workload_args(cfg))
        # the ranks' rounding: each piece's low-precision gradient, summed in float32
        split = _split_replay(cfg, seed, settings, before, pieces)
        ok = judge_by_float32(rows, ref, ref32, r0, rtol, atol, split)
    mp = f", both in {cfg.mixed_precision} mixed precision" if cfg.mixed_precision else \
        (f", the resumed history in {low_precision} mixed precision" if low_precision else "")
    check = Table(title=f"--check: spmdc vs one device, eager PyTorch{mp} (rtol {rtol:g}, atol {atol:g})")
    extra_col = ("|err| vs fp64: spmdc vs eager fp32",) if second else \
        ("elements over tolerance: spmdc vs eager fp32",) if low else ()
    cols = ("value", "max |diff|", "max rel diff", *extra_col, "ok")
    for col in cols:
        check.add_column(col, justify="right" if col != "value" else "left")
    for r in rows:
        verdict = ("yes" if not r.noise else Text("noise", style="yellow")) if r.ok else Text("NO", style="red")
        check.add_row(r.name, f"{r.max_abs:.2e}", f"{r.max_rel:.2e}", *((r.noise,) if second or low else ()), verdict)
    console.print(check)
    if second and ok:
        console.print("values marked noise are over tolerance against eager float32 but as close to a float64 run "
                      f"as eager float32 itself (within {NOISE_FACTOR:g}x), or with about as few elements over "
                      "tolerance against it (within 2x + 2) none further off than eager float32's largest error "
                      f"in the run (within {NOISE_FACTOR:g}x): rounding, amplified by training")
    if low and ok:
        split_note = f" or eager {cfg.mixed_precision} with the batch in the ranks' {pieces} pieces" \
            if pieces > 1 else ""
        console.print("values marked noise have about as few elements over tolerance as eager float32" + split_note
                      + f" against eager {cfg.mixed_precision} (within 2x + 2), none over {NOISE_FACTOR:g}x their "
                      "largest difference: rounding, amplified by training (Adam: lr * sign of a near-zero gradient)")
    if low and not ok and trail is not None:   # chaos or a bug? each step from the run's own state
        from spmdc.tools.step_replay import judge_step_by_step

        console.print("--check: the run and eager part over the steps; each step replayed by eager from the run's "
                      "own state before it")
        ok = judge_step_by_step(console, cfg, seed, settings, before, r0, rtol, atol, pieces, trail)
    console.print(Text("check passed", style="green") if ok else Text("check failed: over tolerance", style="red"))
    return ok
