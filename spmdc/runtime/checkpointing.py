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


def read_meta(path: str) -> dict[str, Any]:
    """What :func:`save` wrote beside the tensors (``extra``, plan, mesh), read in this process
    alone (no ranks needed): for checking a checkpoint before starting a job on it."""
    import warnings

    import torch.distributed.checkpoint as dcp

    state = {"spmdc": io.BytesIO()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "assuming the intent is to load in a single process"
        dcp.load(state, checkpoint_id=path, no_dist=True)
    state["spmdc"].seek(0)
    return pickle.loads(state["spmdc"].read())


def _check_keys(path: str, state: dict[str, Any]) -> None:
    """Every tensor the loading module and optimizer need is in the checkpoint; else one error
    naming what is missing (another model, another optimizer) instead of DCP's from inside a rank."""
    from torch.distributed.checkpoint import FileSystemReader

    saved = set(FileSystemReader(path).read_metadata().state_dict_metadata)
    wanted = [f"model.{k}" for k in state["model"]]   # DCP's flattened keys: dict keys joined by "."
    for fqn, stats in state.get("optim", {}).get("state", {}).items():
        wanted += [f"optim.state.{fqn}.{stat}" for stat in stats]
    missing = sorted(k for k in wanted if k not in saved)
    if missing:
        other = "model" if any(k.startswith("model.") for k in missing) else "optimizer"
        raise ValueError(f"checkpoint '{path}' lacks {len(missing)} of the {len(wanted)} entries this module and "
                         f"optimizer need ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): it was "
                         f"saved from another {other}")


def load(cm: Any, path: str, optimizer: Any = None) -> dict[str, Any]:
    """Read a checkpoint of :func:`save` into ``cm`` (and ``optimizer``), resharded to their
    current layouts; restores torch's generator; returns the saved ``extra`` dict."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state, _ = _state(cm, optimizer)
    _check_keys(path, state)
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
