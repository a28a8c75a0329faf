"""Switching plans at run time: spmdc's direct move (one batched send/recv) vs a DCP save + load.

    python bench/switch_vs_dcp.py [--layers 4] [--d-model 256] [--vocab 2048] [--markdown FILE]

One launch of 4 gloo ranks. For each case a GPT-2 is trained 2 AdamW steps under the old plan,
then its state (parameters and AdamW's two moments) goes to the new plan both ways, in the same
processes, one after the other:

* ``spmdc switch``: ``cm.switch(plan, mesh)`` — compile the new program, then one
  ``batch_isend_irecv`` of every rank's finest slices (:mod:`spmdc.api.switch`);
* ``DCP``: ``cm.save(dir)`` (torch.distributed.checkpoint to a temporary directory), compile the
  same new program, ``new.load(dir)`` (DCP reshards on read).

Times are the slowest rank's. Bytes: sent over the wire by all ranks (switch) vs written to disk
(DCP, the checkpoint directory's size; a load reads them back). Both runs then take one more
step: the losses must be equal (they are printed). Prints a rich table; ``--markdown FILE``
appends it to FILE.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

PP2_TP2 = {"name": "pp2-tp2", "microbatches": 4, "stages": [
    {"ranks": [0, 1], "mesh": "tp=2", "plan": "megatron"}, {"ranks": [2, 3], "mesh": "tp=2", "plan": "megatron"}]}
CASES = [("dp=4", "fsdp", "tp=4", "megatron"), ("dp=2,tp=2", "fsdp+tp", None, PP2_TP2),
         ("dp=4", "fsdp", "dp=2", "fsdp")]


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def rank_main(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    import spmdc
    from spmdc.api.compiled_module import CompiledModule
    from spmdc.sharding.pipeline_plan import PipelinePlan

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = []
    try:
        from spmdc.examples.gpt2_tiny import factory

        for m0, p0, m1, p1 in CASES:
            torch.manual_seed(0)
            model, ((x,), (y,)), loss_fn = factory(batch=8, seq=cfg["seq"], vocab_size=cfg["vocab"],
                                                   block_size=cfg["seq"], d_model=cfg["d_model"], n_head=4,
                                                   n_layer=cfg["layers"])
            opt = ("adamw", {"lr": 1e-3})
            cm = spmdc.compile(model, (x,), mesh=m0, plan=p0, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                               optimizer=opt)
            for _ in range(2):
                cm.step(x, y)
            plan = PipelinePlan.from_dict(p1) if isinstance(p1, dict) else p1
            dist.barrier()
            t = time.perf_counter()
            new = cm.switch(plan, mesh=m1)
            switch_s = time.perf_counter() - t
            rep = new.switch_report if new is not None else None
            loss_switch = float(new.step(x, y)) if new is not None else None
            # the same move through a checkpoint
            path = cfg["dir"] + f"/{m0}-{p0}".replace("=", "").replace(",", "")
            dist.barrier()
            t = time.perf_counter()
            cm.save(path)
            save_s = time.perf_counter() - t
            t = time.perf_counter()
            if isinstance(plan, PipelinePlan):
                ref: Any = CompiledModule(model, (x,), mesh=None, plan=plan, train=True, loss_fn=loss_fn,
                                          loss_inputs=(y,), optimizer=opt)
            elif new is not None:
                ref = CompiledModule(model, (x,), mesh=m1, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                                     optimizer=opt, device_mesh=new.device_mesh, group=new.group)
            else:
                ref = None
            compile_s = time.perf_counter() - t
            t = time.perf_counter()
            if ref is not None:
                ref.load(path)
            load_s = time.perf_counter() - t
            loss_dcp = float(ref.step(x, y)) if ref is not None else None
            dist.barrier()
            written = _dir_bytes(path) if rank == 0 else 0
            out.append({"case": f"{p0} {m0} -> {getattr(plan, 'name', plan)} {m1 or ''}".strip(),
                        "switch_s": switch_s, "switch_compile": rep.compile_seconds if rep else 0.0,
                        "switch_transfer": rep.transfer_seconds if rep else 0.0,
                        "switch_bytes": rep.bytes_total if rep else 0, "messages": rep.messages if rep else 0,
                        "save_s": save_s, "compile_s": compile_s, "load_s": load_s, "written": written,
                        "loss_switch": loss_switch, "loss_dcp": loss_dcp})
        return {"rank": rank, "cases": out}
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--markdown", default=None, metavar="FILE")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    from spmdc.runtime.launcher import launch

    work = tempfile.mkdtemp(prefix="spmdc-switch-bench-")
    cfg = {"layers": args.layers, "d_model": args.d_model, "vocab": args.vocab, "seq": args.seq, "dir": work}
    try:
        res = launch(rank_main, 4, (cfg,), timeout_s=1200)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cases = res[0]["cases"]
    cols = ["case", "switch s (transfer ms)", "DCP save+load s", "transfer / (save+load)", "switch MB sent",
            "DCP MB written", "switch total s", "DCP total s", "loss after (switch / DCP)"]
    table = Table(title=f"switch vs DCP: GPT-2 {args.layers} layers, d_model {args.d_model}, vocab {args.vocab}, "
                        "AdamW, 4 gloo ranks (slowest rank)")
    for c in cols:
        table.add_column(c, justify="left" if c == "case" else "right")
    rows = []
    for k, c in enumerate(cases):
        slow = {key: max(r["cases"][k][key] for r in res.values()) for key in
                ("switch_s", "switch_transfer", "save_s", "compile_s", "load_s", "switch_compile")}
        dcp_io = slow["save_s"] + slow["load_s"]
        row = [c["case"], f"{slow['switch_s']:.2f} ({1000 * slow['switch_transfer']:.1f})", f"{dcp_io:.2f}",
               f"{slow['switch_transfer'] / dcp_io:.3f}x", f"{c['switch_bytes'] / 1e6:.2f}",
               f"{c['written'] / 1e6:.2f}", f"{slow['switch_s']:.2f}",
               f"{slow['save_s'] + slow['compile_s'] + slow['load_s']:.2f}",
               f"{c['loss_switch']:.6f} / {c['loss_dcp']:.6f}"]
        rows.append(row)
        table.add_row(*row)
    Console(width=200).print(table)
    if args.markdown:
        import platform

        import torch

        with open(args.markdown, "a") as f:
            f.write(f"\n## switch_vs_dcp ({time.strftime('%Y-%m-%d')})\n\nCommand: `python bench/switch_vs_dcp.py "
                    f"--layers {args.layers} --d-model {args.d_model} --vocab {args.vocab}`; machine: "
                    f"{os.cpu_count()} CPU cores ({platform.machine()}), 4 gloo ranks, torch {torch.__version__}.\n\n")
            f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
            for row in rows:
                f.write("| " + " | ".join(row) + " |\n")


if __name__ == "__main__":
    main()
