"""``spmdc run`` (for now): run the built-in tensor-parallel MLP on 2 ranks and check it.

Parses ``spmdc/examples/mlp_tp.mlir``, verifies and canonicalizes it, runs the
global function on one device with the reference interpreter, launches 2 gloo
ranks with torch's elastic launcher, runs the per-rank SPMD function there
(shards cut from the same initialization), and compares the outputs.
The automatic capture → partition path replaces the hand-written per-rank
function as those passes land (see docs/cli.md).
"""

from __future__ import annotations

import os
import time
from importlib import resources
from typing import Any

EXAMPLE = "mlp_tp.mlir"
NPROC = 2


def _module() -> Any:
    from spmdc.ir.parser import parse_module
    from spmdc.ir.verifier import verify

    text = resources.files("spmdc.examples").joinpath(EXAMPLE).read_text()
    module = parse_module(text, EXAMPLE)
    verify(module)
    return module


def _inputs() -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(8, 16, generator=g), "fc1.weight": torch.randn(16, 32, generator=g) * 0.2,
            "fc2.weight": torch.randn(32, 16, generator=g) * 0.2}


def _shard(full: Any, sharding: Any, coords: dict[str, int], axes: tuple[str, ...], sizes: tuple[int, ...]) -> Any:
    from spmdc.ir.sharding import Shard, chunk_sizes

    t = full
    for axis, size, p in zip(axes, sizes, sharding.placements):
        if isinstance(p, Shard):
            cs = chunk_sizes(t.shape[p.dim], size)
            i = coords[axis]
            t = t.narrow(p.dim, sum(cs[:i]), cs[i])
    return t.contiguous()


def _worker() -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from spmdc.dialects.shard import lookup_mesh
    from spmdc.ir.symbols import lookup_symbol
    from spmdc.runtime.collectives import Collectives
    from spmdc.runtime.interpreter import interpret

    dist.init_process_group("gloo")
    try:
        module = _module()
        func = lookup_symbol(module, "main_tp")
        mesh_op = lookup_mesh(module, "mesh")
        dmesh = init_device_mesh("cpu", mesh_op.shape, mesh_dim_names=mesh_op.axis_names)
        coords = {a: dmesh.get_local_rank(a) for a in mesh_op.axis_names}
        full = _inputs()
        args = []
        for i, a in enumerate(func.args):
            attrs = func.arg_attrs(i)
            key = attrs["spmdc.param"].value if "spmdc.param" in attrs else a.name_hint
            args.append(_shard(full[key], attrs["shard.sharding"], coords, mesh_op.axis_names, mesh_op.shape))
        comm = Collectives(dmesh)
        start = time.perf_counter()
        (y,) = interpret(module, args, "main_tp", comm=comm.run)
        elapsed = time.perf_counter() - start
        return {"y": y, "seconds": elapsed, "counts": comm.stats.counts, "bytes": comm.stats.bytes}
    finally:
        dist.destroy_process_group()


def run_demo() -> int:
    import torch
    from rich.console import Console
    from rich.table import Table

    from spmdc.passes.manager import PassManager
    from spmdc.passes.registry import parse_pipeline
    from spmdc.runtime.interpreter import interpret
    from spmdc.runtime.launcher import launch

    console = Console()
    module = _module()
    PassManager(parse_pipeline("canonicalize,cse")).run(module)
    console.print(f"[bold]spmdc[/bold]: parsed, verified and canonicalized [cyan]{EXAMPLE}[/cyan]")
    (ref,) = interpret(module, _inputs(), "main")
    console.print(f"launching {NPROC} ranks (gloo) with torch.distributed's elastic launcher ...")
    results = launch(_worker, NPROC)
    table = Table(title="tensor-parallel MLP vs one device")
    for col in ("rank", "max |diff|", "all_reduce", "bytes", "step ms"):
        table.add_column(col, justify="right")
    worst = 0.0
    for rank in sorted(results):
        r = results[rank]
        diff = (r["y"] - ref).abs().max().item()
        worst = max(worst, diff)
        table.add_row(str(rank), f"{diff:.2e}", str(r["counts"].get("comm.all_reduce", 0)),
                      str(sum(r["bytes"].values())), f"{1000 * r['seconds']:.2f}")
    console.print(table)
    ok = all(torch.allclose(results[r]["y"], ref, rtol=1e-5, atol=1e-6) for r in results)
    console.print("[green]outputs match one device (rtol 1e-5, atol 1e-6)[/green]" if ok
                  else "[red]outputs differ from one device[/red]")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(run_demo())
