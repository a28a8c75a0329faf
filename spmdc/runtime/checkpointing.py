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

DCP describes each rank's shard as one box of the global tensor, which a strided shard
(``SS(d, k)``: a piece of each of k parts) is not: those tensors travel through DCP in the
plain ``S(d)`` layout (cut locally from the gathered value when saving; gathered and cut back
to ``SS`` after loading). Ragged parameters (``RS``, held as plain tensors: this rank's piece)
and their optimizer state travel the same way, as ``S(d)`` DTensors of the global shape.
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


def _strided_entries(tree: Any) -> list[tuple[Any, Any, Any]]:
    """``(container, key, dtensor)`` for every DTensor laid out with a strided shard in ``tree``."""
    from torch.distributed.tensor import DTensor

    out = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        if isinstance(v, DTensor) and any(type(p).__name__ == "_StridedShard" for p in v.placements):
            out.append((tree, k, v))
        elif isinstance(v, (dict, list)):
            out.extend(_strided_entries(v))
    return out


def _plain(dt: Any, full: Any = None) -> Any:
    """A DTensor with ``dt``'s shape, every strided shard made a plain ``Shard`` of the same
    dim, holding ``full`` (cut locally) or uninitialised."""
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    placements = [Shard(p.dim) if type(p).__name__ == "_StridedShard" else p for p in dt.placements]
    if full is None:
        full = torch.empty(dt.shape, dtype=dt.dtype, device=dt.to_local().device)
    return distribute_tensor(full, dt.device_mesh, placements, src_data_rank=None)


def _containers_copied(tree: Any) -> Any:
    """``tree`` with every dict and list copied (tensors shared)."""
    if isinstance(tree, dict):
        return {k: _containers_copied(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_containers_copied(v) for v in tree]
    return tree


def _ragged_entries(cm: Any, state: dict[str, Any]) -> list[tuple[Any, Any, Any, Any, tuple[int, ...]]]:
    """``(container, key, piece, layout, global shape)`` for every ragged parameter in
    ``state["model"]`` and every tensor of its optimizer state shaped like its piece."""
    out = []
    for key, v in state["model"].items():
        lay = cm._ragged_layout(key)
        if lay is not None:
            out.append((state["model"], key, v, lay, cm._shapes[_fqn(cm, key)]))
    for fqn, stats in state.get("optim", {}).get("state", {}).items():
        lay = cm._ragged_layout(fqn)
        if lay is None:
            continue
        piece_shape = tuple(cm.get_parameter(fqn).shape)
        for stat, v in stats.items():
            if hasattr(v, "shape") and v.dim() > 0 and tuple(v.shape) == piece_shape:
                out.append((stats, stat, v, lay, cm._shapes[_fqn(cm, fqn)]))
    return out


def _fqn(cm: Any, key: str) -> str:
    p = cm.get_parameter(key)
    return next(n for n, q in cm.named_parameters() if q is p)


def _as_shard(cm: Any, layout: Any, shape: tuple[int, ...], full: Any, like: Any) -> Any:
    """A DTensor of ``shape`` laid out ``layout`` with every ragged shard a plain ``Shard``,
    holding ``full`` (cut locally) or uninitialised."""
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    placements = [Shard(p.dim) if hasattr(p, "units") else Replicate() if p.is_replicate() else Shard(p.dim)
                  for p in layout]
    if full is None:
        full = torch.empty(shape, dtype=like.dtype, device=like.device)
    return distribute_tensor(full, cm.device_mesh, placements, src_data_rank=None)


def _restore_strided(swapped: list[tuple[Any, Any, Any, Any]], cm: Any) -> None:
    """Cut each loaded plain-layout value back into its strided DTensor (in place)."""

    from spmdc.runtime.executor import local_piece
    from spmdc.sharding.mesh import to_placement

    for container, key, orig, plain in swapped:
        full = plain.full_tensor()
        piece = local_piece(full, [to_placement(p) for p in orig.placements], cm.mesh, cm.rank)
        orig.to_local().copy_(piece)
        container[key] = orig


def _restore_ragged(swapped: list[tuple[Any, Any, Any, Any, Any]], cm: Any) -> None:
    """Cut each loaded value back into the ragged piece it stands for (in place)."""

    from spmdc.runtime.executor import local_piece

    for container, key, piece, layout, loaded in swapped:
        piece.copy_(local_piece(loaded.full_tensor(), layout, cm.mesh, cm.rank))
        container[key] = piece


def save(cm: Any, path: str, optimizer: Any = None, extra: dict[str, Any] | None = None) -> None:
    """Write ``cm``'s (and ``optimizer``'s) state to the directory ``path``; every rank calls it."""
    import torch
    import torch.distributed.checkpoint as dcp

    state, _ = _state(cm, optimizer)
    state = _containers_copied(state)   # entries are swapped below: never in the optimizer's own state
    meta = {"extra": dict(extra or {}), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state() if cm.device.type == "cuda" else None,
            "plan": cm.plan_name, "mesh": str(cm.mesh)}
    state["spmdc"] = io.BytesIO(pickle.dumps(meta))
    for container, key, dt in _strided_entries(state):
        container[key] = _plain(dt, dt.full_tensor())
    for container, key, piece, layout, shape in _ragged_entries(cm, state):
        container[key] = _as_shard(cm, layout, shape, cm._full(piece.detach(), layout, shape), piece)
    dcp.save(state, checkpoint_id=path, process_group=cm.group)


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
    swapped = []
    for container, key, dt in _strided_entries(state):
        container[key] = _plain(dt)
        swapped.append((container, key, dt, container[key]))
    ragged = []
    for container, key, piece, layout, shape in _ragged_entries(cm, state):
        container[key] = _as_shard(cm, layout, shape, None, piece)
        ragged.append((container, key, piece, layout, container[key]))
    dcp.load(state, checkpoint_id=path, process_group=cm.group)
    _restore_strided(swapped, cm)
    _restore_ragged(ragged, cm)
    set_state_dict(cm, optimizer if optimizer is not None else [], model_state_dict=state["model"],
                   optim_state_dict=state.get("optim", {}))
    buf = state["spmdc"]
    buf.seek(0)
    meta = pickle.loads(buf.read())
    torch.set_rng_state(meta["rng"])
    if meta.get("cuda_rng") is not None and cm.device.type == "cuda":
        torch.cuda.set_rng_state(meta["cuda_rng"])
    return meta["extra"]
