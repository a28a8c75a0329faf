"""Start-up memory per rank: a model built on the meta device, sharded by spmdc, vs the alternatives.

    python bench/startup_memory.py [--ranks 1 2 4] [--layers 8] [--d-model 256] [--vocab 8192]

For each rank count N, one launch of N gloo ranks measures on every rank, side by side:

* ``spmdc meta``: ``spmdc.deferred_init(GPT2, ...)`` + ``spmdc.compile(..., plan="fsdp")``: the
  model is recorded on the meta device and each rank replays the initialization keeping only
  its shards (bitwise the single-device init).
* ``spmdc eager``: the model built on the CPU of every rank, then ``spmdc.compile``.
* ``FSDP2 meta``: torch's recipe: build on meta, ``fully_shard`` every block and the root,
  ``to_empty(device="cpu")``, then ``reset_parameters()`` of every module (DTensor init: not
  the single-device values).

Memory is the C heap in use (glibc ``mallinfo2``: ``uordblks + hblkhd``, where CPU tensors
live), sampled every 0.2 ms by a thread during build + compile/shard + init; the table shows
the peak above the level before the build (the largest rank), next to the model's size and
model/N. For context, "compiler alone" is the peak of compiling the same architecture with tiny
tensors (IR, generated code: it grows with the graph, not with the tensors, and is mostly gone
before the parameters are made, so the peak is the larger of the two, not their sum). "spmdc's
count" is what the replay reports (``cm.init_peak_bytes``: transient full tensors and draw
pieces) plus the kept shards. Prints a rich table; writes nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import threading
import time
import warnings
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_in_use() -> int:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


class PeakSampler:
    """``with PeakSampler() as s: ...`` → ``s.peak``: the highest heap in use above the start."""

    def __init__(self, interval: float = 2e-4):
        self.interval, self.peak, self._stop = interval, 0, False

    def _run(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, heap_in_use() - self.base)
            time.sleep(self.interval)

    def __enter__(self) -> PeakSampler:
        import gc

        gc.collect()
        self.base = heap_in_use()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.peak = max(self.peak, heap_in_use() - self.base)
        self._stop = True
        self._thread.join()


def rank_main(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    import spmdc
    import spmdc.examples.gpt2_tiny as g

    n = dist.get_world_size()
    dims = (cfg["vocab"], cfg["seq"], cfg["d_model"], cfg["n_head"], cfg["layers"])
    gen = torch.Generator().manual_seed(0)
    tok = torch.randint(0, cfg["vocab"], (max(n, 2), cfg["seq"]), generator=gen)
    tgt = torch.randint(0, cfg["vocab"], (max(n, 2), cfg["seq"]), generator=gen)
    out: dict[str, Any] = {}
    try:
        # the compiler's own heap: the same graph (layers, heads) with tiny tensors
        tiny = (64, cfg["seq"], 2 * cfg["n_head"], cfg["n_head"], cfg["layers"])
        tok0, tgt0 = tok.remainder(64), tgt.remainder(64)
        with PeakSampler() as s:
            meta = spmdc.deferred_init(g.GPT2, *tiny)
            cm = spmdc.compile(meta, (tok0,), mesh={"dp": n}, plan="fsdp", train=True, loss_fn=g.lm_loss,
                               loss_inputs=(tgt0,))
        out["compiler"] = s.peak
        del cm, meta
        torch.manual_seed(0)
        with PeakSampler() as s:
            meta = spmdc.deferred_init(g.GPT2, *dims)
            cm = spmdc.compile(meta, (tok,), mesh={"dp": n}, plan="fsdp", train=True, loss_fn=g.lm_loss,
                               loss_inputs=(tgt,))
        out["spmdc_meta"] = s.peak
        out["tracked"] = cm.init_peak_bytes
        out["shards"] = sum(p.to_local().numel() * p.element_size() for p in cm.parameters())
        out["model"] = sum(p.numel() * p.element_size() for p in meta.parameters())
        del cm, meta
        torch.manual_seed(0)
        with PeakSampler() as s:
            model = g.GPT2(*dims)
            cm = spmdc.compile(model, (tok,), mesh={"dp": n}, plan="fsdp", train=True, loss_fn=g.lm_loss,
                               loss_inputs=(tgt,))
        out["spmdc_eager"] = s.peak
        del cm, model
        from torch.distributed.fsdp import fully_shard

        with PeakSampler() as s:
            with torch.device("meta"):
                model = g.GPT2(*dims)
            for block in model.h:
                fully_shard(block)
            fully_shard(model)
            model.to_empty(device="cpu")
            for m in model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
        out["fsdp2_meta"] = s.peak
    finally:
        dist.destroy_process_group()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--markdown", default=None, metavar="FILE", help="also append the table to FILE")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    from spmdc.runtime.launcher import launch

    cfg = {"layers": args.layers, "d_model": args.d_model, "n_head": args.n_head, "vocab": args.vocab,
           "seq": args.seq}
    mib = 1 / 2**20
    table = Table(title=f"start-up heap per rank (largest rank), GPT-2 {args.layers} layers d={args.d_model} "
                        f"vocab={args.vocab}, fsdp on N gloo ranks")
    cols = ("N", "model MiB", "model/N", "spmdc meta: peak", "÷ model", "compiler alone", "spmdc's count",
            "spmdc eager-built", "FSDP2 meta + to_empty")
    for col in cols:
        table.add_column(col, justify="right")
    rows = []
    for n in args.ranks:
        res = launch(rank_main, n, (cfg,), timeout_s=900)
        worst = {k: max(r[k] for r in res.values()) for k in res[0]}
        model = worst["model"]
        rows.append((str(n), f"{model * mib:.1f}", f"{model / n * mib:.1f}", f"{worst['spmdc_meta'] * mib:.1f}",
                     f"{worst['spmdc_meta'] / model:.2f}", f"{worst['compiler'] * mib:.1f}",
                     f"{(worst['tracked'] + worst['shards']) * mib:.1f}", f"{worst['spmdc_eager'] * mib:.1f}",
                     f"{worst['fsdp2_meta'] * mib:.1f}"))
        table.add_row(*rows[-1])
    Console(width=160).print(table)
    if args.markdown:
        import datetime

        with open(args.markdown, "a") as f:
            f.write(f"\n## startup_memory ({datetime.date.today()})\n\nCommand: `python bench/startup_memory.py "
                    f"{' '.join(sys.argv[1:])}`; {table.title} (MiB of C heap in use above the start).\n\n")
            f.write("| " + " | ".join(cols) + " |\n|" + "---:|" * len(cols) + "\n")
            f.writelines("| " + " | ".join(r) + " |\n" for r in rows)


if __name__ == "__main__":
    main()
