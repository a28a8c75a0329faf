"""Compile time and memory at real size: Llama-3 8B for 512 ranks and 70B for 4096 ranks (issue 29).

    python bench/compile_scale.py [--quick] [--configs 8b 70b] [--markdown FILE]

Each configuration runs in its own process (its peak RSS is its own) and does what ``spmdc plan``
does: build HuggingFace ``LlamaForCausalLM`` at the size's shapes on the meta device, capture the
training step (torch.export + decompositions, torch-mlir import, translation), run the global
passes for the mesh and plan, then partition one program per rank role and predict it
(:mod:`spmdc.api.dry_run`). The table gives seconds per stage, the number of role programs
(the ranks they stand for), ops, the process's peak RSS, and the predicted peak memory per rank
and step time on an H100 profile (for orientation, not measured).

The ``-pp4`` configurations add a pipeline axis: 4 stages (1F1B, 4 micro-batches), each stage's
programs compiled for its ``dp x tp`` mesh (:mod:`spmdc.api.dry_run_pipeline`); their roles are
per stage. Each stage's programs are built from traces of the stage cut to 4 and 5 of its blocks
(:mod:`spmdc.frontend.stage_blocks`), and the stages are compiled and predicted in forked workers,
one per CPU (``spmdc plan --jobs``): their capture, passes and role columns are seconds summed over
the stages (more than the wall time they took), the peak RSS is the largest process's.

``--quick``: 8B at 4 layers and 70B at 4 layers (~1 min), to see the pipeline work end to end
(repeated blocks are built from a 3-layer trace from 8 layers on, so the quick run traces whole).
The goal of issue 29 is 70B for 4096 ranks in under 60 s end to end and 8 GiB.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIGS = {   # size, mesh, plan, global batch (one sequence per dp rank)
    "8b": ("8b", "dp=64,tp=8", "fsdp+tp", 64),
    "70b": ("70b", "dp=512,tp=8", "fsdp+tp", 512),
    # pipelines: 4 stages (1F1B, 4 micro-batches), each on a dp x tp mesh
    "8b-pp4": ("8b", "pp=4,dp=16,tp=8", "fsdp+tp", 64),
    "70b-pp4": ("70b", "pp=4,dp=128,tp=8", "fsdp+tp", 512),
}


def one(name: str, layers: int | None) -> dict:
    """One configuration in this process: stage seconds, roles, ops, predictions."""
    import warnings

    warnings.filterwarnings("ignore")
    from spmdc.api.dry_run import dry_run
    from spmdc.compiler.devices import device_profile
    from spmdc.examples.llama3 import build
    from spmdc.sharding.mesh import Mesh
    from spmdc.sharding.pipeline_plan import split_pp_axis

    size, mesh, plan, batch = CONFIGS[name]
    t = time.perf_counter()
    model, kwargs, _ = build(size, batch=batch, layers=layers)
    built = time.perf_counter() - t
    job_mesh, job_plan = split_pp_axis(Mesh.parse(mesh), plan)   # a pp axis: stages (None, PipelinePlan)
    report = dry_run(model, (), mesh=job_mesh, plan=job_plan, device=device_profile("h100"), train=True,
                     kwargs=kwargs, optimizer="adamw")
    role = max(report.roles, key=lambda r: r.prediction.memory.total)
    return {"config": name, "layers": layers or model.config.num_hidden_layers, "mesh": mesh, "plan": plan,
            "ranks": report.world, "build": built, "global": report.timings["global"],
            "capture": report.timings["capture"], "export": report.timings["export"],
            "roles_s": report.timings["roles"],
            "roles": len(report.roles), "ops": role.ops, "peak_gib": role.prediction.memory.total / 1024 ** 3,
            "step_ms": role.prediction.step_seconds * 1000,
            # (a pipeline's stages are compiled in forked workers: the largest process's peak)
            "rss_gib": max(resource.getrusage(who).ru_maxrss
                           for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024 ** 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--layers", type=int, default=None, help="override the depth (all configurations)")
    ap.add_argument("--quick", action="store_true", help="4 layers each")
    ap.add_argument("--markdown", default=None, metavar="FILE", help="append the table to FILE")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    layers = 4 if args.quick else args.layers
    if args.one:
        print("RESULT " + json.dumps(one(args.one, layers)), flush=True)
        return
    rows = []
    for name in args.configs:
        cmd = [sys.executable, os.path.abspath(__file__), "--one", name] + (["--layers", str(layers)] if layers else [])
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.stderr.write(out.stdout[-2000:] + out.stderr[-4000:])
            raise SystemExit(f"configuration {name} failed (exit {out.returncode})")
        rows.append({**json.loads(line[7:]), "wall": wall})
    from rich.console import Console
    from rich.table import Table

    cols = ["model", "layers", "mesh (ranks)", "plan", "build model s", "capture s", "of which torch.export s",
            "global passes s",
            "role programs s", "roles", "ops per program", "end to end s", "peak RSS GiB",
            "predicted peak / rank GiB", "predicted step ms (h100)"]
    table = Table(title="compile_scale: Llama-3 training step on the meta device, dry run (spmdc plan)")
    for c in cols:
        table.add_column(c, justify="right")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [f"llama3-{r['config'].split('-')[0]}", str(r["layers"]), f"{r['mesh']} ({r['ranks']})", r["plan"],
                 f"{r['build']:.1f}", f"{r['capture']:.1f}", f"{r['export']:.1f}", f"{r['global'] - r['capture']:.1f}",
                 f"{r['roles_s']:.1f}", str(r["roles"]), f"{r['ops']:,}",
                 f"{r['wall']:.1f}", f"{r['rss_gib']:.2f}", f"{r['peak_gib']:.2f}", f"{r['step_ms']:.0f}"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    Console(width=240).print(table)
    goal = next((r for r in rows if r["config"] == "70b" and r["layers"] == 80), None)
    if goal is not None:
        print(f"70B for 4096 ranks: {goal['wall']:.1f} s end to end (goal < 60 s), peak RSS {goal['rss_gib']:.2f} GiB "
              "(goal < 8 GiB)")
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(f"\n## compile_scale ({datetime.date.today()})\n\nCommand: `python bench/compile_scale.py "
                    f"{' '.join(sys.argv[1:])}` on {platform.machine()}, {os.cpu_count()} CPUs.\n\n"
                    + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
