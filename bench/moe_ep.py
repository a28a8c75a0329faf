"""Mixture-of-experts training steps: spmdc's expert parallelism against replicated/sharded experts and FSDP2.

    python bench/moe_ep.py [--quick] [--iters N] [--warmup N] [--hidden H] [--experts E] [--seq S] [--batch B]

Workload: HuggingFace Mixtral built from a config (nothing downloaded; ``MixtralConfig`` +
``AutoModelForCausalLM.from_config``, as tests/models/hf_tiny.py does), default hidden 64,
2 layers, 8 experts, top-2, expert intermediate 128, 4 heads (2 key/value heads), vocab 128,
batch 8 x seq 16; the model computes its own causal-LM loss from ``labels``. ``--quick``:
hidden 32, intermediate 64, seq 8, 1 warm-up + 5 iterations.

One launch of 4 ranks (torch's elastic launcher, gloo, CPU, 1 thread per rank). Every rank
runs every side on the same model (same seed) and batch, alternating iteration by iteration
so that all sides see the same machine load:

* spmdc ``ep`` on mesh ep=4: each rank holds and runs E/4 experts, its tokens dispatched to
  the experts' ranks and combined back by all_to_all with run-time splits (two per MoE layer
  each way, plus the counts' all-gather; docs/expert-parallel.md), the rest replicated, batch
  split over ep;
* spmdc ``fsdp+ep`` on dp=2 x ep=2: experts split over ep, every parameter fsdp over dp (tokens
  gathered over dp before the dispatch);
* spmdc ``dp`` on dp=4 (every expert replicated, gradients all-reduced) and ``fsdp`` on dp=4;
* PyTorch eager: FSDP2 (``fully_shard``, DTensor-based) on every decoder layer and the root,
  each rank a quarter of the batch.

A step is forward + backward (loss and every gradient, no optimizer update). Time: per
iteration the slowest rank's time (after a barrier), median over the measured iterations.
Memory: the measured peak of one step beyond what was live when it began (parameters and
inputs; :func:`spmdc.runtime.memory.measure_peak`), the largest rank's; parameter bytes: what a
rank stores (spmdc: its local parameter pieces; FSDP2: its local DTensor shards). Collectives:
spmdc's ``Collectives.stats`` (all_slice is a local slice, listed apart), PyTorch's counted
with a TorchDispatchMode on c10d / _c10d_functional ops (cross-checked with CommDebugMode);
bytes are each collective's local input on one rank. Loss and every gradient (gathered to
full tensors) are compared with eager single-device PyTorch (rtol 1e-4, atol 1e-5).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
import warnings

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)

SPMDC_SIDES = [("ep", {"ep": 4}), ("fsdp+ep", {"dp": 2, "ep": 2}), ("dp", {"dp": 4}), ("fsdp", {"dp": 4})]
FSDP2 = "FSDP2"
VOCAB = 128
RTOL, ATOL = 1e-4, 1e-5


def build(size: dict):
    """``(model, input_ids)``: Mixtral from a config (seed 0), a batch of token ids (seed 1)."""
    import torch
    import transformers as T

    torch.manual_seed(0)
    cfg = T.MixtralConfig(vocab_size=VOCAB, hidden_size=size["hidden"], num_hidden_layers=size["layers"],
                          num_attention_heads=4, num_key_value_heads=2, intermediate_size=size["intermediate"],
                          num_local_experts=size["experts"], num_experts_per_tok=2, max_position_embeddings=64)
    model = T.AutoModelForCausalLM.from_config(cfg)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (size["batch"], size["seq"]), generator=g)
    return model, ids


def torch_fsdp2(model, device_mesh):
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer, mesh=device_mesh)
    fully_shard(model, mesh=device_mesh)
    return model


def param_bytes(params: list) -> tuple[int, int]:
    """``(all, stacked expert weights)`` bytes a rank stores, from ``(fqn, global shape, local tensor)``."""
    from spmdc.sharding.plan import is_expert_weight

    sizes = [(is_expert_weight(n, shape), t.numel() * t.element_size()) for n, shape, t in params]
    return sum(b for _, b in sizes), sum(b for e, b in sizes if e)


# -- the rank program -----------------------------------------------------------------------------

def worker(names: list[str], steps: list, size: dict, iters: int, warmup: int) -> list[dict] | None:
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode
    from vs_torch import TimedComm, comm_counter

    from spmdc.compiler import compile_rank
    from spmdc.runtime.collectives import Collectives
    from spmdc.runtime.executor import RankRunner
    from spmdc.runtime.memory import measure_peak

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    meshes: dict = {}

    def mesh_of(names, shape):
        if (names, shape) not in meshes:
            meshes[names, shape] = init_device_mesh("cpu", shape, mesh_dim_names=names)
        return meshes[names, shape]

    try:
        sides = []   # per side: name, step function, and what the report needs
        for name, step in zip(names, steps):
            prog = compile_rank(step, rank)
            comm = Collectives(mesh_of(tuple(step.mesh.axis_names), tuple(step.mesh.shape)))
            runner = RankRunner(prog, comm)
            args = runner.local_arguments(step.arguments)
            timing = TimedComm(comm)
            pbytes = param_bytes([(k.split(":", 1)[1], shape, a) for k, shape, a in
                                  zip(step.arg_kinds, step.arg_shapes, args) if k.startswith("param:")])

            def run(fn=prog.fn, args=args, timing=timing):
                with torch.no_grad():
                    return fn(args, timing)
            sides.append(dict(name=name, run=run, comm=comm, runner=runner, step=step, prog=prog,
                              timing=timing, param_bytes=pbytes))

        model, ids = build(size)
        model = torch_fsdp2(model, mesh_of(("dp",), (world,)))
        local_ids = ids.chunk(world)[rank]

        def torch_step():
            model.zero_grad(set_to_none=True)
            loss = model(input_ids=local_ids, labels=local_ids).loss
            loss.backward()
            return loss
        pbytes = param_bytes([(n, tuple(p.shape), p.to_local() if isinstance(p, DTensor) else p)
                              for n, p in model.named_parameters()])
        sides.append(dict(name=FSDP2, run=torch_step, param_bytes=pbytes, timing=None))

        times: dict[str, list[float]] = {s["name"]: [] for s in sides}
        comm_s: dict[str, list[float]] = {s["name"]: [] for s in sides}
        for i in range(warmup + iters):
            for s in sides:
                dist.barrier()
                if s["timing"] is not None:
                    s["timing"].seconds = 0.0
                t0 = time.perf_counter()
                s["run"]()
                dt = time.perf_counter() - t0
                if i >= warmup:
                    times[s["name"]].append(dt)
                    if s["timing"] is not None:
                        comm_s[s["name"]].append(s["timing"].seconds)

        # one more step of each side: collectives, then measured peak memory (outside the timed iterations)
        rows = {}
        for s in sides:
            row = rows[s["name"]] = dict(param_bytes=s["param_bytes"])
            dist.barrier()
            if s["name"] != FSDP2:
                s["comm"].stats.counts.clear()
                s["comm"].stats.bytes.clear()
                outs = s["run"]()
                row.update(counts=dict(s["comm"].stats.counts), bytes=dict(s["comm"].stats.bytes),
                           est_peak=s["prog"].step_peak_bytes)
                res = dict(zip(s["step"].result_kinds, s["runner"].full_results(outs)))
                row["loss"] = res["loss"].item()
                row["grads"] = {k.split(":", 1)[1]: v for k, v in res.items() if k.startswith("grad:")}
            else:
                counter = comm_counter()
                with counter:
                    loss = s["run"]().detach()
                cdm = CommDebugMode()
                with cdm:
                    s["run"]()
                dist.all_reduce(loss)   # each rank's loss is the mean over its quarter of the batch
                row.update(counts=counter.counts, bytes=counter.bytes, loss=(loss / world).item(),
                           cdm={str(k).split(".")[-1]: v for k, v in cdm.get_comm_counts().items()},
                           grads={n: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                                  for n, p in model.named_parameters()})
            dist.barrier()
            _, row["mem"] = measure_peak(s["run"])
        per_rank = [None] * world
        mine = {n: dict(t=times[n], comm=comm_s[n], mem=rows[n]["mem"], param_bytes=rows[n]["param_bytes"])
                for n in times}
        dist.all_gather_object(per_rank, mine)
        if rank != 0:
            return None
        out = []
        for name, row in rows.items():
            row = dict(row, name=name)
            row["t"] = [max(pr[name]["t"][i] for pr in per_rank) for i in range(iters)]
            row["comm_s"] = [statistics.median(pr[name]["comm"]) for pr in per_rank if pr[name]["comm"]]
            row["mem"] = max(pr[name]["mem"] for pr in per_rank)
            row["param_bytes"] = tuple(max(pr[name]["param_bytes"][i] for pr in per_rank) for i in range(2))
            out.append(row)
        return out
    finally:
        dist.destroy_process_group()


# -- report ---------------------------------------------------------------------------------------

def eager_reference(size: dict):
    """Loss and gradients of one step on one device."""
    model, ids = build(size)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


def grads_check(grads: dict, ref: dict) -> tuple[float, bool]:
    """Largest absolute difference, and whether every reference gradient is matched within tolerance."""
    import torch

    worst, ok = 0.0, set(grads) == {n for n, g in ref.items() if g is not None}
    for n, g in grads.items():
        r = ref.get(n)
        if r is None or g is None:
            ok = False
            continue
        worst = max(worst, (g - r).abs().max().item())
        ok = ok and torch.allclose(g, r, rtol=RTOL, atol=ATOL)
    return worst, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smaller model (hidden 32, intermediate 64, seq 8) and 1 warm-up + 5 iterations")
    ap.add_argument("--iters", type=int, default=None, help="measured iterations (default 20, --quick 5)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up iterations (default 3, --quick 1)")
    ap.add_argument("--hidden", type=int, default=None, help="hidden size (default 64, --quick 32)")
    ap.add_argument("--intermediate", type=int, default=None, help="expert intermediate size (default 128, "
                                                                     "--quick 64)")
    ap.add_argument("--experts", type=int, default=8, help="number of experts, a multiple of 4 (default 8)")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default 16, --quick 8)")
    ap.add_argument("--batch", type=int, default=8, help="batch, a multiple of 4 (default 8)")
    ap.add_argument("--markdown", default=None, metavar="FILE", help="also append the tables to FILE (markdown)")
    args = ap.parse_args()
    if args.experts % 4 or args.batch % 4:
        ap.error("--experts and --batch must be multiples of 4 (ep=4, dp=4)")
    q = args.quick
    iters = args.iters or (5 if q else 20)
    warmup = args.warmup if args.warmup is not None else (1 if q else 3)
    size = dict(hidden=args.hidden or (32 if q else 64), intermediate=args.intermediate or (64 if q else 128),
                experts=args.experts, layers=args.layers, seq=args.seq or (8 if q else 16), batch=args.batch)
    warnings.filterwarnings("ignore")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [BENCH_DIR, REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

    from rich.console import Console
    from rich.table import Table

    from spmdc.compiler import compile_step
    from spmdc.runtime.launcher import launch
    from spmdc.sharding.mesh import Mesh

    sys.path.insert(0, BENCH_DIR)
    from moe_ep import worker  # importable by name in the spawned ranks
    from vs_torch import fmt_counts

    console = Console(width=160)
    steps, compile_s = [], {}
    for plan, mesh in SPMDC_SIDES:
        model, ids = build(size)
        t = time.perf_counter()
        step = compile_step(model, (), mesh=Mesh(mesh), plan=plan, train=True,
                            kwargs={"input_ids": ids, "labels": ids.clone()})
        compile_s[plan] = time.perf_counter() - t
        console.print(f"[dim]compiled {plan}: {compile_s[plan]:.1f}s[/dim]")
        steps.append(step)
    t = time.perf_counter()
    results = launch(worker, 4, ([p for p, _ in SPMDC_SIDES], steps, size, iters, warmup), timeout_s=1200)[0]
    launch_s = time.perf_counter() - t

    ref_loss, ref_grads = eager_reference(size)
    meshes = dict(SPMDC_SIDES, **{FSDP2: {"dp": 4}})
    base = 1e3 * statistics.median(next(r for r in results if r["name"] == FSDP2)["t"])
    desc = (f"Mixtral hidden {size['hidden']}, {size['layers']} layers, {size['experts']} experts top-2, "
            f"intermediate {size['intermediate']}, vocab {VOCAB}, batch {size['batch']} x seq {size['seq']}")
    title = (f"forward+backward step on 4 CPU ranks (gloo), median of {iters} iterations after {warmup} warm-up "
             f"(slowest rank per iteration)")
    left = ("side", "mesh", "collectives per step", "check")
    cols1 = ("side", "mesh", "step ms", "vs FSDP2", "in comm ms", "loss", "max abs grad diff", "check")
    cols2 = ("side", "params MB/rank", "of which experts", "peak MB/rank measured", "peak MB/rank estimated",
             "collectives per step", "comm MB/step")
    tables, mds = [], []
    for cols, t in ((cols1, title), (cols2, "Memory per rank (peak beyond parameters and inputs; the largest rank) "
                                             "and collectives per step (per rank; bytes: local inputs)")):
        tab = Table(title=t)
        for c in cols:
            tab.add_column(c, justify="left" if c in left else "right")
        tables.append(tab)
        mds.append(["| " + " | ".join(cols) + " |",
                    "|" + "|".join("---" if c in left else "---:" for c in cols) + "|"])
    bad = []
    for r in results:
        ms = 1e3 * statistics.median(r["t"])
        spmdc = r["name"] != FSDP2
        counts = {k: v for k, v in r["counts"].items() if k != "comm.all_slice"}
        nbytes = sum(v for k, v in r["bytes"].items() if k != "comm.all_slice")
        n_slice = r["counts"].get("comm.all_slice", 0)
        coll = fmt_counts(counts) + (f" (+{n_slice} all_slice, no traffic)" if n_slice else "")
        if not spmdc:
            coll += " (CommDebugMode: " + (", ".join(f"{v} {k}" for k, v in sorted(r["cdm"].items())) or "none") + ")"
        gdiff, gok = grads_check(r["grads"], ref_grads)
        lok = abs(r["loss"] - ref_loss) <= ATOL + RTOL * abs(ref_loss)
        ok = lok and gok
        if not ok:
            bad.append(r["name"])
        side = ("spmdc " if spmdc else "PyTorch ") + r["name"]
        mesh = "x".join(f"{k}={v}" for k, v in meshes[r["name"]].items())
        rows = ([side, mesh, f"{ms:.1f}", f"{ms / base:.2f}x", f"{1e3 * max(r['comm_s']):.1f}" if r["comm_s"] else "-",
                 f"{r['loss']:.6f}", f"{gdiff:.1e}", "pass" if ok else "FAIL"],
                [side, f"{r['param_bytes'][0] / 1e6:.3f}", f"{r['param_bytes'][1] / 1e6:.3f}",
                 f"{r['mem'] / 1e6:.2f}",
                 f"{r['est_peak'] / 1e6:.2f}" if spmdc else "-", coll, f"{nbytes / 1e6:.3f}"])
        for tab, md, row in zip(tables, mds, rows):
            tab.add_row(*row)
            md.append("| " + " | ".join(row) + " |")
    for tab in tables:
        console.print(tab)
    console.print(f"workload: {desc}; eager one-device loss {ref_loss:.6f}")
    console.print("spmdc compile (capture + sharding, main process): "
                  + ", ".join(f"{k} {v:.1f}s" for k, v in compile_s.items()) + f"; launch + all runs {launch_s:.0f}s")
    if bad:
        console.print(f"[red]MISMATCH with one device (rtol {RTOL}, atol {ATOL}):[/red] " + ", ".join(bad))
    else:
        console.print(f"every side's loss and gradients equal eager single-device within rtol {RTOL} / atol {ATOL}")
    if args.markdown:
        cmd = "python bench/moe_ep.py " + " ".join(sys.argv[1:])
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write(f"\n## moe_ep ({datetime.date.today().isoformat()})\n\n")
            f.write(f"Command: `{cmd}`; machine: {os.cpu_count()} CPU cores ({platform.machine()}), 4 gloo ranks, "
                    f"torch {__import__('torch').__version__}. Workload: {desc}.\n\n{title}:\n\n" + "\n".join(mds[0])
                    + "\n\nMemory and collectives per rank:\n\n" + "\n".join(mds[1]) + "\n")
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
