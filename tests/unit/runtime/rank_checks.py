"""Shared check of the launched-rank tests: a training step's results on every rank against
eager PyTorch on one device (loss and gradients rtol 1e-4, atol 1e-5)."""

from __future__ import annotations

from typing import Any

import torch


def assert_step_matches(step: Any, per_rank: list[dict], loss: torch.Tensor, grads: dict[str, torch.Tensor],
                        label: str) -> None:
    """``per_rank[r]`` is rank r's ``run_on_rank`` result for ``step``; every rank must hold the
    single-device loss and gradients and have issued exactly the collectives in its program."""
    for r in per_rank:
        for kind, got in zip(step.result_kinds, r["outputs"], strict=True):
            want = loss if kind == "loss" else grads[kind.split(":", 1)[1]]
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m, k=kind: f"{label} {k}: {m}")
        assert r["issued"] == r["comm_ops"]
