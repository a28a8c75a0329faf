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
import math
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
    ("gpt2", "dp=4", "fsdp whole", None),
    ("gpt2", "rep=2,dp=2", "hsdp", None),
    ("gpt2", "dp=2,tp=2", "fsdp+tp", None),
]


def _step(model_name: str, mesh: str, plan_name: str):
    from spmdc.compiler import compile_step
    from spmdc.sharding.mesh import Mesh
    from spmdc.sharding.plan import Plan

    plan = plan_name   # "fsdp whole": the fsdp preset with fsdp_shard="whole" (RaggedShard storage)
    if plan_name.endswith(" whole"):
        base = plan_name.split()[0]
        plan = Plan(preset=base, name=base, fsdp_shard="whole", reshard_after_forward="blocks")

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
        module = step.rank_module(0)
        counts = Counter(collective_kind(op) for op in module.walk() if collective_kind(op))
        text = ", ".join(f"{n} {k.removeprefix('comm.')}" for k, n in sorted(counts.items()) if k != "comm.all_slice")
        moved, payload = _ragged_padding(module)
        if payload:
            text += f" (ragged buckets: {100 * (moved - payload) / payload:.0f}% padding)"
        rows.append((model_name, mesh, plan, text or "none", optimum or "—"))
        print(f"{model_name:18} {mesh:11} {plan:9} {text}", flush=True)
    return rows


def _ragged_padding(module) -> tuple[int, int]:
    """Elements the ragged buckets move (n ranks x the longest rank's run) and their payload."""
    moved = payload = 0
    for op in module.walk():
        sizes = op.attributes.get("sizes") if "bucket" in op.name else None
        if sizes is None:
            continue
        rows = [[a.value for a in m] for m in sizes]
        dims = [a.value for a in op.attributes["dims"]]
        widths = []   # elements per unit of the split dim (the same on local and global types)
        for v, d in zip(op.operands, dims):
            shape = v.tensor_type.shape
            widths.append(math.prod(s for j, s in enumerate(shape) if j != d))
        runs = [sum(r[k] * w for r, w in zip(rows, widths)) for k in range(len(rows[0]))]
        moved += len(runs) * max(runs)
        payload += sum(runs)
    return moved, payload


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
