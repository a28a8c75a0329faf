"""Rank side of ``test_whole_fsdp.py``: fsdp with each parameter whole on one rank (RaggedShard)
and Muon running locally, on 4 gloo ranks."""

from __future__ import annotations

import copy
from typing import Any

import torch

MUON = {"lr": 0.02, "weight_decay": 0.01, "adamw_lr": 3e-3}


def gpt2_job(batch: int = 8):
    from spmdc.examples.gpt2_tiny import factory

    torch.manual_seed(0)
    model, ((tokens,), (targets,)), loss = factory(batch=batch)
    return model, tokens, targets, loss


def eager(model, tokens, targets, loss_fn, steps: int, opt_fn):
    """One device: losses and the final state."""
    from rank_checks import train_one_device

    model = copy.deepcopy(model)
    losses = train_one_device(model, tokens, targets, loss_fn, opt_fn(model.parameters()), steps)
    return [float(x) for x in losses], {k: v.detach().clone() for k, v in model.state_dict().items()}


def whole_four(tmp: str) -> dict[str, Any]:
    import torch.distributed as dist

    import spmdc
    from spmdc.sharding.plan import Plan

    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    try:
        model, tokens, targets, loss_fn = gpt2_job()
        plan = Plan(preset="fsdp", name="fsdp", fsdp_shard="whole", reshard_after_forward="blocks")

        def build(**kw):
            return spmdc.compile(model, (tokens,), mesh={"dp": 4}, plan=plan, train=True, loss_fn=loss_fn,
                                 loss_inputs=(targets,), **kw)
        cm = build(optimizer=("muon", MUON))
        out["whole_parameters"] = cm.whole_parameters
        out["placements"] = {n: "[" + ", ".join(map(str, p)) + "]" for n, p in cm.placements().items()}
        out["local_shapes"] = {n: tuple(p.shape) for n, p in cm.named_parameters()}
        out["plain"] = all(not hasattr(p, "placements") for p in cm.parameters())
        cm.comm.stats.counts.clear()
        losses = [float(cm.step(tokens, targets)) for _ in range(2)]
        out["counts"] = dict(cm.comm.stats.counts)
        cm.save(f"{tmp}/whole")
        losses.append(float(cm.step(tokens, targets)))
        out["losses"] = losses
        out["state"] = cm.full_state_dict()
        from spmdc.ir.printer import print_module

        out["ir"] = print_module(cm.programs["train"].module)
        # resume: a fresh module loads step 2's checkpoint and repeats step 3
        again = build(optimizer=("muon", MUON))
        again.load(f"{tmp}/whole")
        out["resumed"] = float(again.step(tokens, targets))
        out["resumed_state"] = again.full_state_dict()
        # the same checkpoint into even fsdp (S(0) rows; Muon then needs whole parameters stored)
        even = spmdc.compile(model, (tokens,), mesh={"dp": 4}, plan="fsdp", train=True, loss_fn=loss_fn,
                             loss_inputs=(targets,), optimizer=("muon", MUON))
        even.load(f"{tmp}/whole")
        out["even_whole_parameters"] = even.whole_parameters
        out["even_resumed"] = float(even.step(tokens, targets))
        # accumulation and clipping outside the program, AdamW (elementwise) on ragged pieces
        acc = build(optimizer=("adamw", {"lr": 3e-3}), grad_accum=2, clip_grad_norm=0.05)
        out["accum_losses"] = [float(acc.step(tokens, targets)) for _ in range(2)]
        out["accum_norm"] = float(acc.last_grad_norm)
        out["accum_state"] = acc.full_state_dict()
        # the user's own loop: cm.backward, cm.clip_grad_norm_ (the global norm over the ragged pieces, which
        # torch's clip_grad_norm_ on cm.parameters() would take per rank: they are plain tensors), torch's AdamW
        own = build()
        opt = torch.optim.AdamW(own.parameters(), lr=3e-3)
        out["own_losses"], out["own_norms"] = [], []
        for _ in range(2):
            opt.zero_grad()
            out["own_losses"].append(float(own.backward(tokens, targets)))
            out["own_norms"].append(float(own.clip_grad_norm_(0.05)))
            opt.step()
        out["own_state"] = own.full_state_dict()
        # load_state_dict of full tensors cuts each rank's piece
        fresh = build(optimizer=("muon", MUON))
        fresh.load_state_dict(out["state"])
        out["loaded_state"] = fresh.full_state_dict()
    finally:
        dist.destroy_process_group()
    return out
