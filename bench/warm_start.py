"""Warm starts: time to the first training step, cold and with the compile cache warm, next to FSDP2.

    python bench/warm_start.py [--workloads mlp gpt2] [--repeat 2] [--markdown bench/RESULTS.md]

Each repetition makes a fresh ``SPMDC_CACHE_DIR`` and runs three launches of 4 gloo ranks (CPU,
one thread per rank) per workload on it (every row: a fresh process's first model):

1. *cold*: empty cache: ``spmdc.compile`` captures, runs every pass and generates code;
2. *codegen warm*: ``compile_cache=False``: capture and the passes again, the generated code from
   the codegen cache (what a second run got before the compile cache);
3. *warm*: the compile cache (``$SPMDC_CACHE_DIR/steps``) gives the global programs and every
   rank's program; each rank parses its program and loads its generated code.

In every launch each rank first builds FSDP2 on the same model (``fully_shard`` on every block
and the root, then one forward + backward + SGD step), then spmdc (``spmdc.compile`` of the
``fsdp`` plan on ``dp=4`` with an SGD optimizer, then one ``cm.step``), then spmdc in the user's
own loop (``spmdc.compile(..., inputs="local")`` of a copy of the model, then one
``loss_fn(cm(x), y).backward()`` + torch SGD step: the forward program and the vjp program). Times are the slowest
rank's, between barriers; a launch's process start and imports (torch.export, dynamo, DTensor,
FSDP, spmdc's modules and dialects: imported before the first timing; the machine's
``PYTHONDONTWRITEBYTECODE=1`` makes every import compile its source) are not counted; each row
is the fastest repetition's.
The first steps' losses are checked equal across the three launches (the cache must not change
a number) and against FSDP2's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
WORKLOADS = {"mlp": ("mlp", {}), "gpt2": ("gpt2_tiny", {"batch": 8})}   # spmdc.examples (batch 8: 2 rows a rank)
MODES = ("cold", "codegen warm", "warm")


def _slowest(seconds: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def worker(workloads: list[str], mode: str) -> list[dict[str, Any]]:
    import copy
    import importlib

    import torch
    import torch.distributed as dist

    import spmdc
    from spmdc.compiler import compile_cache

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    rank, out = dist.get_rank(), []
    # imports are not counted (both sides pay them once per process, warm or cold)
    import torch._dynamo  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor  # noqa: F401
    import torch.export  # noqa: F401

    import spmdc.api.compiled_module  # noqa: F401
    import spmdc.api.entry  # noqa: F401
    import spmdc.compiler.driver  # noqa: F401
    import spmdc.frontend.capture  # noqa: F401
    import spmdc.ir.serialize  # noqa: F401
    import spmdc.runtime.input_check  # noqa: F401
    from spmdc.ir.registry import all_dialects

    all_dialects()   # every dialect's ops (what a cached program's classes are)
    try:
        for name in workloads:
            module, kw = WORKLOADS[name]
            model, ((x,), (y,)), loss_fn = importlib.import_module(f"spmdc.examples.{module}").factory(**kw)
            row: dict[str, Any] = {"workload": name, "mode": mode}

            # FSDP2: fully_shard on every block and the root, then one forward + backward + step
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            ref = copy.deepcopy(model)
            dist.barrier()
            t = time.perf_counter()
            dm = init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
            for block in (list(ref.h) if hasattr(ref, "h") else list(ref.children())):
                fully_shard(block, mesh=dm)
            fully_shard(ref, mesh=dm)
            opt = torch.optim.SGD(ref.parameters(), lr=0.1)
            rows = x.shape[0] // 4
            piece = slice(rank * rows, (rank + 1) * rows)
            loss = loss_fn(ref(x[piece]), y[piece])
            loss.backward()
            opt.step()
            row["fsdp2_first_step"] = _slowest(time.perf_counter() - t)
            total = loss.detach().clone()
            dist.all_reduce(total)
            row["fsdp2_loss"] = float(total) / 4

            fresh = copy.deepcopy(model)   # (for the autograd loop below)
            # spmdc: compile (the programs of the training module), then its first step
            compile_cache.stats.reset()
            dist.barrier()
            t = time.perf_counter()
            cm = spmdc.compile(model, ((x,), (y,)), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=loss_fn,
                               optimizer=("sgd", {"lr": 0.1}), compile_cache=mode != "codegen warm")
            row["spmdc_compile"] = _slowest(time.perf_counter() - t)
            t = time.perf_counter()
            loss = cm.step(x, y)
            row["spmdc_first_step"] = _slowest(time.perf_counter() - t)
            row["spmdc_loss"] = float(loss)
            st = compile_cache.stats
            counts = torch.tensor([st.hits, st.misses, st.rank_hits, st.rank_misses])
            dist.all_reduce(counts)
            row["hits"], row["misses"], row["rank_hits"], row["rank_misses"] = (int(c) for c in counts)

            # spmdc in the FSDP2-style loop: compile the module (its forward program), then cm(x) + the loss
            # + loss.backward() (the vjp program, compiled or loaded at the first call) + torch's SGD
            dist.barrier()
            t = time.perf_counter()
            am = spmdc.compile(fresh, (x[piece],), mesh={"dp": 4}, plan="fsdp", inputs="local",
                               compile_cache=mode != "codegen warm")
            aopt = torch.optim.SGD(am.parameters(), lr=0.1)
            row["auto_compile"] = _slowest(time.perf_counter() - t)
            t = time.perf_counter()
            loss = loss_fn(am(x[piece]), y[piece])
            loss.backward()
            aopt.step()
            row["auto_first_step"] = _slowest(time.perf_counter() - t)
            total = loss.detach().clone()
            dist.all_reduce(total)
            row["auto_loss"] = float(total) / 4
            out.append(row)
    finally:
        dist.destroy_process_group()
    return out


def _total(row: dict[str, Any]) -> float:
    return row["spmdc_compile"] + row["spmdc_first_step"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=2, help="repetitions (each: a fresh cache, three launches); "
                                                          "the fastest of each row is shown (default 2)")
    ap.add_argument("--markdown", default=None, metavar="FILE", help="also append the table to FILE (markdown)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [BENCH_DIR, REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

    from rich.console import Console
    from rich.table import Table

    from spmdc.runtime.launcher import launch

    sys.path.insert(0, BENCH_DIR)
    from warm_start import worker as rank_worker  # importable by name in the spawned ranks

    console = Console(width=160)
    saved = os.environ.get("SPMDC_CACHE_DIR")
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        for rep in range(args.repeat):   # each repetition: a fresh cache, then the three launches
            cache = tempfile.mkdtemp(prefix="spmdc-warm-start-")
            os.environ["SPMDC_CACHE_DIR"] = cache   # the ranks inherit it
            try:
                for mode in MODES:
                    for w in args.workloads:   # one launch each: every row is a fresh process's first model
                        t = time.perf_counter()
                        r = launch(rank_worker, 4, ([w], mode), timeout_s=900)[0][0]
                        best = rows.get((w, mode))
                        if best is None or _total(r) < _total(best):
                            rows[(w, mode)] = r
                        console.print(f"[dim]repetition {rep + 1}, {w} {mode}: {time.perf_counter() - t:.1f}s wall "
                                      "(with process start)[/dim]")
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    finally:
        if saved is None:
            os.environ.pop("SPMDC_CACHE_DIR", None)
        else:
            os.environ["SPMDC_CACHE_DIR"] = saved

    cols = ("workload", "launch", "spmdc compile s", "spmdc first step s", "spmdc total s", "global hits / misses",
            "rank hits / misses", "autograd total s (compile + first step)",
            "FSDP2 first step s", "spmdc loss", "autograd loss", "FSDP2 loss")
    table = Table(title="Time to first training step, fsdp on dp=4, 4 CPU ranks (gloo), slowest rank")
    for c in cols:
        table.add_column(c, justify="left" if c in ("workload", "launch") else "right")
    md = ["| " + " | ".join(cols) + " |", "|---|---|" + "---:|" * (len(cols) - 2)]
    bad = []
    for w in args.workloads:
        for mode in MODES:
            r = rows[(w, mode)]
            total = _total(r)
            cells = [w, mode, f"{r['spmdc_compile']:.2f}", f"{r['spmdc_first_step']:.3f}", f"{total:.2f}",
                     f"{r['hits']} / {r['misses']}", f"{r['rank_hits']} / {r['rank_misses']}",
                     f"{r['auto_compile'] + r['auto_first_step']:.2f} ({r['auto_compile']:.2f} + "
                     f"{r['auto_first_step']:.2f})",
                     f"{r['fsdp2_first_step']:.2f}", f"{r['spmdc_loss']:.6f}", f"{r['auto_loss']:.6f}",
                     f"{r['fsdp2_loss']:.6f}"]
            table.add_row(*cells)
            md.append("| " + " | ".join(cells) + " |")
            if r["spmdc_loss"] != rows[(w, "cold")]["spmdc_loss"]:
                bad.append(f"{w} {mode}: first loss {r['spmdc_loss']} differs from the cold launch's")
            if abs(r["spmdc_loss"] - r["fsdp2_loss"]) > 1e-4 * abs(r["fsdp2_loss"]) + 1e-5:
                bad.append(f"{w} {mode}: spmdc loss {r['spmdc_loss']} vs FSDP2 {r['fsdp2_loss']}")
            if r["auto_loss"] != rows[(w, "cold")]["auto_loss"] or \
                    abs(r["auto_loss"] - r["fsdp2_loss"]) > 1e-4 * abs(r["fsdp2_loss"]) + 1e-5:
                bad.append(f"{w} {mode}: autograd loss {r['auto_loss']} (cold {rows[(w, 'cold')]['auto_loss']}, "
                           f"FSDP2 {r['fsdp2_loss']})")
        cold, warm = rows[(w, "cold")], rows[(w, "warm")]
        speed = _total(cold) / _total(warm)
        console.print(f"{w}: warm start {speed:.1f}x faster than cold to the first step")
    console.print(table)
    for b in bad:
        console.print(f"[red]{b}[/red]")
    if args.markdown:
        with open(args.markdown, "a") as f:
            import torch

            f.write(f"\n## warm_start ({datetime.date.today()})\n\n"
                    f"Command: `python bench/warm_start.py --repeat {args.repeat} --markdown {args.markdown}`; "
                    f"machine: {os.cpu_count()} CPU cores ({platform.machine()}), 4 gloo ranks, "
                    f"torch {torch.__version__}.\n\n"
                    "Time to the first training step, fsdp on dp=4. Per workload and repetition, three launches "
                    "share one fresh `SPMDC_CACHE_DIR`: *cold* (empty), *codegen warm* (`compile_cache=False`: "
                    "capture and passes again, generated code cached), *warm* (the compile cache's global and "
                    "per-rank programs). spmdc: `spmdc.compile` + first `cm.step`; autograd: `spmdc.compile` "
                    "(inputs='local') + first `loss_fn(cm(x), y).backward()` + torch SGD step (the forward and "
                    "vjp programs); FSDP2 (same launch, before spmdc): `fully_shard` + first forward/backward/SGD "
                    "step. Slowest of 4 ranks, fastest of "
                    f"{args.repeat} repetitions; imports and process start not counted.\n\n" + "\n".join(md) + "\n")
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
