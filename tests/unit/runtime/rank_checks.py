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


def close(got: Any, want: Any, rtol: float = 1e-4, atol: float = 1e-5, where: str = "") -> None:
    """``got`` equals ``want`` within tolerance: tensors, numbers, or dicts of them (same keys; a
    mismatch names its key)."""
    if isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            close(got[k], want[k], rtol, atol, f"{where}{k}: ")
        return
    torch.testing.assert_close(torch.as_tensor(got), torch.as_tensor(want), rtol=rtol, atol=atol,
                               msg=lambda m: f"{where}{m}")


def train_one_device(model: Any, inputs: Any, target: Any, loss_fn: Any, opt: Any, steps: int,
                     seed: int | None = None) -> list[torch.Tensor]:
    """``steps`` eager steps of ``model`` on one batch with optimizer ``opt``: the losses (after
    ``torch.manual_seed(seed)`` when given: dropout draws as the ranks draw them)."""
    if seed is not None:
        torch.manual_seed(seed)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(inputs), target)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def run_cases_in_gloo(run_case: Any, cases: dict[str, Any]) -> dict[str, Any]:
    """Rank side of a one-launch test module: a gloo process group, ``run_case(*case)`` for every
    named case in order, the group destroyed after (the launch's workers call this)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        return {name: run_case(*case) for name, case in cases.items()}
    finally:
        dist.destroy_process_group()
