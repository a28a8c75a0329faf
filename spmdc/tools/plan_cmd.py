"""``spmdc plan``: compile a job for its whole world without launching it, and predict each rank role.

    spmdc plan llama3-70b --nproc 4096 --mesh dp=512,tp=8 --plan fsdp+tp --batch 512 --optimizer adamw --device h100
    spmdc plan gpt2-tiny --mesh dp=2,tp=2 --device cpu --json plan.json

Takes ``spmdc run``'s workload, mesh, plan (presets, plan files with device groups), batch,
optimizer and compile options, resolves and checks them the same way, then compiles the global
program once and one program per rank role (:mod:`spmdc.api.dry_run`) and prints per role:
the peak memory per rank broken down (parameters, optimizer state, gradients, activations,
communication buffers) against the device's capacity, collectives per step by mesh axis and kind
with their bytes, kernel launches, and a step time from the device profile
(:mod:`spmdc.compiler.devices`, ``--device NAME``, ``--device-set FIELD=VALUE,...``).
``--json FILE`` writes the same figures for scripts. A measured run (``spmdc run``) issues exactly
the predicted collectives and bytes; docs/cli.md says how close memory and time come.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from spmdc.tools.errors import UserError

MIB = 1024 ** 2


def add_arguments(ap: argparse.ArgumentParser) -> None:
    from spmdc.compiler.devices import DEVICES
    from spmdc.compiler.options import CompileOptions, positive
    from spmdc.runtime.optimizers import OPTIMIZERS
    from spmdc.tools.run_cmd import DEFAULT_WORKLOAD
    from spmdc.tools.search_cmd import add_budget_argument

    ap.add_argument("workload", nargs="?", default=DEFAULT_WORKLOAD,
                    help="mlp | gpt2-tiny | llama-tiny | llama3-1b | llama3-8b | llama3-70b (on the meta device) | "
                         "path/to/file.py:factory | module:factory")
    ap.add_argument("--nproc", type=positive(int), default=None, help="ranks of the job (default: the mesh size, or 4)")
    ap.add_argument("--mesh", default=None, help="mesh axes, e.g. dp=512,tp=8 (default as spmdc run)")
    ap.add_argument("--plan", default="", help="preset or .json/.yaml plan file (device groups too), as spmdc run")
    ap.add_argument("--fsdp-shard", choices=("even", "whole"), default="even", help="as spmdc run")
    ap.add_argument("--batch", type=positive(int), default=None, help="the factory's 'batch' argument (global batch)")
    ap.add_argument("--train", dest="train", action="store_true", default=True, help="a training step (default)")
    ap.add_argument("--forward", dest="train", action="store_false", help="the forward only")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd", metavar="NAME",
                    help="the optimizer whose state and update are counted (default sgd, as spmdc run)")
    ap.add_argument("--device", default="h100", metavar="NAME",
                    help=f"device profile for memory capacity and step time: {', '.join(DEVICES)} (default h100)")
    ap.add_argument("--device-set", default=None, metavar="FIELD=VALUE,...",
                    help="override profile figures, e.g. inter_gbps=25,node_size=4 (fields: flops, hbm_gbps, "
                         "memory_gib, intra_gbps, inter_gbps, node_size, latency_us, launch_us)")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the predictions as JSON")
    ap.add_argument("--max-roles", type=positive(int), default=64, metavar="N",
                    help="refuse when the ranks need more than N distinct programs (uneven or ragged layouts; "
                         "default 64)")
    ap.add_argument("--search", action="store_true",
                    help="search the layouts for --nproc ranks (every mesh, or --mesh's plans only) with the "
                         "predictions; print the ranked candidates (spmdc.api.auto_plan)")
    ap.add_argument("--top", type=positive(int), default=8, metavar="K", help="--search: candidates shown (default 8)")
    ap.add_argument("--write-plan", default=None, metavar="FILE",
                    help="--search: write the chosen plan to FILE (.yaml) for spmdc run --plan FILE")
    add_budget_argument(ap)
    ap.add_argument("--jobs", type=positive(int), default=None, metavar="N",
                    help="a pipeline's stages compiled N at a time, each in a forked process (default: one per CPU)")
    CompileOptions.add_arguments(ap)
    ap.set_defaults(opt_verify_each=False)   # a dry run verifies each stage's result, not every pass's
    ap.add_argument("--verbose", action="store_true", help="show Python tracebacks of errors")


def plan_main(args: argparse.Namespace) -> int:
    from spmdc.api.dry_run import dry_run
    from spmdc.compiler.devices import device_profile
    from spmdc.compiler.options import CompileOptions
    from spmdc.frontend.workloads import load_workload
    from spmdc.tools.run_cmd import RunConfig, resolve_mesh_and_plan, validate, workload_args
    from spmdc.tools.show import plain_console

    try:
        device = device_profile(args.device)
    except ValueError as e:
        raise UserError(f"--device: {e}") from None
    try:
        device = device_profile(args.device, args.device_set) if args.device_set else device
    except ValueError as e:
        raise UserError(f"--device-set: {e}") from None
    if args.json:
        import os

        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent):
            raise UserError(f"--json '{args.json}': no directory '{parent}'")
    cfg = RunConfig(args.workload, args.nproc or 0, args.mesh, args.plan, train=args.train, optimizer=args.optimizer,
                    batch=args.batch, fsdp_shard=args.fsdp_shard, search_budget=args.search_budget,
                    options=CompileOptions.from_arguments(args))
    import os
    import warnings

    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::UserWarning")
    warnings.filterwarnings("ignore", category=FutureWarning)   # torch's own notices would bury the tables
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.search or args.plan == "auto":
        from spmdc.tools.search_cmd import search_main

        if cfg.options.grad_accum > 1:
            raise UserError("--grad-accum with --search: not predicted yet (search one round with --batch set to "
                            "its share)")
        return search_main(cfg, device, args.top, args.write_plan, args.json)
    if args.write_plan:
        raise UserError("--write-plan is for --search (the chosen plan)")
    mesh, plan = resolve_mesh_and_plan(cfg)
    if cfg.options.grad_accum > 1:
        raise UserError("--grad-accum is not predicted yet (each round runs the program on its share of "
                        "the batch); predict one round with --batch set to that share")
    validate(cfg, mesh, plan)
    console = plain_console()
    t0 = time.perf_counter()
    w = load_workload(cfg.workload, **workload_args(cfg))
    built = time.perf_counter() - t0
    try:
        report = dry_run(w.model, w.inputs, mesh=mesh, plan=plan, device=device, train=cfg.train, loss_fn=w.loss_fn,
                         loss_inputs=w.loss_inputs, kwargs=w.kwargs, optimizer=cfg.optimizer if cfg.train else None,
                         options=cfg.options, max_roles=args.max_roles, jobs=args.jobs)
    except ValueError as e:
        if str(e).startswith("spmdc plan"):
            raise UserError(str(e)) from None
        raise
    report.timings = {"build": built, **report.timings, "wall": time.perf_counter() - t0}
    print_report(console, cfg, mesh, plan, device, report)
    if args.json:
        from spmdc.tools.errors import write_text

        write_text(args.json, json.dumps(as_json(cfg, mesh, plan, device, report), indent=1) + "\n")
        console.print(f"wrote {args.json}")
    return 0


def _unit(largest: float) -> tuple[str, float]:
    """The unit a memory table is written in: GiB, MiB or KiB, by its largest figure."""
    for name, size in (("GiB", 1024 ** 3), ("MiB", MIB), ("KiB", 1024)):
        if largest >= size:
            return name, size
    return "KiB", 1024


def _seconds(s: float) -> str:
    return f"{s * 1000:,.2f} ms" if s < 10 else f"{s:,.1f} s"


def print_report(console: Any, cfg: Any, mesh: Any, plan: Any, device: Any, report: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    plan_name = plan if isinstance(plan, str) else plan.name
    where = mesh if mesh is not None else f"per group ({plan.describe()})"
    console.print(Text("spmdc plan", style="bold"), f"{cfg.workload}: {report.program}, {report.world} ranks, mesh "
                  f"{where}, plan {plan_name}" + (f", optimizer {cfg.optimizer}" if cfg.train else "")
                  + (f", {cfg.mixed_precision} mixed precision" if cfg.mixed_precision else ""))
    console.print(f"device {device.describe()}")
    unit, size = _unit(max((r.prediction.memory.total for r in report.roles), default=0))

    def _mib(n: float) -> str:
        return f"{n / size:,.{2 if size > 1024 else 1}f}"

    mem = Table(title=f"peak memory per rank ({unit})")
    for col in ("role", "ranks", "parameters", "optimizer", "gradients", "activations", "comm buffers",
                "update", "peak", f"of {device.memory_gib:g} GiB"):
        mem.add_column(col, justify="right" if col not in ("role", "ranks") else "left")
    for i, role in enumerate(report.roles):
        m = role.prediction.memory
        share = m.total / (device.memory_gib * 1024 ** 3)
        mem.add_row(_name(role, i, report.roles), role.describe_ranks(), _mib(m.parameters), _mib(m.optimizer),
                    _mib(m.gradients + m.whole_gradients), _mib(m.activations), _mib(m.comm_buffers),
                    _mib(m.optimizer_step), _mib(m.total),
                    Text(f"{100 * share:.1f}%", style="red" if share > 1 else ""))
    console.print(mem)
    comm = Table(title="collectives per step (each rank of the role)")
    for col in ("role", "axes", "op", "count", "bytes", "predicted ms"):
        comm.add_column(col, justify="right" if col in ("count", "bytes", "predicted ms") else "left")
    for i, role in enumerate(report.roles):
        for r in sorted(role.prediction.comm, key=lambda r: (r.axes, r.kind)):
            comm.add_row(_name(role, i, report.roles), r.axes, r.kind, str(r.count),
                         ("≤ " if r.bound else "") + f"{r.bytes:,}", f"{r.seconds * 1000:,.3f}")
    console.print(comm)
    step = Table(title=f"predicted step time ({device.name})")
    bubbles = any(r.prediction.bubble_seconds for r in report.roles)   # (pipeline stages wait for each other)
    for col in ("role", "kernels", "collectives", "TFLOP", "HBM GB", "compute", "comm", "overlap", "update",
                *(["bubble"] if bubbles else []), "step"):
        step.add_column(col, justify="right" if col != "role" else "left")
    for i, role in enumerate(report.roles):
        p = role.prediction
        step.add_row(_name(role, i, report.roles), f"{p.kernels:,}", f"{p.collectives:,}", f"{p.flops / 1e12:,.3f}",
                     f"{p.hbm_bytes / 1e9:,.3f}", _seconds(p.compute_seconds), _seconds(p.comm_seconds),
                     "yes" if p.overlapped else "no", _seconds(p.update_seconds),
                     *([_seconds(p.bubble_seconds)] if bubbles else []),
                     _seconds(p.step_seconds))
    console.print(step)
    if any(r.bound for role in report.roles for r in role.prediction.comm):
        console.print("≤: expert moves carry the rows the routing sends, at most the slot's capacity (shown)")
    t = report.timings
    console.print(f"compiled {len(report.roles)} role program(s) for {report.world} ranks in "
                  f"{t['wall']:.1f} s (model {t.get('build', 0):.1f} s, global program {t['global']:.1f} s, "
                  f"role programs {t['roles']:.1f} s{'; stages in parallel workers' if 'stages' in t else ''}); "
                  "peak memory: static liveness of each role's program plus "
                  "its collectives' staging buffers and the optimizer update (docs/cli.md)")


def _name(role: Any, i: int, roles: list[Any] | None = None) -> str:
    """A role's label: its index, or its group (device group, pipeline stage) and its index there."""
    if role.group == "-":
        return str(i)
    j = sum(1 for r in (roles or [])[:i] if r.group == role.group)
    return f"{role.group}/{j}"


def as_json(cfg: Any, mesh: Any, plan: Any, device: Any, report: Any) -> dict[str, Any]:
    import dataclasses

    return {"workload": cfg.workload, "program": report.program, "world": report.world,
            "mesh": str(mesh) if mesh is not None else None,
            "plan": plan if isinstance(plan, str) else plan.name, "device": dataclasses.asdict(device),
            "optimizer": cfg.optimizer if cfg.train else None, "timings": report.timings,
            "roles": [{"group": r.group, "ranks": r.ranks, "compiled_rank": r.rank, "ops": r.ops,
                       "memory": {**dataclasses.asdict(r.prediction.memory), "step_peak": r.prediction.memory.step_peak,
                                  "total": r.prediction.memory.total},
                       "comm": [dataclasses.asdict(c) for c in r.prediction.comm],
                       "kernels": r.prediction.kernels, "flops": r.prediction.flops,
                       "hbm_bytes": r.prediction.hbm_bytes,
                       "compute_seconds": r.prediction.compute_seconds, "comm_seconds": r.prediction.comm_seconds,
                       "overlapped": r.prediction.overlapped, "update_seconds": r.prediction.update_seconds,
                       "bubble_seconds": r.prediction.bubble_seconds,
                       "step_seconds": r.prediction.step_seconds}
                      for r in report.roles]}
