"""spmdc against PyTorch's own eager tools: step time, collectives and bytes per training step.

    python bench/vs_torch.py [--quick] [--iters N] [--warmup N] [--cases mlp:megatron gpt2:fsdp gpt2:fsdp:bf16 ...]

One launch of 4 ranks (torch's elastic launcher, gloo, CPU). Every rank runs, for each case,
both sides on the same workload, mesh and plan, alternating iteration by iteration so that
both see the same machine load:

* ``megatron`` (mesh tp=4): spmdc's ``megatron`` preset vs DTensor tensor parallelism,
  ``parallelize_module`` with ``ColwiseParallel`` on q/k/v/c_fc/fc1 and ``RowwiseParallel``
  on c_proj/fc2 (the linears the preset shards); everything else replicated.
* ``fsdp`` (mesh dp=4): spmdc's ``fsdp`` preset vs FSDP2, ``fully_shard`` on every block
  (for the MLP: every linear) plus the root; the batch is split over the 4 ranks. A third
  field ``:bf16`` runs both in mixed precision: spmdc's ``mixed_precision="bf16"`` against
  FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``.

Memory: spmdc's static estimate of the step's peak (beyond parameters and inputs: the liveness walk
with each collective's staging buffers while it runs, ``CompiledProgram.step_peak_bytes``), and the
measured peak of one step on each side (:func:`spmdc.runtime.memory.measure_peak`: what the
step allocates above what was live when it began, from torch.profiler's memory events), rank 0's,
the lower of three alternating measurements per side (when gloo's worker threads allocate their
transfer buffers moves single measurements by ~10 %). Neither side holds the previous step's
gradients when its measured step begins (PyTorch's ``zero_grad(set_to_none=True)`` would free them
inside the step and hide as many bytes of its new ones).

A step is forward + backward (loss and every gradient; no optimizer update) — exactly what
spmdc's compiled training step computes. Time: per iteration the slowest rank's time (after a
barrier), median over the measured iterations. Collectives per step: spmdc counts what its
generated program issues (``Collectives.stats``: all_slice is a local slice, not
communication, and is listed apart); PyTorch is counted with a TorchDispatchMode that sees
every ``c10d`` and ``_c10d_functional`` op (the ops CommDebugMode also counts; the
counts are cross-checked against ``torch.distributed.tensor.debug.CommDebugMode``). Bytes:
the bytes of each collective's local input tensor(s) on one rank (the same measure on both
sides). Losses and gradients are compared with eager single-device PyTorch.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)

WORKLOADS = {
    # name: (example module, factory kwargs)
    "mlp": ("mlp", dict(batch=64, d_in=256, d_hidden=1024, d_out=256)),
    "gpt2": ("gpt2_tiny", dict(batch=8, seq=64, vocab_size=512, block_size=64, d_model=128, n_head=4, n_layer=4)),
    "gpt2-12": ("gpt2_tiny", dict(batch=8, seq=64, vocab_size=512, block_size=64, d_model=128, n_head=4,
                                  n_layer=12)),
    # HuggingFace's LlamaForCausalLM at its defaults but small widths; its own causal-LM loss
    "hf-llama": ("hf_llama", dict(batch=8, seq=64, vocab_size=512, hidden_size=128, intermediate_size=256,
                                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)),
}
MESHES = {"megatron": {"tp": 4}, "fsdp": {"dp": 4}}
COLUMN = ("q_proj", "k_proj", "v_proj", "c_fc", "fc1")
ROW = ("c_proj", "fc2")


def build(workload: str):
    import importlib

    mod, kw = WORKLOADS[workload]
    if mod == "hf_llama":
        return hf_llama(**kw)
    return importlib.import_module(f"spmdc.examples.{mod}").factory(**kw)


def hf_llama(batch: int, seq: int, **config):
    """``(model, ((ids,), (ids,)), loss_fn)``: the HF model's logits and the model's own loss
    function (``ForCausalLMLoss``: labels shifted inside, mean over tokens)."""
    import torch
    import transformers as T

    class Logits(torch.nn.Module):
        """The HuggingFace causal LM called on token ids, returning its logits (the model unchanged)."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids).logits

    torch.manual_seed(0)
    hf = T.LlamaForCausalLM(T.LlamaConfig(**config))
    ids = torch.randint(0, config["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
    model = Logits(hf)

    def loss_fn(logits, labels):
        return hf.loss_function(logits=logits, labels=labels, vocab_size=config["vocab_size"])
    return model, ((ids,), (ids,)), loss_fn


# -- PyTorch side ---------------------------------------------------------------------------------

def _tp_attention_forward(self, x):
    """gpt2_tiny's attention with head counts taken from the local q/k/v (as torchtitan does):
    under ColwiseParallel a rank holds n_head / tp heads. Same arithmetic as the original."""
    import torch.nn.functional as F

    b, t, _ = x.shape
    q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
    hd = self.head_dim
    q = q.view(b, t, -1, hd).transpose(1, 2)
    k = k.view(b, t, -1, hd).transpose(1, 2)
    v = v.view(b, t, -1, hd).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    att = att.masked_fill(~self.causal_mask[:, :, :t, :t], float("-inf"))
    att = F.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(b, t, -1)
    return self.c_proj(y)


def torch_megatron(model, device_mesh):
    import types

    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {}
    for name, m in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in COLUMN:
            plan[name] = ColwiseParallel()
        elif leaf in ROW:
            plan[name] = RowwiseParallel()
        if hasattr(m, "q_proj") and hasattr(m, "n_head"):
            m.head_dim = m.q_proj.out_features // m.n_head
            m.forward = types.MethodType(_tp_attention_forward, m)
    parallelize_module(model, device_mesh, plan)
    return model


def torch_fsdp(model, device_mesh, precision=None):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if precision else None
    kw = {"mp_policy": mp} if mp else {}
    if hasattr(model, "h"):
        blocks = list(model.h)
    elif hasattr(model, "m"):   # a HuggingFace model: its decoder layers
        blocks = list(model.m.model.layers)
    else:
        blocks = list(model.children())
    for b in blocks:
        fully_shard(b, mesh=device_mesh, **kw)
    fully_shard(model, mesh=device_mesh, **kw)
    return model


def comm_counter():
    """A TorchDispatchMode counting c10d / functional collectives and their input bytes."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    skip = ("wait", "barrier", "monitored_barrier", "_wrap_tensor_autograd")  # not collectives

    class CommCounter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts: dict[str, int] = {}
            self.bytes: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func._schema.name
            ns, _, op = name.partition("::")
            if ns in ("c10d", "_c10d_functional") and not op.startswith(skip):
                n = 0
                schema_args = func._schema.arguments
                values = dict(zip([a.name for a in schema_args], args))
                values.update(kwargs)
                key = next((k for k in ("input", "inputs", "input_tensor", "input_tensors", "tensors", "self")
                            if k in values), None)
                v = values.get(key)
                for t in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(t, (list, tuple)):
                        n += sum(x.numel() * x.element_size() for x in t if isinstance(x, torch.Tensor))
                    elif isinstance(t, torch.Tensor):
                        n += t.numel() * t.element_size()
                self.counts[op] = self.counts.get(op, 0) + 1
                self.bytes[op] = self.bytes.get(op, 0) + n
            return func(*args, **kwargs)

    return CommCounter()


# -- the rank program -----------------------------------------------------------------------------

def worker(cases: list[dict], iters: int, warmup: int) -> list[dict]:
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode

    from spmdc.compiler import compile_rank
    from spmdc.runtime.collectives import Collectives
    from spmdc.runtime.executor import RankRunner
    from spmdc.runtime.memory import measure_peak

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = []
    try:
        for case in cases:
            step, workload, plan = case["step"], case["workload"], case["plan"]
            names = step.mesh.axis_names
            dmesh = init_device_mesh("cpu", step.mesh.shape, mesh_dim_names=names)

            # spmdc: this rank's program, generated code, local argument pieces (set-up not timed)
            t = time.perf_counter()
            prog = compile_rank(step, rank)
            fn = prog.fn
            setup_spmdc = time.perf_counter() - t
            comm = Collectives(dmesh)
            runner = RankRunner(prog, comm)
            args = runner.local_arguments(step.arguments)

            timing = TimedComm(comm)

            def spmdc_step():
                with torch.no_grad():
                    return fn(args, timing)

            # PyTorch: the same model (same seed), parallelized by PyTorch's own tools
            model, ((x,), (y,)), loss_fn = build(workload)
            t = time.perf_counter()
            if plan == "megatron":
                model = torch_megatron(model, dmesh)
                xl, yl = x, y
            else:
                model = torch_fsdp(model, dmesh, case.get("precision"))
                xl, yl = x.chunk(world)[rank], y.chunk(world)[rank]
            setup_torch = time.perf_counter() - t

            def torch_step():
                model.zero_grad(set_to_none=True)
                loss = loss_fn(model(xl), yl)
                loss.backward()
                return loss

            t_spmdc, t_torch, t_comm = [], [], []
            for i in range(warmup + iters):
                for f, acc in ((spmdc_step, t_spmdc), (torch_step, t_torch)):
                    dist.barrier()
                    timing.seconds = 0.0
                    t0 = time.perf_counter()
                    f()
                    dt = time.perf_counter() - t0
                    if i >= warmup:
                        acc.append(dt)
                        if f is spmdc_step:
                            t_comm.append(timing.seconds)
            # collectives of one step on each side (counted outside the timed iterations)
            comm.stats.counts.clear()
            comm.stats.bytes.clear()
            outs = spmdc_step()
            spmdc_counts, spmdc_bytes = dict(comm.stats.counts), dict(comm.stats.bytes)
            counter = comm_counter()
            with counter:
                loss_t = torch_step()
            if workload.startswith("hf-"):   # (its module tracker breaks on layers the HF hub's kernels re-wrap)
                cdm_counts = {}
            else:
                cdm = CommDebugMode()
                with cdm:
                    torch_step()
                cdm_counts = {str(k): v for k, v in cdm.get_comm_counts().items()}
            # measured peak memory of one step on each side (outside the timed iterations): the lower
            # of 3 alternating measurements each (gloo's own buffers make single ones vary by ~10 %).
            # Neither side holds the previous step's gradients when it begins (PyTorch's would be
            # freed inside the step by zero_grad, hiding its new ones from the peak above the start)
            mem_spmdc = mem_torch = None
            for _ in range(3):
                model.zero_grad(set_to_none=True)
                dist.barrier()
                m = measure_peak(spmdc_step)[1]
                mem_spmdc = m if mem_spmdc is None else min(mem_spmdc, m)
                dist.barrier()
                m = measure_peak(torch_step)[1]
                mem_torch = m if mem_torch is None else min(mem_torch, m)

            # results: spmdc loss/gradients as full tensors, PyTorch's likewise
            spmdc_res = dict(zip(step.result_kinds, runner.full_results(outs)))
            loss_t = loss_t.detach()
            if plan == "fsdp":  # each rank's loss is the mean over its quarter of the batch
                dist.all_reduce(loss_t)
                loss_t = loss_t / world
            torch_grads = {}
            for n, p in model.named_parameters():
                g = p.grad
                torch_grads[n] = g.full_tensor() if isinstance(g, DTensor) else g
            times = [None] * world
            dist.all_gather_object(times, (t_spmdc, t_torch, t_comm))
            if rank == 0:
                out.append(dict(
                    workload=workload, plan=plan, mesh=dict(zip(names, step.mesh.shape)),
                    t_spmdc=[max(ts[0][i] for ts in times) for i in range(iters)],
                    t_torch=[max(ts[1][i] for ts in times) for i in range(iters)],
                    t_comm=[statistics.median(ts[2]) for ts in times],
                    spmdc_counts=spmdc_counts, spmdc_bytes=spmdc_bytes,
                    torch_counts=counter.counts, torch_bytes=counter.bytes, cdm_counts=cdm_counts,
                    spmdc_loss=spmdc_res["loss"].item(), torch_loss=loss_t.item(),
                    spmdc_grads={k.split(":", 1)[1]: v for k, v in spmdc_res.items() if k.startswith("grad:")},
                    torch_grads=torch_grads, setup_spmdc=setup_spmdc, setup_torch=setup_torch,
                    precision=case.get("precision"), est_peak=prog.step_peak_bytes, mem_spmdc=mem_spmdc,
                    mem_torch=mem_torch,
                ))
            dist.barrier()
    finally:
        dist.destroy_process_group()
    return out


class TimedComm:
    """spmdc's CountingComm plus the wall time spent inside collective calls (``seconds``)."""

    def __init__(self, comm: Any):
        from spmdc.runtime.collectives import CountingComm

        self._inner = CountingComm(comm)
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        def call(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return target(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t
        return call


# -- report ---------------------------------------------------------------------------------------

def eager_reference(workload: str, precision: str | None = None):
    """Loss and gradients of one step on one device (under the same mixed precision, if any)."""
    from spmdc.frontend.mixed_precision import MixedPrecision, call_model

    model, ((x,), (y,)), loss_fn = build(workload)
    loss = loss_fn(call_model(model, (x,), {}, MixedPrecision.parse(precision)), y)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters(remove_duplicate=False)}
    return loss.item(), grads


def fmt_counts(counts: dict[str, int], per: int = 1) -> str:
    short = {"all_gather_into_tensor": "all_gather", "_allgather_base_": "all_gather",
             "allgather_into_tensor_coalesced": "all_gather(coalesced)", "reduce_scatter_tensor": "reduce_scatter",
             "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter(coalesced)",
             "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce(coalesced)"}
    items = sorted((short.get(k.replace("comm.", ""), k.replace("comm.", "")), v) for k, v in counts.items())
    merged: dict[str, int] = {}
    for k, v in items:
        merged[k] = merged.get(k, 0) + v
    return ", ".join(f"{v // per} {k}" for k, v in merged.items()) or "none"


def max_grad_diff(grads: dict, ref: dict) -> float:
    worst = 0.0
    for n, g in grads.items():
        if g is None:
            continue
        r = ref.get(n)
        if r is None:
            return float("nan")
        worst = max(worst, (g - r).abs().max().item())
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (warm-up 1, 5 measured)")
    ap.add_argument("--iters", type=int, default=None, help="measured iterations (default 20, --quick 5)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up iterations (default 3, --quick 1)")
    ap.add_argument("--cases", nargs="+", default=["mlp:megatron", "mlp:fsdp", "gpt2:megatron", "gpt2:fsdp",
                                                   "gpt2-12:fsdp", "gpt2:fsdp:bf16"],
                    help="workload:plan[:bf16] (workloads: mlp, gpt2, gpt2-12, hf-llama; plans: megatron, fsdp)")
    ap.add_argument("--markdown", default=None, metavar="FILE", help="also append the tables to FILE (markdown)")
    ap.add_argument("--bucket", dest="bucket", action="store_true", default=True,
                    help="compile spmdc with bucket-collectives (one collective per block; the default)")
    ap.add_argument("--no-bucket", dest="bucket", action="store_false",
                    help="compile spmdc with one collective per parameter")
    ap.add_argument("--no-overlap", dest="overlap", action="store_false", default=True,
                    help="compile spmdc with synchronous collectives (no schedule-collectives)")
    args = ap.parse_args()
    iters = args.iters or (5 if args.quick else 20)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    warnings.filterwarnings("ignore")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [BENCH_DIR, REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

    from rich.console import Console
    from rich.table import Table

    from spmdc.compiler import compile_step
    from spmdc.runtime.launcher import launch
    from spmdc.sharding.mesh import Mesh

    sys.path.insert(0, BENCH_DIR)
    from vs_torch import worker  # importable by name in the spawned ranks

    console = Console(width=160)
    cases, compile_s = [], {}
    for spec in args.cases:
        workload, plan, *rest = spec.split(":")
        precision = rest[0] if rest else None
        if workload not in WORKLOADS or plan not in MESHES or precision not in (None, "bf16") or len(rest) > 1:
            ap.error(f"--cases {spec}: expected workload:plan[:bf16] with workload in {', '.join(WORKLOADS)} and "
                     f"plan in {', '.join(MESHES)}")
        if precision and plan != "fsdp":
            ap.error(f"--cases {spec}: mixed precision is compared with FSDP2's policy, so only for plan fsdp")
        model, ((x,), (y,)), loss_fn = build(workload)
        t = time.perf_counter()
        step = compile_step(model, (x,), mesh=Mesh(MESHES[plan]), plan=plan, train=True, loss_fn=loss_fn,
                            loss_inputs=(y,), bucket=args.bucket, overlap=args.overlap, mixed_precision=precision)
        compile_s[spec] = time.perf_counter() - t
        console.print(f"[dim]compiled {spec}: {compile_s[spec]:.1f}s[/dim]")
        cases.append(dict(step=step, workload=workload, plan=plan, precision=precision))
    t = time.perf_counter()
    results = launch(worker, 4, (cases, iters, warmup), timeout_s=600)[0]
    launch_s = time.perf_counter() - t

    desc = {w: ", ".join(f"{k}={v}" for k, v in kw.items()) for w, (_, kw) in WORKLOADS.items()}
    title = (f"forward+backward step on 4 CPU ranks (gloo), median of {iters} iterations after {warmup} warm-up "
             f"(slowest rank per iteration)")
    t1 = Table(title="Step time: " + title)
    for c in ("workload", "plan", "mesh", "PyTorch", "PyTorch ms", "spmdc ms", "spmdc / PyTorch", "spmdc in comm ms",
              "loss spmdc", "loss PyTorch", "loss eager", "max |grad diff| spmdc", "max |grad diff| PyTorch"):
        t1.add_column(c, justify="right" if ("ms" in c or "/" in c or "loss" in c or "diff" in c) else "left")
    t2 = Table(title="Collectives per step, per rank (bytes: local input of each collective)")
    for c in ("workload", "plan", "spmdc collectives", "spmdc MB", "PyTorch collectives", "PyTorch MB",
              "CommDebugMode (check)"):
        t2.add_column(c, justify="right" if "MB" in c else "left")
    md = []
    md.append("| workload | plan | mesh | PyTorch | PyTorch ms | spmdc ms | spmdc / PyTorch | spmdc in comm ms | "
              "loss spmdc | loss PyTorch | loss eager | max abs grad diff spmdc | max abs grad diff PyTorch |")
    md.append("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    md2 = ["| workload | plan | spmdc collectives | spmdc MB | PyTorch collectives | PyTorch MB | "
           "CommDebugMode (check) |",
           "|---|---|---|---:|---|---:|---|"]
    t3 = Table(title="Peak memory of one step beyond parameters and inputs, per rank (MB)")
    for c in ("workload", "plan", "spmdc estimated", "spmdc measured", "PyTorch measured", "spmdc / PyTorch"):
        t3.add_column(c, justify="left" if c in ("workload", "plan") else "right")
    md3 = ["| workload | plan | spmdc estimated | spmdc measured | PyTorch measured | spmdc / PyTorch |",
           "|---|---|---:|---:|---:|---:|"]
    bad = []
    for r in results:
        ref_loss, ref_grads = eager_reference(r["workload"], r["precision"])
        label = r["plan"] + (f" {r['precision']}" if r["precision"] else "")
        ms_s = 1e3 * statistics.median(r["t_spmdc"])
        ms_t = 1e3 * statistics.median(r["t_torch"])
        who = "DTensor TP" if r["plan"] == "megatron" else "FSDP2"
        mesh = "x".join(f"{k}={v}" for k, v in r["mesh"].items())
        gs, gt = max_grad_diff(r["spmdc_grads"], ref_grads), max_grad_diff(r["torch_grads"], ref_grads)
        row = [r["workload"], label, mesh, who, f"{ms_t:.1f}", f"{ms_s:.1f}", f"{ms_s / ms_t:.2f}x",
               f"{1e3 * max(r['t_comm']):.1f}",
               f"{r['spmdc_loss']:.6f}", f"{r['torch_loss']:.6f}", f"{ref_loss:.6f}", f"{gs:.1e}", f"{gt:.1e}"]
        t1.add_row(*row)
        md.append("| " + " | ".join(row) + " |")
        sc = {k: v for k, v in r["spmdc_counts"].items() if k != "comm.all_slice"}
        sb = sum(v for k, v in r["spmdc_bytes"].items() if k != "comm.all_slice")
        n_slice = r["spmdc_counts"].get("comm.all_slice", 0)
        scs = fmt_counts(sc) + (f" (+{n_slice} all_slice, no traffic)" if n_slice else "")
        row2 = [r["workload"], label, scs, f"{sb / 1e6:.2f}", fmt_counts(r["torch_counts"]),
                f"{sum(r['torch_bytes'].values()) / 1e6:.2f}",
                ", ".join(f"{v} {k.split('.')[-1]}" for k, v in sorted(r["cdm_counts"].items())) or "not run"]
        t2.add_row(*row2)
        md2.append("| " + " | ".join(row2) + " |")
        row3 = [r["workload"], label, f"{r['est_peak'] / 1e6:.2f}", f"{r['mem_spmdc'] / 1e6:.2f}",
                f"{r['mem_torch'] / 1e6:.2f}", f"{r['mem_spmdc'] / max(r['mem_torch'], 1):.2f}x"]
        t3.add_row(*row3)
        md3.append("| " + " | ".join(row3) + " |")
        # mixed precision: both sides round to bf16, each in its own order (FSDP2 compares to 1e-2 too)
        rtol, atol = (1e-2, 1e-3) if r["precision"] else (1e-4, 1e-5)
        for side, loss in (("spmdc", r["spmdc_loss"]), ("PyTorch", r["torch_loss"])):
            if not math.isclose(loss, ref_loss, rel_tol=rtol, abs_tol=atol):
                bad.append(f"{r['workload']}/{label}: {side} loss {loss} != eager {ref_loss}")
    console.print(t1)
    console.print(t2)
    console.print(t3)
    console.print("workloads: " + "; ".join(f"{w}: {d}" for w, d in desc.items()))
    console.print("spmdc compile (capture + sharding, main process): "
                  + ", ".join(f"{k} {v:.1f}s" for k, v in compile_s.items()) + f"; launch + all runs {launch_s:.0f}s")
    if bad:
        console.print("[red]LOSS MISMATCH:[/red] " + "; ".join(bad))
    else:
        console.print("losses: spmdc and PyTorch both equal eager single-device within rtol 1e-4 / atol 1e-5 "
                      "(bf16 rows: the same mixed precision eagerly, within rtol 1e-2)")
    if args.markdown:
        cmd = "python bench/vs_torch.py " + " ".join(sys.argv[1:])
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write(f"\n## vs_torch ({datetime.date.today().isoformat()})\n\n")
            f.write(f"Command: `{cmd}`; machine: {os.cpu_count()} CPU cores ({platform.machine()}), 4 gloo ranks, "
                    f"torch {__import__('torch').__version__}.\n\n")
            f.write(f"Step time — {title}:\n\n" + "\n".join(md) + "\n\nCollectives per step, per rank:\n\n"
                    + "\n".join(md2) + "\n\nPeak memory of one step, per rank (MB):\n\n" + "\n".join(md3)
                    + "\n\nWorkloads: " + "; ".join(f"`{w}`: {d}" for w, d in desc.items()) + "\n")


if __name__ == "__main__":
    main()
