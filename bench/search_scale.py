"""The layout search at real size, without a launch (issue 31): its time, and its sketch against its
programs.

    python bench/search_scale.py [--markdown FILE]

1. ``spmdc plan llama3-70b --nproc 4096 --search --batch 512 --optimizer adamw --device h100`` as a
   user runs it (a fresh process, the default ``--search-budget``), and the same for a user's file
   building HuggingFace's Llama at those shapes on meta (:func:`hf_llama_70b`): the wall time, how
   many candidates were priced from their programs, the chosen plan.
2. For deep models whose every candidate can be priced here in minutes (Llama-3-1B on 64 ranks, a
   12-block GPT-2 on 8): every candidate priced from its programs (no budget) and sketched
   (:mod:`spmdc.api.plan_sketch`); the Spearman correlation of the sketch's step times with the
   programs', where the programs' best candidate falls in the sketch's order, and the sketch's
   peak over the programs' (median and range) — how good the order is in which the search prices.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from auto_plan import spearman  # noqa: E402


def hf_llama_70b(batch: int = 512):
    """A user's file: HuggingFace's ``LlamaForCausalLM`` at Llama-3-70B's shapes built on the meta
    device, with a batch of ids on meta too (``spmdc plan bench/search_scale.py:hf_llama_70b``)."""
    import torch
    import transformers as T

    cfg = T.LlamaConfig(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=8192,
                        rope_theta=500000.0)
    with torch.device("meta"):
        model = T.LlamaForCausalLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (batch, 2048), device="meta")
    return model, {"input_ids": ids, "labels": ids}, None


USER_MODELS = ("llama3-70b", f"{os.path.abspath(__file__)}:hf_llama_70b")
"""The built-in Llama-3-70B and a user's HuggingFace one built on meta."""


def user_search(model: str) -> dict:
    args = ["plan", model, "--nproc", "4096", "--search", "--batch", "512", "--optimizer", "adamw",
            "--device", "h100"]
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "spmdc.tools.cli", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t
    said = " ".join(r.stdout.split())
    chosen = said.split("chosen: ", 1)[1].split(" (", 1)[0] if "chosen: " in said else "-"
    priced = said.split(" priced from their programs", 1)[0].rsplit(" ", 1)[-1] if "priced from" in said else "?"
    return {"command": "spmdc " + " ".join(args), "rc": r.returncode, "wall": wall, "priced": priced,
            "chosen": chosen}


def compare(spec: str, nproc: int, batch: int, **extra: int) -> dict:
    from spmdc.api.auto_plan import _sketched, search
    from spmdc.compiler.devices import device_profile
    from spmdc.frontend.capture import reusing_captures
    from spmdc.frontend.workloads import load_workload

    w = load_workload(spec, batch=batch, **extra)
    dev = device_profile("h100")
    kw = dict(train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, kwargs=w.kwargs, optimizer="adamw",
              options=None)
    t = time.perf_counter()
    priced = search(w.model, w.inputs, nproc=nproc, device=dev, **kw)
    took = time.perf_counter() - t
    with reusing_captures():
        sketched = {s.candidate.label().replace(", checkpoint blocks", ""): s
                    for s in _sketched([s.candidate for s in priced], w.model, w.inputs, dev, 8e10, kw)}
    pairs = [(sketched[s.candidate.label().replace(", checkpoint blocks", "")], s) for s in priced
             if s.ok and s.fits]
    order = sorted(pairs, key=lambda p: p[0].step_seconds)
    best = min(pairs, key=lambda p: p[1].step_seconds)
    ratios = sorted(a.peak_bytes / b.peak_bytes for a, b in pairs)
    return {"model": spec + (f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else ""),
            "ranks": nproc, "candidates": len(priced), "compared": len(pairs), "seconds": took,
            "spearman": spearman([a.step_seconds for a, _ in pairs], [b.step_seconds for _, b in pairs]),
            "best_at": order.index(best) + 1, "best": best[1].candidate.label(),
            "peak": (ratios[len(ratios) // 2], ratios[0], ratios[-1])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", default=None, help="append the tables to this file")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from rich.console import Console
    from rich.table import Table

    users = [user_search(m) for m in USER_MODELS]
    rows = [compare("llama3-1b", 64, 64), compare("gpt2-tiny", 8, 8, n_layer=12)]
    console = Console()
    for user in users:
        console.print(f"{user['command']}: rc {user['rc']}, {user['wall']:.1f} s wall, {user['priced']} candidates "
                      f"priced from their programs, chose {user['chosen']}")
    table = Table(title="the sketch against the programs (every candidate priced; h100 profile)")
    for col in ("model", "ranks", "candidates", "fitting", "priced in s", "Spearman", "programs' best at",
                "sketch peak / programs' (median, range)"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["model"], str(r["ranks"]), str(r["candidates"]), str(r["compared"]), f"{r['seconds']:.0f}",
                      f"{r['spearman']:.2f}", f"{r['best_at']} ({r['best']})",
                      f"{r['peak'][0]:.2f} ({r['peak'][1]:.2f}-{r['peak'][2]:.2f})")
    console.print(table)
    if args.markdown:
        lines = [f"\n## search_scale ({datetime.date.today()}, `python bench/search_scale.py`)\n"]
        lines += [f"`{user['command']}` (a fresh process, default budget): exit {user['rc']}, **{user['wall']:.1f} s** "
                  f"wall, {user['priced']} of 181 candidates priced from their programs, chose {user['chosen']}.\n"
                  for user in users]
        lines += ["| model | ranks | candidates | fitting | priced in s | Spearman sketch vs programs | programs' best "
                 "in the sketch's order | sketch peak / programs' (median, range) |",
                 "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['ranks']} | {r['candidates']} | {r['compared']} | {r['seconds']:.0f} | "
                  f"{r['spearman']:.2f} | {r['best_at']} ({r['best']}) | {r['peak'][0]:.2f} ({r['peak'][1]:.2f}-"
                  f"{r['peak'][2]:.2f}) |" for r in rows]
        with open(args.markdown, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
