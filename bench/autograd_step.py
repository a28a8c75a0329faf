"""Steady-state training step: ``cm(x)`` + your loss + ``loss.backward()`` vs ``cm.step`` vs FSDP2.

    python bench/autograd_step.py [--quick] [--iters N] [--cases mlp gpt2] [--markdown FILE]

One launch of 4 ranks (gloo, CPU, mesh dp=4, plan fsdp). Every rank runs, for each workload, four
loops over the same batches, alternating iteration by iteration so that all see the same load:

* **FSDP2**: ``fully_shard`` on every block and the root; ``loss_fn(model(x), y)``,
  ``loss.backward()``, ``AdamW.step()``, ``zero_grad()``.
* **spmdc autograd**: ``spmdc.compile(model, (x,), inputs="local")`` in place of ``fully_shard``,
  the same loop (``autograd_activations="saved"``, the default: the vjp program's forward half in
  ``cm(x)``, its backward half in ``loss.backward()``).
* **spmdc autograd, recompute**: the same with ``autograd_activations="recompute"`` (the forward
  program, then the whole vjp program: the forward recomputed + backward).
* **spmdc cm.step**: model, loss and backward in one compiled program, then the same AdamW.

Each rank passes its quarter of the batch (a DistributedSampler's piece). Time: per iteration the
slowest rank's (after a barrier), median over the measured iterations. Peak: what one step
allocates above what was live when it began (:func:`spmdc.runtime.memory.measure_peak`). The
losses of the four loops are compared after the run (they train the same model on the same data).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
WORKLOADS = ("mlp", "gpt2")   # bench/vs_torch.py's workloads of these names


def worker(workloads: list[str], iters: int, warmup: int) -> list[dict[str, Any]]:
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from vs_torch import build, torch_fsdp

    import spmdc
    from spmdc.runtime.memory import measure_peak

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = []
    try:
        for workload in workloads:
            model, ((x,), (y,)), loss_fn = build(workload)
            xl, yl = x.chunk(world)[rank], y.chunk(world)[rank]
            fsdp_model = torch_fsdp(build(workload)[0], init_device_mesh("cpu", (world,), mesh_dim_names=("dp",)))
            auto = spmdc.compile(model, (xl,), mesh="dp=4", plan="fsdp", inputs="local")
            again = spmdc.compile(build(workload)[0], (xl,), mesh="dp=4", plan="fsdp", inputs="local",
                                  autograd_activations="recompute")
            step_model, _, _ = build(workload)
            fused = spmdc.compile(step_model, (xl,), mesh="dp=4", plan="fsdp", inputs="local", train=True,
                                  loss_fn=loss_fn, loss_inputs=(yl,), optimizer=("adamw", {"lr": 1e-3}))

            def own_loop(m: Any) -> Any:
                """The user's loop: own loss on the output, loss.backward(), torch's AdamW."""
                opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

                def one() -> float:
                    loss = loss_fn(m(xl), yl)
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                    return float(loss)
                return one

            def step() -> float:
                return float(fused.step(xl, yl))

            loops = {"FSDP2": own_loop(fsdp_model), "spmdc autograd": own_loop(auto),
                     "spmdc autograd, recompute": own_loop(again), "spmdc cm.step": step}
            times: dict[str, list[float]] = {k: [] for k in loops}
            losses: dict[str, list[float]] = {k: [] for k in loops}
            for i in range(warmup + iters):
                for name, fn in loops.items():
                    dist.barrier()
                    t0 = time.perf_counter()
                    losses[name].append(fn())
                    if i >= warmup:
                        times[name].append(time.perf_counter() - t0)
            peaks = {}
            for name, fn in loops.items():
                dist.barrier()
                peaks[name] = measure_peak(fn)[1]
            every: list[Any] = [None] * world
            dist.all_gather_object(every, (times, losses, peaks))
            if rank == 0:
                out.append(dict(
                    workload=workload,
                    ms={k: 1e3 * statistics.median(max(e[0][k][i] for e in every) for i in range(iters))
                        for k in loops},
                    loss={k: sum(e[1][k][-1] for e in every) / world for k in loops},
                    peak={k: max(e[2][k] for e in every) for k in loops}))
    finally:
        dist.destroy_process_group()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="warm-up 1, 5 measured iterations")
    ap.add_argument("--iters", type=int, default=None, help="measured iterations (default 20, --quick 5)")
    ap.add_argument("--cases", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--markdown", default=None, metavar="FILE", help="also append the table to FILE (markdown)")
    args = ap.parse_args()
    iters = args.iters or (5 if args.quick else 20)
    warmup = 1 if args.quick else 3
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [BENCH_DIR, REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    sys.path.insert(0, BENCH_DIR)
    from autograd_step import worker as rank_worker  # importable by name in the spawned ranks
    from rich.console import Console
    from rich.table import Table

    from spmdc.runtime.launcher import launch

    results = launch(rank_worker, 4, (args.cases, iters, warmup), timeout_s=900)[0]
    cols = ("workload", "loop", "step ms", "/ FSDP2", "peak MB", "peak / FSDP2", "last loss (mean over ranks)")
    table = Table(title=f"Training step (AdamW) on 4 CPU ranks, fsdp dp=4, median of {iters} after {warmup} warm-up")
    for c in cols:
        table.add_column(c, justify="left" if c in ("workload", "loop") else "right")
    md = ["| " + " | ".join(cols) + " |", "|---|---|" + "---:|" * (len(cols) - 2)]
    for r in results:
        for k in r["ms"]:
            row = [r["workload"], k, f"{r['ms'][k]:.1f}", f"{r['ms'][k] / r['ms']['FSDP2']:.2f}x",
                   f"{r['peak'][k] / 2**20:.2f}", f"{r['peak'][k] / max(r['peak']['FSDP2'], 1):.2f}x",
                   f"{r['loss'][k]:.6f}"]
            table.add_row(*row)
            md.append("| " + " | ".join(row) + " |")
    Console(width=140).print(table)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(f"\n{table.title}\n\n" + "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
