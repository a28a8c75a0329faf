"""Checkpoints that reshard: a compiled module's state through ``torch.distributed.checkpoint``.

    cm.save("ckpt/")                 # every rank writes its shards (a collective)
    cm2 = spmdc.compile(model, ..., mesh=other_mesh, plan="megatron", optimizer=...)
    extra = cm2.load("ckpt/")        # DCP reads each rank's new shards, whatever the old layout

What is saved: the model state (DTensors under the model's own keys, from
``get_state_dict(cm, optimizer)``), the optimizer state keyed by parameter name (DTensors laid out
like their parameters, plus step counts and hyper-parameters), torch's generator state (random
ops draw on from where they stopped) and a small ``extra`` dict of the caller's (pickled). DCP
maps saved shards onto the loading job's layout, so a checkpoint of fsdp on 4 ranks loads into
megatron on 2; the values are bitwise what was saved.
"""

from __future__ import annotations

import io
import pickle
from typing import Any


def _state(cm: Any, optimizer: Any) -> tuple[dict[str, Any], Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(cm, optimizer if optimizer is not None else [])
    state: dict[str, Any] = {"model": model_sd}
    if optimizer is not None:
        state["optim"] = optim_sd
    return state, optim_sd


def save(cm: Any, path: str, optimizer: Any = None, extra: dict[str, Any] | None = None) -> None:
    """Write ``cm``'s (and ``optimizer``'s) state to the directory ``path``; every rank calls it."""
    import torch
    import torch.distributed.checkpoint as dcp

    state, _ = _state(cm, optimizer)
    meta = {"extra": dict(extra or {}), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state() if cm.device.type == "cuda" else None,
            "plan": cm.plan_name, "mesh": str(cm.mesh)}
    state["spmdc"] = io.BytesIO(pickle.dumps(meta))
    dcp.save(state, checkpoint_id=path)


def load(cm: Any, path: str, optimizer: Any = None) -> dict[str, Any]:
    """Read a checkpoint of :func:`save` into ``cm`` (and ``optimizer``), resharded to their
    current layouts; restores torch's generator; returns the saved ``extra`` dict."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state, _ = _state(cm, optimizer)
    state["spmdc"] = io.BytesIO()
    dcp.load(state, checkpoint_id=path)
    set_state_dict(cm, optimizer if optimizer is not None else [], model_state_dict=state["model"],
                   optim_state_dict=state.get("optim", {}))
    buf = state["spmdc"]
    buf.seek(0)
    meta = pickle.loads(buf.read())
    torch.set_rng_state(meta["rng"])
    if meta.get("cuda_rng") is not None and cm.device.type == "cuda":
        torch.cuda.set_rng_state(meta["cuda_rng"])
    return meta["extra"]
