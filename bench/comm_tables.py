"""Communication table of each preset: the collectives one training step issues per rank, from
the compiled programs (static, no ranks launched), next to the analytic optimum where one is known.

    python bench/comm_tables.py [--markdown FILE]

Models: tiny HuggingFace models at their defaults (``tests/models/hf_tiny.py``: 2 layers,
hidden 32, 4 heads; Qwen2 with 2 key/value heads) and a ViT-style encoder with a packed
``qkv`` (``tests/models/packed_qkv.py``). Counts are per training step on rank 0; a bucket
counts once. The tensor-parallel optimum is Megatron's: one all-reduce after attention and one
after the MLP per layer in the forward, the same two in the backward (4 per layer).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "models"))

CASES = [  # (model, mesh, preset, analytic optimum or None)
    ("gpt2", "tp=4", "megatron", "8 all_reduce"),
    ("qwen2", "tp=2", "megatron", "8 all_reduce"),
    ("qwen2", "tp=4", "megatron", None),
    ("vit (packed qkv)", "tp=4", "megatron", "8 all_reduce"),
    ("gpt2", "tp=4", "sp", None),
    ("gpt2", "dp=4", "dp", None),
    ("gpt2", "dp=4", "fsdp", None),
    ("gpt2", "rep=2,dp=2", "hsdp", None),
    ("gpt2", "dp=2,tp=2", "fsdp+tp", None),
]


def _step(model_name: str, mesh: str, plan: str):
    from spmdc.compiler import compile_step
    from spmdc.sharding.mesh import Mesh

    if model_name.startswith("vit"):
        import packed_qkv

        model, ((x,), (y,)), loss = packed_qkv.vit()
        return compile_step(model, (x,), mesh=Mesh.parse(mesh), plan=plan, train=True, loss_fn=loss,
                            loss_inputs=(y,))
    import hf_tiny

    ids, labels = hf_tiny.batch()
    return compile_step(hf_tiny.build(model_name), (), mesh=Mesh.parse(mesh), plan=plan, train=True,
                        kwargs={"input_ids": ids, "labels": labels})


def table() -> list[tuple[str, str, str, str, str]]:
    from spmdc.dialects.comm import collective_kind

    rows = []
    for model_name, mesh, plan, optimum in CASES:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            step = _step(model_name, mesh, plan)
        counts = Counter(collective_kind(op) for op in step.rank_module(0).walk() if collective_kind(op))
        text = ", ".join(f"{n} {k.removeprefix('comm.')}" for k, n in sorted(counts.items()) if k != "comm.all_slice")
        rows.append((model_name, mesh, plan, text or "none", optimum or "—"))
        print(f"{model_name:18} {mesh:11} {plan:9} {text}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", help="append the table to this file")
    args = ap.parse_args()
    rows = table()
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("\n| model | mesh | preset | collectives per training step (rank 0) | analytic optimum |\n")
            f.write("| --- | --- | --- | --- | --- |\n")
            for r in rows:
                f.write("| " + " | ".join(r) + " |\n")


if __name__ == "__main__":
    main()
