"""Per-op cost of spmdc's eager mode against DTensor's dispatch, next to the compiled program.

    python bench/eager_overhead.py [--iters N] [--warmup N] [--layers N] [--markdown FILE]

One launch of 4 ranks (gloo, CPU, 1 thread per rank), gpt2-tiny (d_model 128, 4 heads, batch 8 x
seq 64, vocab 512) under Megatron tensor parallelism on tp=4, three sides on the same model
and seed, alternating iteration by iteration:

* ``spmdc compiled``: ``spmdc.compile(..., plan="megatron")``, the generated per-rank program;
* ``spmdc eager``: ``spmdc.eager(...)``, the same plan dispatched op by op at run time;
* ``DTensor``: ``parallelize_module`` (ColwiseParallel on q/k/v/c_fc, RowwiseParallel on
  c_proj; ``bench/vs_torch.py``'s set-up), eager PyTorch on DTensors.

A step is forward + backward (loss and every gradient, no optimizer). Ops per step: for spmdc
eager the ops of the global program it dispatches; for DTensor the aten calls on DTensors (a
TorchDispatchMode sees each call before DTensor's own dispatch). *Per op* is the step time
divided by the ops; *over compiled* is (step − compiled step) / ops: what dispatching one op
costs beyond the compiled program's work. Median over the measured iterations of the slowest
rank (after a barrier).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)


def _dtensor_ops(fn) -> int:
    """Aten calls with a DTensor argument while ``fn`` runs."""
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(isinstance(a, DTensor) for a in tree_leaves((args, kwargs or {}))):
                Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


def worker(layers: int, iters: int, warmup: int) -> dict:
    import copy

    import torch
    import torch.distributed as dist
    import vs_torch
    from torch.distributed.device_mesh import init_device_mesh

    import spmdc
    from spmdc.examples.gpt2_tiny import factory

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        torch.manual_seed(0)
        model, ((x,), (y,)), loss_fn = factory(batch=8, seq=64, vocab_size=512, block_size=64, d_model=128, n_head=4,
                                               n_layer=layers)
        model.eval()   # no dropout: the three sides compute the same thing
        kw = dict(mesh={"tp": 4}, plan="megatron", train=True, loss_fn=loss_fn, loss_inputs=(y,))
        compiled = spmdc.compile(model, (x,), **kw)
        eager = spmdc.eager(model, (x,), **kw)
        dm = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
        dt_model = vs_torch.torch_megatron(copy.deepcopy(model), dm)

        def dt_step():
            dt_model.zero_grad(set_to_none=True)
            loss_fn(dt_model(x), y).backward()

        sides = {"spmdc compiled": lambda: compiled.backward(x, y), "spmdc eager": lambda: eager.backward(x, y),
                 "DTensor": dt_step}
        times: dict[str, list[float]] = {k: [] for k in sides}
        for it in range(warmup + iters):
            for name, fn in sides.items():
                compiled.zero_grad(set_to_none=True)
                eager.zero_grad(set_to_none=True)
                dist.barrier()
                t = time.perf_counter()
                fn()
                dt = torch.tensor(time.perf_counter() - t)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)
                if it >= warmup:
                    times[name].append(float(dt))
        ops = {"spmdc compiled": None, "spmdc eager": eager.last_run.ops_run, "DTensor": _dtensor_ops(dt_step)}
        return {"times": {k: statistics.median(v) for k, v in times.items()}, "ops": ops}
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--markdown", help="append the table to this file")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    from spmdc.runtime.launcher import launch

    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    r = launch(worker, 4, (args.layers, args.iters, args.warmup), timeout_s=1800)[0]
    base = r["times"]["spmdc compiled"]
    table = Table(title=f"gpt2-tiny ({args.layers} layers, d_model 128) forward+backward, megatron tp=4, 4 gloo ranks")
    for col in ("side", "ops per step", "step ms", "µs per op", "over compiled, µs per op"):
        table.add_column(col, justify="right" if col != "side" else "left")
    rows = []
    for side, t in r["times"].items():
        n = r["ops"][side]
        per = f"{1e6 * t / n:.0f}" if n else "—"
        over = f"{1e6 * (t - base) / n:.0f}" if n else "—"
        row = (side, str(n or "—"), f"{1000 * t:.1f}", per, over)
        rows.append(row)
        table.add_row(*row)
    Console().print(table)
    e, d = r["times"]["spmdc eager"], r["times"]["DTensor"]
    ne, nd = r["ops"]["spmdc eager"], r["ops"]["DTensor"]
    print(f"per-op dispatch cost beyond the compiled program: spmdc eager {1e6 * (e - base) / ne:.0f} µs, "
          f"DTensor {1e6 * (d - base) / nd:.0f} µs (ratio {((e - base) / ne) / ((d - base) / nd):.2f})")
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("\n| side | ops per step | step ms | µs per op | over compiled, µs per op |\n"
                    "|---|---|---|---|---|\n")
            for row in rows:
                f.write("| " + " | ".join(row) + " |\n")


if __name__ == "__main__":
    main()
