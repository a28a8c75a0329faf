"""Rank worker for test_example_train.py (module level: launched ranks import it by name)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

# tiny: one block, 8 tokens, a global batch of 8 (pieces of 4 on dp=2, of 2 on dp=4)
TINY = ["--vocab", "64", "--dim", "16", "--layers", "1", "--heads", "2", "--seq-len", "8", "--batch-size", "8",
        "--dataset-size", "64", "--warmup", "1", "--lr", "1e-2"]

MOE = ["--hf", "mixtral"]   # HuggingFace Mixtral (4 experts, top-2) from a config; under ep=4 one expert per rank


def cases(ckpt: str) -> dict[str, Any]:
    """examples/train.py three times on these 4 ranks: spmdc (fsdp+tp on dp=2,tp=2) for 4 steps, saving
    at steps 2 and 4 and evaluating at 4; resumed from step 2 under another plan and data-parallel size
    (fsdp on dp=4: the checkpoint resharded, the same global batches); FSDP2's fully_shard; a Mixtral
under expert parallelism (ep=4: tokens to their experts' ranks by all_to_all)."""
    import torch.distributed as dist
    import train

    dist.init_process_group("gloo")   # (main() then uses it and leaves it up)
    try:
        whole = train.main(TINY + ["--steps", "4", "--ckpt", ckpt, "--save-every", "2", "--eval-every", "4"])
        resumed = train.main(TINY + ["--steps", "4", "--mesh", "dp=4", "--plan", "fsdp",
                                     "--resume", os.path.join(ckpt, "step-2")])
        fsdp2 = train.main(TINY + ["--steps", "4", "--fsdp2"])
        moe = train.main(TINY + MOE + ["--steps", "3", "--mesh", "ep=4", "--plan", "ep"])
        return {"whole": whole, "resumed": resumed, "fsdp2": fsdp2, "moe": moe,
                "saved": sorted(os.listdir(ckpt)) if dist.get_rank() == 0 else None}
    finally:
        dist.destroy_process_group()
