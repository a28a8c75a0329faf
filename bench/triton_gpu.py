"""GPU check (not CI): gpt2-tiny and llama-tiny with compiled Triton kernels versus aten.

    python bench/triton_gpu.py [--steps 50] [--scale small|tiny] [--matmul-epilogue]

For each workload, forward and training step, on one device (a 1-rank mesh): the rank
program is compiled twice, ``target="torch"`` (aten calls) and ``target="triton"``
(``fuse-kernels`` + one Triton kernel per region); both run on the GPU, results are
compared, and the table shows median step time (CUDA events), kernels launched per step
and aten ops before fusion. Without a GPU it runs under the Triton interpreter (slow; use
``--scale tiny --steps 2``) so the script itself can be checked anywhere.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from spmdc.codegen.cache import load_program  # noqa: E402
from spmdc.codegen.kernel_stats import kernel_stats  # noqa: E402
from spmdc.compiler import compile_step  # noqa: E402
from spmdc.examples import gpt2_tiny, llama_tiny  # noqa: E402
from spmdc.passes.manager import PassManager  # noqa: E402
from spmdc.passes.registry import parse_pipeline  # noqa: E402
from spmdc.sharding.mesh import Mesh  # noqa: E402

SCALES = {
    "tiny": dict(batch=2, seq=8, vocab_size=128, d_model=32, n_head=4, n_layer=2),
    "small": dict(batch=8, seq=128, vocab_size=1024, d_model=256, n_head=8, n_layer=4),
}


class OneRank:
    """Collectives of a 1-rank mesh: every collective is the identity."""

    def __getattr__(self, name):
        if name == "all_gather":
            return lambda x, axis, dim, shape: x
        if name in ("all_reduce", "all_slice", "reduce_scatter", "all_to_all"):
            return lambda x, *a: x
        raise AttributeError(name)


def factory(mod, scale):
    import inspect

    params = inspect.signature(mod.factory).parameters
    return mod.factory(**{k: v for k, v in SCALES[scale].items() if k in params})


def time_steps(fn, args, steps, device):
    fn(args, OneRank())  # warm-up (compiles the kernels)
    times = []
    for _ in range(steps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(args, OneRank())
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn(args, OneRank())
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--scale", choices=sorted(SCALES), default="small" if torch.cuda.is_available() else "tiny")
    ap.add_argument("--matmul-epilogue", action="store_true", help="matmuls + epilogues as Triton kernels too")
    opts = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_default_device(device)
    fuse = "fuse-kernels" + ("{matmul-epilogue}" if opts.matmul_epilogue else "") + ",dce"
    print(f"device {torch.cuda.get_device_name() if device == 'cuda' else 'cpu (Triton interpreter)'}, "
          f"scale {opts.scale}, {fuse}")
    print(f"{'workload':<12} {'step':<8} {'aten ms':>9} {'triton ms':>10} {'speedup':>8} {'aten ops':>9} "
          f"{'kernels':>8} {'max rel err':>12}")
    for mod in (gpt2_tiny, llama_tiny):
        with torch.device("cpu"):
            model, ((x,), (y,)), loss_fn = factory(mod, opts.scale)
        for train in (False, True):
            kw = dict(train=True, loss_fn=loss_fn, loss_inputs=(y,)) if train else {}
            with torch.device("cpu"):
                step = compile_step(model, (x,), mesh=Mesh({"dp": 1}), plan="dp", **kw)
                module = step.rank_module(0)
                before = module.clone()
                PassManager(parse_pipeline(fuse)).run(module)
            stats = kernel_stats(module, before=before)
            args = [a.to(device) if hasattr(a, "to") else a for a in step.arguments]
            aten_fn = load_program(before, "main", target="torch")[0]
            tri_fn = load_program(module, "main", target="triton")[0]
            with torch.no_grad():
                want = aten_fn(args, OneRank())
                got = tri_fn(args, OneRank())
                err = max(float(((g - w).abs() / w.abs().clamp_min(1e-3)).max())
                          for g, w in zip(got, want) if g.is_floating_point())
                t_aten = time_steps(aten_fn, args, opts.steps, device)
                t_tri = time_steps(tri_fn, args, opts.steps, device)
            name = mod.__name__.rsplit(".", 1)[-1]
            print(f"{name:<12} {'train' if train else 'forward':<8} {t_aten:>9.3f} {t_tri:>10.3f} "
                  f"{t_aten / t_tri:>7.2f}x {stats.aten_ops:>9} {stats.kernels:>8} {err:>12.2e}")


if __name__ == "__main__":
    main()
