"""Micro-batches: a batch cut along dim 0, and the check that a step over them trains the whole batch's loss.

    micro = chunks([x, y], 4, ["input #0", "input #1"])     # 4 lists of pieces, in order
    check_micro_batch_mean(model, loss_fn, 1, [], [x, y], micro)   # refuses a batch-coupled loss

Used by gradient accumulation (every layout kind) and pipeline micro-batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def check_micro_batch_mean(model: Any, loss_fn: Any, n_model: int, kw_names: Sequence[str], every: list[Any],
                           micro: list[list[Any]], first: int = 0, group: Any = None, eval_mode: bool = False) -> None:
    """A step over micro-batches takes the mean of their losses: refuse a model + loss for which
    that is not the loss of the whole batch (samples coupled across the batch, as a contrastive
    loss; a mean over unequal token counts). Checked once, on the example batch, by eager PyTorch
    on job rank ``first`` (the model's own forward, no gradients), the verdict broadcast over
    ``group`` (every rank calls it). ``eval_mode``: run the model in eval mode (a model whose random
    ops stay on: its masks would differ between the two runs; batch statistics then go unchecked)."""
    import torch.distributed as dist

    from spmdc.frontend.export import kept_modes
    from spmdc.frontend.loss import LossWrapper

    verdict: list[Any] = [None]
    if dist.get_rank() == first and len(micro) > 1:
        wrapper = LossWrapper(model, loss_fn, n_model, False, None)
        n_kw = len(kw_names)

        def loss_of(values: list[Any]) -> Any:
            pos, kw = values[:len(values) - n_kw], dict(zip(kw_names, values[len(values) - n_kw:]))
            return wrapper(*pos, **kw)[0].detach().double()

        failed = None
        with kept_modes(model):   # every module's own flag back afterwards (not the root's on all)
            if eval_mode:
                model.eval()
            with torch.no_grad(), torch.random.fork_rng():
                whole = loss_of(list(every))
                try:
                    parts = torch.stack([loss_of(list(m)) for m in micro]).mean()
                except Exception as e:  # noqa: BLE001 - the model and loss do not run on a micro-batch
                    failed = f"{type(e).__name__}: {e}"
        if failed is not None:
            verdict[0] = (f"the model and its loss fail on one of {len(micro)} micro-batches ({failed}): they need "
                          "the whole batch; use one micro-batch")
        elif not torch.allclose(whole, parts, rtol=1e-5, atol=1e-7):
            verdict[0] = (f"the loss of the whole batch ({float(whole):.6g}) is not the mean of its {len(micro)} "
                          f"micro-batches' losses ({float(parts):.6g}) for this model: its samples interact across "
                          "the batch (a batch-wide loss, batch statistics) or its loss averages unequal counts; "
                          "micro-batches would train on another loss. Use one micro-batch")
    dist.broadcast_object_list(verdict, src=first, group=group)
    if verdict[0] is not None:
        raise ValueError(verdict[0])


def chunks(values: Sequence[Any], n: int, names: Sequence[str]) -> list[list[Any]]:
    for v, name in zip(values, names):
        if v.dim() == 0 or v.shape[0] % n:
            raise ValueError(f"{n} micro-batches split every input along dim 0, but input '{name}' has shape "
                             f"{tuple(v.shape)}")
    pieces = [v.chunk(n, dim=0) for v in values]
    return [[p[k] for p in pieces] for k in range(n)]
