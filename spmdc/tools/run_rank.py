"""The rank side of ``spmdc run``: compile with :func:`spmdc.compile`, train K steps, report.

Importable and picklable for torch's elastic launcher (spawn start method). Dumps
(``--dump-ir``, ``--dump-codegen``) are written here, by each rank, from the programs it
runs: the IR after every pass (the global stages by the rank that compiled them) and the
generated module it loaded.
"""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import timedelta
from typing import Any


def run_rank(job: dict[str, Any]) -> dict[str, Any]:
    """Run one rank of a ``spmdc run`` job; returns losses, step times, collectives and (rank 0) state."""
    if job["options"].target == "triton":  # before torch imports triton (see spmdc.codegen.cache.prepare_triton)
        from spmdc.codegen.cache import prepare_triton

        prepare_triton()
    import signal

    # Ctrl-C: torch's agent passes SIGINT on to the ranks; a rank unwinding from a collective
    # would be torn down with gloo's threads still running (std::terminate, a "Fatal Python
    # error" on the user's terminal). The agent reports the interruption; a rank just stops.
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))
    import torch
    import torch.distributed as dist

    from spmdc.api.entry import CompiledModule, Optimizer
    from spmdc.compiler import Dump
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.memory import by_op, measure_peak_live
    from spmdc.tools.reference import first_tensor
    from spmdc.tools.run_metrics import compile_progress, step_suffix, workload_metrics

    forward_warnings()
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                                timeout=timedelta(seconds=job["timeout"]))
    rank = dist.get_rank()
    failed = False
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    try:
        w = load_workload(job["workload"], **job.get("workload_args", {}))
        say = print if rank == 0 else (lambda *a, **k: None)
        metrics, counted = workload_metrics(w, job, dist.get_world_size())   # tokens/s, memory, MFU per step
        t0 = time.perf_counter()   # one module for every layout kind (one mesh, device groups, stages)
        with compile_progress(rank, "capturing and compiling"):
            cm = CompiledModule(w.model, tuple(w.inputs), mesh=job["mesh"], plan=job["plan"],
                                train=job["train"], loss_fn=w.loss_fn, loss_inputs=tuple(w.loss_inputs),
                                optimizer=Optimizer(job["optimizer"], lr=job["lr"]) if job["train"] else None,
                                dump=Dump(job.get("dump_ir"), job.get("dump_codegen")), example_kwargs=w.kwargs,
                                options=job["options"])
        compile_s = time.perf_counter() - t0
        if cm.pipeline is not None:
            say(f"[rank 0] compiled {cm.pipeline.n_stages} stages in {compile_s:.1f} s ({job['plan'].describe()})",
                flush=True)
            if job.get("dump_ir") and rank == 0:   # stage meshes, boundaries, every rank's schedule
                from spmdc.ir.printer import print_module

                with open(os.path.join(job["dump_ir"], "pipeline.mlir"), "w") as f:
                    f.write(print_module(cm.pipeline.schedule_module))
        else:
            where = job["mesh"] or "its group's mesh"
            say(f"[rank 0] compiled in {compile_s:.1f} s ({cm.plan_name} on {where}, target {cm.target})", flush=True)
        losses, times, records = [], [], []
        cm.comm.stats.counts.clear()
        cm.comm.stats.bytes.clear()
        cm.comm.stats.expert_rows.clear()
        cm.comm.stats.expert_dropped.clear()
        torch.manual_seed(job.get("seed", 0))   # the eager reference (--check) seeds the same way
        resumed = resume(cm, job) if job.get("load") else {}
        start_step = resumed.get("step", 0)
        measured, live_at_peak = None, []
        profiled = min(1, job["steps"] - 1)   # the second step (the first one allocates optimizer state)
        switches = {s["step"]: s for s in job.get("switch") or []}
        switched: list[dict[str, Any]] = []
        steps_here = job["steps"]   # steps run on the module whose collectives are reported
        for k in range(job["steps"]):
            if k in switches:   # --switch STEP:PLAN[:MESH]: after STEP steps, the state moves to the new plan
                sw = switches[k]
                new = cm.switch(sw["plan"], mesh=sw["mesh"])
                rep = __import__("spmdc.api.switch", fromlist=["last_report"]).last_report
                switched.append({"step": k, "plan": sw["text"], "seconds": rep.seconds, "compile": rep.compile_seconds,
                                 "transfer": rep.transfer_seconds, "bytes_total": rep.bytes_total,
                                 "messages": rep.messages, "tensors": rep.tensors, "left": new is None})
                if new is None:   # this rank is not in the new mesh: it leaves the job
                    say(f"[rank {rank}] left at step {k}")
                    return {"rank": rank, "losses": losses, "times": times, "left": True, "switched": switched}
                cm = new
                metrics.devices = sw["mesh"].size if sw["mesh"] is not None else sw["plan"].world   # rates per device
                cm.comm.stats.counts.clear()
                cm.comm.stats.bytes.clear()
                cm.comm.stats.expert_rows.clear()
                cm.comm.stats.expert_dropped.clear()
                steps_here = job["steps"] - k
                say(f"[rank 0] switched to {sw['text']} after step {start_step + k} in {rep.seconds:.2f} s "
                    f"(compile {rep.compile_seconds:.2f} s, moving {rep.bytes_total:,} bytes "
                    f"{rep.transfer_seconds * 1000:.1f} ms)", flush=True)
            if job.get("state_trail") is not None:   # --check's step-by-step opinion (spmdc.tools.step_replay)
                job["state_trail"].record(cm, k, rank)
            metrics.start()
            start = time.perf_counter()
            call = measure_peak_live if k == profiled else _plain
            if job["train"]:
                loss, peak = call(cm.step, *w.inputs, *w.loss_inputs, **w.kwargs)
                losses.append(float(loss.detach()))
            else:
                out, peak = call(cm, *w.inputs, full=True, **w.kwargs)
                losses.append(float(first_tensor(out).float().norm()))   # (as the reference reports it)
            times.append(time.perf_counter() - start)
            rec = metrics.stop(losses[-1], **counted)
            records.append(dataclasses.asdict(rec))
            if peak is not None:   # (the peak, and on a CPU what was live at it, by creating op)
                measured = (k, peak[0])
                live_at_peak = by_op(peak[1])
            what = "loss" if job["train"] else "|output|"
            say(f"[rank 0] step {start_step + k + 1}/{start_step + job['steps']}: {what} {losses[-1]:.6f}  "
                f"({1000 * times[-1]:.1f} ms){step_suffix(rec)}", flush=True)
        if cm.pipeline is not None:   # a pipeline plan (compiled so, or switched to)
            if job.get("save"):
                save_checkpoint(cm, job, start_step, resumed)
            return {**_pipeline_result(cm, job, rank, losses, times, compile_s, start_step, resumed),
                    "switched": switched, "steps_here": steps_here, "metrics": records, "mfu_of": metrics.describe()}
        counts, nbytes = dict(cm.comm.stats.counts), dict(cm.comm.stats.bytes)
        if job.get("eager_trace") and rank == 0:
            with open(job["eager_trace"], "w") as f:
                f.write("\n".join(cm.eager_trace) + "\n")
        if job.get("save"):
            save_checkpoint(cm, job, start_step, resumed)
        prog = cm.programs["train" if job["train"] else "forward"]
        kernels = prog.kernel_stats.summary() if prog.kernel_stats is not None else None
        state = cm.full_state_dict() if job["check"] else None
        return {"rank": rank, "losses": losses, "times": times, "compile_s": compile_s, "counts": counts,
                "peak_bytes": None if job["options"].execution == "eager" else prog.step_peak_bytes,
                "measured_peak": measured, "live_at_peak": live_at_peak,
                "bytes": nbytes, "state": state if rank == 0 else None, "target": cm.target, "kernels": kernels,
                "start_step": start_step, "switched": switched, "steps_here": steps_here, **_resumed(resumed),
                "metrics": records, "mfu_of": metrics.describe(), "expert_rows": dict(cm.comm.stats.expert_rows),
                "expert_dropped": dict(cm.comm.stats.expert_dropped)}
    except BaseException:
        # no teardown: destroying the group would close the peers' connections before this rank's
        # error is recorded (they would be reported as the failure); the process ends anyway
        failed = True
        raise
    finally:
        from spmdc.runtime.collectives import timed_out

        # (a timed-out group's threads are stuck: the rank just exits)
        if own_group and not failed and not timed_out():
            dist.destroy_process_group()


def forward_warnings() -> None:
    """Print spmdc's own warnings (a sharding fallback, a checkpoint's other optimizer settings) on
    the terminal, once each, as ``[rank r] warning: ...``: a rank's stderr goes to the launch log, and
    ``spmdc run`` silences torch's UserWarnings. A warning every rank gives alike (``every_rank``) is
    printed by rank 0 only."""
    import warnings

    rank = int(os.environ.get("RANK", "0"))
    shown: set[str] = set()
    original = warnings.showwarning

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if not category.__module__.startswith("spmdc."):
            original(message, category, filename, lineno, file, line)
            return
        text = str(message)
        if text not in shown and (rank == 0 or not getattr(category, "every_rank", False)):
            shown.add(text)
            print(f"[rank {rank}] warning: {text}", flush=True)

    warnings.showwarning = show
    warnings.filterwarnings("default", module=r"spmdc(\.|$)")   # before the inherited "ignore::UserWarning"


def _pipeline_result(pm: Any, job: dict[str, Any], rank: int, losses: list[float], times: list[float],
                     compile_s: float, start_step: int = 0, resumed: dict[str, Any] | None = None) -> dict[str, Any]:
    state = pm.full_state_dict() if job["check"] else None
    ex = pm.pipeline
    return {"rank": rank, "losses": losses, "times": times, "compile_s": compile_s,
            "counts": dict(pm.comm.stats.counts), "bytes": dict(pm.comm.stats.bytes),
            "peak_bytes": None, "measured_peak": None,
            "state": state if rank == 0 else None, "target": pm.target, "kernels": None, "start_step": start_step,
            "stage": ex.stage, "schedule_ir": ex.schedule_ir, "timeline": ex.timeline() if rank == 0 else None,
            "peak_stash": ex.peak_stash_bytes, "stages": ex.split.table() if rank == 0 else None,
            **_resumed(resumed or {})}


def _plain(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, None]:
    return fn(*args, **kwargs), None


def save_checkpoint(module: Any, job: dict[str, Any], start_step: int, resumed: dict[str, Any]) -> None:
    """``--save``: the state of ``module`` (any layout kind) after the run's steps, with what a
    resumed run goes on from (the step count, the seed of the first run, the settings it trained
    with) and the workload it belongs to."""
    module.save(job["save"], extra={"step": start_step + job["steps"], "workload": job["workload"],
                                    "seed": resumed.get("seed", job.get("seed", 0)), "settings": job["settings"]})


def _resumed(resumed: dict[str, Any]) -> dict[str, Any]:
    """What a run resumed by ``--load`` reports for ``--check``: the saved settings and seed."""
    return {"resumed_settings": resumed["settings"], "resumed_seed": resumed["seed"]} if resumed else {}


def resume(cm: Any, job: dict[str, Any]) -> dict[str, Any]:
    """``--load``: the checkpoint into ``cm`` (a compiled or pipeline module, resharded to its
    layout); the saved step, seed and settings. The learning rate of ``--lr`` wins over the saved one."""
    extra = cm.load(job["load"])   # workload and optimizer were checked before the ranks started
    for group in cm.optimizer.param_groups:
        group["lr"] = job["lr"]
    return {"step": int(extra.get("step", 0)), "seed": extra.get("seed", job.get("seed", 0)),
            "settings": extra.get("settings", job["settings"])}
