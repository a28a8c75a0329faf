"""Checkpoints that reshard: a compiled module's state through ``torch.distributed.checkpoint``.

    cm.save("ckpt/")                 # every rank writes its shards (a collective)
    cm2 = spmdc.compile(model, ..., mesh=other_mesh, plan="megatron", optimizer=...)
    extra = cm2.load("ckpt/")        # DCP reads each rank's new shards, whatever the old layout

What is saved: the model state (DTensors under the model's own keys, from
``get_state_dict(cm, optimizer)``), the optimizer state keyed by parameter name (DTensors laid out
like their parameters, plus step counts and hyper-parameters), torch's generator state (random
ops draw on from where they stopped), the optimizer's class (or that there was none) and a small
``extra`` dict of the caller's (pickled). DCP maps saved shards onto the loading job's layout, so
a checkpoint of fsdp on 4 ranks loads into megatron on 2; the values are bitwise what was saved.

Every layout kind writes the same checkpoint (:class:`CheckpointView`: what a module gives save
and load): one mesh; device groups (the first group writes: every group holds the whole model);
pipeline stages (each stage its part, a tied parameter by the first stage that holds it, the
optimizer's ``params`` the whole model's). So a pipeline job resumes under fsdp and back, and a
device-group job on one mesh.

Nothing is lost and nothing is silently wrong:

* a save writes into a sibling directory (``.<name>.saving``) and renames it into place once
  every file and DCP's ``.metadata`` are written, so a save that is interrupted leaves the
  previous checkpoint whole (between the two renames it sits in ``.<name>.replaced``, where
  :func:`located` finds it; the next save tidies both up);
* the optimizer saved is the one given, else ``cm.optimizer``, else the one live optimizer over
  the module's parameters; loading a checkpoint with optimizer state into a training module
  without one, an optimizer of another class, or asking for optimizer state a checkpoint does
  not hold is refused (``model_only=True`` saves or loads the model alone);
* loading keeps the optimizer's own settings (lr, betas, weight_decay, ...) and warns, in one
  line, about each one that differs from the saved value; a learning rate an LR scheduler
  drives (the group has ``initial_lr``) is schedule state and comes from the checkpoint;
* a damaged checkpoint (a file missing or cut short, an unreadable ``.metadata``), another
  model (a parameter missing, extra or of another shape) and DCP's own failures (a
  ``BaseException`` in torch) are one :class:`CheckpointError` naming the file or parameter.

DCP describes each rank's shard as one box of the global tensor, which a strided shard
(``SS(d, k)``: a piece of each of k parts) is not: those tensors travel through DCP in the
plain ``S(d)`` layout (cut locally from the gathered value when saving; gathered and cut back
to ``SS`` after loading). Ragged parameters (``RS``, held as plain tensors: this rank's piece)
and their optimizer state travel the same way, as ``S(d)`` DTensors of the global shape.
"""

from __future__ import annotations

import difflib
import io
import os
import pickle
import re
import shutil
import warnings
from dataclasses import dataclass
from typing import Any

STOP_ENV = "SPMDC_TEST_SAVE_STOP"   # test hook: end a save at a point (see _reached)
_DCP_FILE = re.compile(r"^(\.metadata(\.tmp)?|__\d+_\d+\.distcp|__\d+\.metadata(\.tmp)?)$")
# param_group entries that choose an implementation, not the update: the caller's, unreported
_IMPLEMENTATION = frozenset({"params", "initial_lr", "foreach", "fused", "capturable", "differentiable"})


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or read as asked; the message names the checkpoint,
    the file or parameter, and the reason."""


class CheckpointWarning(UserWarning):
    """A checkpoint loaded with a difference the caller should know of (an optimizer setting)."""

    every_rank = True   # each rank loads the same settings: ``spmdc run`` prints rank 0's


@dataclass
class CheckpointView:
    """One rank's part of a module, as :func:`save` and :func:`load` see it, for every layout kind.

    ``module`` is an ``nn.Module`` holding this rank's parameters (DTensors) and persistent buffers
    under the model's own names (``get_state_dict(module, opt)`` gives its entries): the compiled
    module itself on one mesh and on device groups, a view of its stage's parameters in a pipeline.
    The groups say which ranks take part: ``group`` every rank that calls save/load (errors are
    agreed over it), ``write_group`` the ranks that write when ``writes`` (device groups: the first
    group's, since every group holds the whole model), ``read_group`` the ranks that read together.
    A pipeline stage holds part of the model: ``entries`` are the whole model's (key -> global
    shape; None: the module's own), ``written_elsewhere`` the entries (model keys and optimizer
    names) this rank holds but another stage writes (a tied parameter), ``params`` every parameter
    name of the model (the optimizer's ``params`` as a one-mesh checkpoint holds them; None: the
    optimizer's own). Ragged parameters exist on one mesh only (``module._ragged_layout``)."""

    module: Any
    optimizer: Any
    can_train: bool
    plan: str
    mesh: str
    device: Any
    group: Any = None
    write_group: Any = None
    writes: bool = True
    read_group: Any = None
    entries: dict[str, tuple[int, ...] | None] | None = None
    written_elsewhere: frozenset[str] = frozenset()
    params: list[str] | None = None

    def ragged_layout(self, key: str) -> Any:
        """The storage layout of model entry ``key`` when it is a ragged parameter, else None."""
        fn = getattr(self.module, "_ragged_layout", None)
        return fn(key) if fn is not None else None


# -- where a checkpoint is --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Places:
    """A checkpoint directory and its two siblings: the save being written, the checkpoint it replaces."""

    path: str
    saving: str
    replaced: str

    @staticmethod
    def of(path: str) -> _Places:
        full = os.path.abspath(path)
        parent, name = os.path.split(full)
        return _Places(full, os.path.join(parent, f".{name}.saving"), os.path.join(parent, f".{name}.replaced"))


def _is_checkpoint(path: str) -> bool:
    return os.path.isfile(os.path.join(path, ".metadata"))


def located(path: str) -> str:
    """The directory that holds the checkpoint saved to ``path``: ``path`` itself, or the previous
    checkpoint a save moved aside when it was interrupted between its two renames."""
    places = _Places.of(path)
    if _vacant(places.path) and _is_checkpoint(places.replaced):
        return places.replaced
    return path


def _vacant(path: str) -> bool:
    """Nothing at ``path``, or an empty directory (``spmdc run --save`` makes one before ranks start)."""
    return not os.path.exists(path) or (os.path.isdir(path) and not os.listdir(path))


def _reached(point: str) -> None:
    """Test hook: with ``SPMDC_TEST_SAVE_STOP=<point>`` the process ends here at once, as if
    killed (``<point>:raise``: a :class:`CheckpointError` instead, for a job that goes on).
    Points: ``shards`` (every rank, its files written), ``metadata`` (``.metadata`` written),
    ``aside`` (the previous checkpoint moved aside), ``renamed`` (the new one in place)."""
    want = os.environ.get(STOP_ENV, "")
    if want.split(":")[0] != point:
        return
    if want.endswith(":raise"):
        raise CheckpointError(f"save stopped at '{point}' ({STOP_ENV})")
    os._exit(75)


def _replaceable(places: _Places, shown: str) -> str | None:
    """Why ``path`` may not be replaced by a checkpoint (a file; a directory holding what DCP
    does not write), or None."""
    if os.path.isfile(places.path):
        return f"cannot save checkpoint '{shown}': it is a file"
    if not os.path.isdir(places.path):
        return None
    others = sorted(n for n in os.listdir(places.path) if not _DCP_FILE.match(n))
    if others:
        return (f"cannot save checkpoint '{shown}': the directory holds {len(others)} file(s) a checkpoint does "
                f"not ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); spmdc replaces only "
                "checkpoints: give a new or empty directory")
    return None


def unreplaceable(path: str) -> str | None:
    """Why a save may not replace what is at ``path`` (a file; a directory holding files a
    checkpoint does not), or None: for checking ``spmdc run --save`` before ranks start."""
    return _replaceable(_Places.of(path), path)


def _tidy(places: _Places) -> None:
    """Before a save (one rank): drop a save an earlier crash left half-written; put back a
    checkpoint moved aside by a save that stopped between its renames, or drop it when the new
    one made it into place."""
    if os.path.exists(places.saving):
        shutil.rmtree(places.saving)
    if os.path.isdir(places.replaced):
        if _vacant(places.path):
            if os.path.isdir(places.path):
                os.rmdir(places.path)
            os.rename(places.replaced, places.path)
        elif _is_checkpoint(places.path):
            shutil.rmtree(places.replaced)


def _commit(places: _Places) -> None:
    """After every rank wrote into ``saving`` (one rank): ``path`` moved aside, ``saving``
    renamed into its place, the old one removed."""
    if os.path.isdir(places.replaced):
        shutil.rmtree(places.replaced)
    if os.path.exists(places.path):
        os.rename(places.path, places.replaced)
        _reached("aside")
    os.rename(places.saving, places.path)
    _sync_dir(os.path.dirname(places.path))
    _reached("renamed")
    if os.path.isdir(places.replaced):
        shutil.rmtree(places.replaced)


def _sync_dir(path: str) -> None:
    """Make the renames in ``path`` durable (where the platform can)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _writer(path: str) -> Any:
    """DCP's file writer with the test hook's points after the shard files and ``.metadata``."""
    from torch.distributed.checkpoint import FileSystemWriter

    class _Writer(FileSystemWriter):
        def write_data(self, plan: Any, planner: Any) -> Any:
            fut = super().write_data(plan, planner)
            fut.wait()
            _reached("shards")
            return fut

        def finish(self, metadata: Any, results: Any) -> None:
            super().finish(metadata, results)
            _reached("metadata")

    return _Writer(path)


def agreed(view: CheckpointView, error: str | None) -> None:
    """Every rank of ``view.group`` learns every rank's error (a collective); all raise the first one."""
    import torch.distributed as dist

    errors: list[Any] = [None] * dist.get_world_size(view.group)
    dist.all_gather_object(errors, error, group=view.group)
    first = next((e for e in errors if e), None)
    if first:
        raise CheckpointError(first)


def _leader(view: CheckpointView) -> bool:
    """Whether this rank tidies and commits: the first writer (DCP's coordinator, whose save
    returns once every writer's files and ``.metadata`` are written)."""
    import torch.distributed as dist

    return view.writes and dist.get_rank(view.write_group) == 0


def _dcp(what: str, path: str, fn: Any, md: Any = None) -> Any:
    """Run a DCP call; its ``CheckpointException`` (a ``BaseException``, which would end a rank
    without a Python error) becomes one CheckpointError naming the damaged file (when reading:
    ``md`` is the checkpoint's metadata) or the checkpoint and the first failure."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        return fn()
    except CheckpointException as e:
        rank, (exc, _trace) = next(iter(sorted(e.failures.items(), key=lambda kv: kv[0])))
        if isinstance(exc, CheckpointError):
            raise CheckpointError(str(exc)) from None
        damaged = _probe(path, md) if md is not None else None
        if damaged:
            raise CheckpointError(damaged) from None
        raise CheckpointError(f"checkpoint '{path}': {what} failed on rank {rank}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= 120 else text[:117] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _probe(path: str, md: Any) -> str | None:
    """After a failed read: the first entry whose bytes do not unpickle, as "checkpoint FILE is
    damaged (ENTRY: reason)"; None when every entry reads (the failure was elsewhere)."""
    import torch
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    where = located(path)
    items = sorted(md.storage_data.items(), key=lambda kv: (kv[1].relative_path, kv[1].offset))
    for index, info in items:
        if getattr(info, "transform_descriptors", None):
            continue   # compressed or otherwise transformed: not readable as it lies
        try:
            with open(os.path.join(where, info.relative_path), "rb") as f:
                f.seek(info.offset)
                data = f.read(info.length)
            tensor = not isinstance(md.state_dict_metadata.get(index.fqn), BytesStorageMetadata)
            torch.load(io.BytesIO(data), map_location="cpu", weights_only=tensor)
        except Exception as e:  # noqa: BLE001 - whatever it is, this entry is what cannot be read
            return f"checkpoint {_shown(path, info.relative_path)} is damaged ({index.fqn}: {_reason(e)})"
    return None


# -- what a checkpoint holds, and whether it is whole ------------------------------------------------

def _shown(path: str, name: str = "") -> str:
    """``path`` as the user wrote it, with ``name`` inside it."""
    return os.path.join(path, name) if name else path


def read_metadata(path: str) -> Any:
    """DCP's ``.metadata`` of the checkpoint at ``path`` (see :func:`located`), with every file it
    names present and long enough; else a CheckpointError naming the damaged file."""
    from torch.distributed.checkpoint import FileSystemReader

    where = located(path)
    if not os.path.isdir(where):
        raise CheckpointError(f"checkpoint '{path}': no such directory")
    if not _is_checkpoint(where):
        raise CheckpointError(f"checkpoint '{path}' has no .metadata file: it is not a checkpoint, or its save "
                              "did not finish")
    try:
        md = FileSystemReader(where).read_metadata()
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same: damaged
        raise CheckpointError(f"checkpoint {_shown(path, '.metadata')} is damaged ({_reason(e)})") from None
    if not isinstance(getattr(md, "storage_data", None), dict):
        raise CheckpointError(f"checkpoint {_shown(path, '.metadata')} is damaged (no table of its files)")
    _check_files(path, where, md)
    return md


def _check_files(path: str, where: str, md: Any) -> None:
    """Every file ``.metadata`` names exists and reaches the last byte it reads from it."""
    need: dict[str, int] = {}
    for info in md.storage_data.values():
        end = int(getattr(info, "offset", 0)) + int(getattr(info, "length", 0))
        need[info.relative_path] = max(need.get(info.relative_path, 0), end)
    for name in sorted(need):
        file = os.path.join(where, name)
        if not os.path.isfile(file):
            raise CheckpointError(f"checkpoint {_shown(path, name)} is missing (.metadata names it)")
        size = os.path.getsize(file)
        if size < need[name]:
            raise CheckpointError(f"checkpoint {_shown(path, name)} is damaged (truncated: {size:,} of at least "
                                  f"{need[name]:,} bytes)")


def _read_alone(path: str, state: dict[str, Any], md: Any) -> None:
    """DCP's load of ``state`` from the checkpoint at ``path`` in this process alone (no process group)."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "assuming the intent is to load in a single process"
        _dcp("reading", path, lambda: dcp.load(state, checkpoint_id=located(path), no_dist=True), md)


def _read_spmdc(path: str) -> dict[str, Any]:
    """What :func:`save` pickled beside the tensors, read in this process alone."""
    state = {"spmdc": io.BytesIO()}
    _read_alone(path, state, read_metadata(path))
    state["spmdc"].seek(0)
    try:
        return pickle.loads(state["spmdc"].read())
    except Exception as e:  # noqa: BLE001 - damaged bytes
        raise CheckpointError(f"checkpoint '{path}': its spmdc record is damaged ({_reason(e)})") from None


def read_whole(path: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The model state and optimizer state of the checkpoint at ``path``, whole tensors read in
    this process alone (no process group): ``({fqn: tensor}, {fqn: {slot: value}})``, as one
    device's ``model.state_dict()`` and ``optimizer.state`` by parameter name hold them (no
    optimizer state for an optimizer saved before its first step)."""
    import torch
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    md = read_metadata(path)
    state: dict[str, Any] = {"spmdc": io.BytesIO()} if "spmdc" in md.state_dict_metadata else {}
    for key, meta in md.state_dict_metadata.items():
        if key.startswith(("model.", "optim.state.")):
            state[key] = torch.empty(tuple(meta.size), dtype=meta.properties.dtype) \
                if isinstance(meta, TensorStorageMetadata) else io.BytesIO()
    _read_alone(path, state, md)
    model = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    optim: dict[str, dict[str, Any]] = {}
    if "spmdc" in state and (pickle.loads(state["spmdc"].getvalue()).get("optimizer") or {}).get("fresh"):
        return model, optim   # (an optimizer that had taken no step: no state of its own)
    for key, value in state.items():
        if key.startswith("optim.state."):
            fqn, slot = key.removeprefix("optim.state.").rsplit(".", 1)
            optim.setdefault(fqn, {})[slot] = value
    return model, optim


def read_meta(path: str) -> dict[str, Any]:
    """What :func:`save` wrote beside the tensors (``extra``, plan, mesh, optimizer), read in this
    process alone (no ranks needed): for checking a checkpoint before starting a job on it. A
    damaged checkpoint raises CheckpointError naming the file."""
    md = read_metadata(path)
    if "spmdc" not in md.state_dict_metadata:
        raise CheckpointError(f"checkpoint '{path}' was not written by spmdc (no 'spmdc' entry)")
    return _read_spmdc(path)


# -- the optimizer a checkpoint is written from and read into ----------------------------------------

def _class_name(opt: Any) -> str:
    from spmdc.runtime.optimizers import class_name

    return class_name(type(opt))


def _record(opt: Any, fresh: bool = False) -> dict[str, Any] | None:
    """The saved optimizer: its class (None: saved without optimizer state); ``fresh``: it had taken
    no step yet (the state saved is what torch's ``get_state_dict`` makes up for it, not its own)."""
    if opt is None:
        return None
    return {"class": _class_name(opt), "groups": len(opt.param_groups)} | ({"fresh": True} if fresh else {})


def live_optimizers(view: CheckpointView) -> list[Any]:
    """The live ``torch.optim`` optimizers other than the module's own over any of its parameters."""
    import gc

    import torch

    mine = {id(p) for p in view.module.parameters()}
    gc.collect()   # an optimizer dropped but caught in a reference cycle is not live
    return [o for o in gc.get_objects() if isinstance(o, torch.optim.Optimizer) and o is not view.optimizer
            and any(id(p) in mine for g in o.param_groups for p in g["params"])]


def _found(view: CheckpointView, doing: str, path: str) -> Any:
    """The one live optimizer over the module's parameters (None without one); several: refused."""
    found = live_optimizers(view)
    if len(found) > 1:
        names = ", ".join(sorted(type(o).__name__ for o in found))
        raise CheckpointError(f"{doing}('{path}'): {len(found)} optimizers ({names}) are over this module's "
                              f"parameters; pass the one to {doing.split('.')[-1]} (cm.{doing.split('.')[-1]}"
                              "(path, opt))")
    return found[0] if found else None


def _save_optimizer(view: CheckpointView, path: str, optimizer: Any, model_only: bool) -> Any:
    """The optimizer whose state a save writes: the one given, the module's own, or the live one
    over the module's parameters."""
    if model_only:
        return None
    if optimizer is not None:
        return optimizer
    if view.optimizer is not None:
        return view.optimizer
    return _found(view, "cm.save", path) if view.can_train else None


def _saved_optimizer(md: Any, meta: dict[str, Any]) -> dict[str, Any] | None:
    """The record of the optimizer a checkpoint holds state of (class None: saved before spmdc
    recorded it), or None when it holds none."""
    if "optimizer" in meta:
        return meta["optimizer"]
    return {"class": None} if any(k.startswith("optim.") for k in md.state_dict_metadata) else None


def _load_optimizer(view: CheckpointView, path: str, optimizer: Any, model_only: bool, md: Any,
                    meta: dict[str, Any]) -> Any:
    """The optimizer a load reads state into (None: the model alone); refuses a checkpoint with
    optimizer state and nowhere to put it (in a training module)."""
    if model_only:
        return None
    opt = optimizer if optimizer is not None else view.optimizer
    if opt is None and view.can_train:
        opt = _found(view, "cm.load", path)
    saved = _saved_optimizer(md, meta)
    if opt is None:
        if saved is not None and view.can_train:
            what = f"optimizer {_short(saved['class'])}" if saved.get("class") else "an optimizer"
            raise CheckpointError(f"checkpoint '{path}' holds the state of {what}, and this module has no "
                                  "optimizer to load it into: pass it (cm.load(path, opt)), or model_only=True to "
                                  "load the model alone")
        return None
    check_optimizer(path, opt, md, meta)
    return opt


def check_optimizer(path: str, opt: Any, md: Any, meta: dict[str, Any]) -> None:
    """``opt`` can take the optimizer state of the checkpoint at ``path`` (metadata ``md``, spmdc
    record ``meta``): the checkpoint holds some, of ``opt``'s class and number of groups."""
    saved = _saved_optimizer(md, meta)
    now = _class_name(opt)
    if saved is None:
        raise CheckpointError(f"checkpoint '{path}' holds no optimizer state (it was saved without an optimizer): "
                              f"{_short(now)}'s state cannot come from it; pass model_only=True to load the model "
                              f"alone and start {_short(now)} fresh")
    if saved.get("class") and saved["class"] != now:
        raise CheckpointError(f"checkpoint '{path}' holds the state of optimizer {_short(saved['class'])}, not "
                              f"{_short(now)}: another optimizer's state cannot resume this one (build "
                              f"{_short(saved['class'])}, or pass model_only=True to start {_short(now)} fresh)")
    groups = {k.split(".")[2] for k in md.state_dict_metadata if k.startswith("optim.param_groups.")}
    if groups and len(groups) != len(opt.param_groups):
        raise CheckpointError(f"checkpoint '{path}' holds {len(groups)} parameter group(s) of optimizer "
                              f"{_short(now)}; this one has {len(opt.param_groups)}")


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _settings(opt: Any) -> list[dict[str, Any]]:
    """Each param_group's settings (everything but its parameters)."""
    return [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]


def _plain_value(v: Any) -> Any:
    if hasattr(v, "tolist"):
        v = v.tolist()
    return list(map(_plain_value, v)) if isinstance(v, (list, tuple)) else v


def _keep_settings(path: str, opt: Any, mine: list[dict[str, Any]], saved: list[dict[str, Any]]) -> None:
    """Put the caller's settings back into ``opt``'s groups (a load replaced them with the saved
    ones) and warn once, naming every setting that differs; a learning rate an LR scheduler
    drives stays the checkpoint's (schedule state)."""
    diffs = []
    for i, (group, own, old) in enumerate(zip(opt.param_groups, mine, saved)):
        for key, value in own.items():
            if key == "lr" and "initial_lr" in own:
                continue   # the scheduler's current value: the checkpoint's
            group[key] = value
            if key in _IMPLEMENTATION or key not in old or _plain_value(old[key]) == _plain_value(value):
                continue
            where = f"group {i} " if len(mine) > 1 else ""
            diffs.append(f"{where}{key} {old[key]!r} there, {value!r} now")
    if diffs:
        warnings.warn(f"checkpoint '{path}': optimizer {type(opt).__name__} keeps its own settings, which differ "
                      f"from the saved ones: {'; '.join(diffs)}", CheckpointWarning, stacklevel=4)


# -- the model a checkpoint is read into ---------------------------------------------------------------

def _shape(view: CheckpointView, key: str, value: Any) -> tuple[int, ...] | None:
    """The global shape of model entry ``key`` (a ragged parameter's is its whole tensor's)."""
    if view.ragged_layout(key) is not None:
        cm = view.module
        return tuple(cm.store.shapes[_fqn(cm, key)])
    return tuple(value.shape) if hasattr(value, "shape") else None


def _check_model(view: CheckpointView, path: str, md: Any, state: dict[str, Any]) -> None:
    """The checkpoint holds exactly this model's entries (the whole model's, of which a pipeline
    stage holds some), each of this model's shape; else one error naming the first difference
    (with the nearest names there)."""
    model = view.entries if view.entries is not None else {k: _shape(view, k, v) for k, v in state.items()}
    saved = {k[len("model."):]: m for k, m in md.state_dict_metadata.items() if k.startswith("model.")}
    def refuse(names: list[str], among: Any, what: str, shown: Any, where: str) -> None:
        if names:
            near = difflib.get_close_matches(names[0], list(among), n=1)
            raise CheckpointError(
                f"checkpoint '{path}' {what} ({', '.join(shown(k) for k in names[:3])}"
                f"{', ...' if len(names) > 3 else ''}{f'; nearest {where}: {near[0]!r}' if near else ''}): "
                "it was saved from another model")

    missing = sorted(k for k in model if k not in saved)
    refuse(missing, saved, f"lacks {len(missing)} of the {len(model)} entries of this model",
           lambda k: "model." + k, "there")
    extra = [k for k in saved if k not in model]
    refuse(extra, model, f"holds {len(extra)} model entries this model does not have", repr, "here")
    for key, here in model.items():
        there = getattr(saved[key], "size", None)
        if there is not None and here is not None and tuple(there) != tuple(here):
            raise CheckpointError(f"checkpoint '{path}': parameter '{key}' has shape {tuple(there)} there, "
                                  f"{tuple(here)} in this model")


def read_state(path: str, md: Any, state: dict[str, Any], group: Any = None) -> None:
    """DCP's load of ``state`` from the checkpoint at ``path`` (metadata ``md``), every rank of
    ``group``; a failure is one CheckpointError naming the damaged file."""
    import torch.distributed.checkpoint as dcp

    _dcp("loading", path, lambda: dcp.load(state, checkpoint_id=located(path), process_group=group), md)


def _check_optim_keys(path: str, md: Any, state: dict[str, Any]) -> None:
    """Every optimizer entry this optimizer needs is in the checkpoint (another optimizer's are not)."""
    saved = md.state_dict_metadata
    wanted = [f"optim.state.{fqn}.{stat}" for fqn, stats in state.get("optim", {}).get("state", {}).items()
              for stat in stats]
    missing = [k for k in wanted if k not in saved]
    if missing:
        raise CheckpointError(f"checkpoint '{path}' lacks {len(missing)} of the {len(wanted)} entries this "
                              f"optimizer needs ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): it "
                              "was saved from another optimizer")


# -- save and load -------------------------------------------------------------------------------------

def save(view: CheckpointView, path: str, optimizer: Any = None, extra: dict[str, Any] | None = None,
         model_only: bool = False) -> None:
    """Write the module's state and its optimizer's (``optimizer``, else the module's own, else the
    one live optimizer over its parameters; none with ``model_only``) to the directory ``path``,
    atomically: every rank of ``view.group`` calls it, and until it returns the previous checkpoint
    there stays whole. The ranks of ``view.write_group`` write (each value once: DCP keeps one copy
    of what several ranks hold alike)."""
    import torch
    import torch.distributed.checkpoint as dcp

    places = _Places.of(path)
    error = _replaceable(places, path)
    opt, fresh = None, False
    try:
        opt = _save_optimizer(view, path, optimizer, model_only)
        # an optimizer that has taken no step: torch's get_state_dict makes its state up by a step of
        # lr 0 (step counts 1), and the first real step would then count 2 (Adam's bias correction):
        # saving must not change the training, so it is fresh again after the save, and so on load
        fresh = opt is not None and not opt.state
        if error is None and _leader(view):
            _tidy(places)
    except (CheckpointError, OSError) as e:
        error = error or (str(e) if isinstance(e, CheckpointError) else _os_error("save", path, e))
    agreed(view, error)   # also the barrier: nothing is written before the leftovers are gone
    if view.writes:
        state = _state(view, opt, saving=True)
        meta = {"extra": dict(extra or {}), "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state() if view.device.type == "cuda" else None,
                "plan": view.plan, "mesh": view.mesh, "optimizer": _record(opt, fresh)}
        state["spmdc"] = io.BytesIO(pickle.dumps(meta))
        for container, key, dt in _strided_entries(state):
            container[key] = _plain(dt, dt.full_tensor())
        for container, key, piece, layout, shape in _ragged_entries(view, state):
            cm = view.module
            container[key] = _as_shard(cm, layout, shape, cm.store.full(piece.detach(), layout, shape), piece)
        _dcp("saving", path, lambda: dcp.save(state, storage_writer=_writer(places.saving),
                                              process_group=view.write_group))
    error = None
    if _leader(view):
        try:
            _commit(places)
        except (CheckpointError, OSError) as e:
            error = str(e) if isinstance(e, CheckpointError) else _os_error("save", path, e)
    if opt is not None and fresh:
        opt.state.clear()
    agreed(view, error)


def _os_error(doing: str, path: str, e: OSError) -> str:
    """``cannot save checkpoint 'ckpt': Permission denied ('ckpt/..')``."""
    return f"cannot {doing} checkpoint '{path}': {e.strerror or e}" + (f" ('{e.filename}')" if e.filename else "")


def load(view: CheckpointView, path: str, optimizer: Any = None, model_only: bool = False) -> dict[str, Any]:
    """Read a checkpoint of :func:`save` (of any layout kind) into the module and its optimizer
    (``optimizer``, else the module's own, else the one live optimizer over its parameters; none
    with ``model_only``), resharded to their current layouts; restores torch's generator; returns
    the saved ``extra``. The optimizer keeps its own settings (a difference from the saved ones: a
    CheckpointWarning). Every rank of ``view.read_group`` calls it together."""
    import torch
    from torch.distributed.checkpoint.state_dict import set_state_dict

    md = read_metadata(path)
    if "spmdc" not in md.state_dict_metadata:
        raise CheckpointError(f"checkpoint '{path}' was not written by spmdc (no 'spmdc' entry)")
    opt = _load_optimizer(view, path, optimizer, model_only, md, _read_spmdc(path))
    mine = _settings(opt) if opt is not None else []
    state = _state(view, opt, saving=False)
    _check_model(view, path, md, state["model"])
    _check_optim_keys(path, md, state)
    for i, group in enumerate(state.get("optim", {}).get("param_groups", [])):
        for key in [k for k in group if f"optim.param_groups.{i}.{k}" not in md.state_dict_metadata]:
            del group[key]   # a setting the saved optimizer did not have (initial_lr): the caller's stays
    state["spmdc"] = io.BytesIO()
    swapped = []
    for container, key, dt in _strided_entries(state):
        container[key] = _plain(dt)
        swapped.append((container, key, dt, container[key]))
    ragged = []
    for container, key, piece, layout, shape in _ragged_entries(view, state):
        container[key] = _as_shard(view.module, layout, shape, None, piece)
        ragged.append((container, key, piece, layout, container[key]))
    read_state(path, md, state, view.read_group)
    _restore_strided(swapped)
    _restore_ragged(ragged, view.module)
    saved_groups = [dict(g) for g in state.get("optim", {}).get("param_groups", [])]
    set_state_dict(view.module, opt if opt is not None else [], model_state_dict=state["model"],
                   optim_state_dict=state.get("optim", {}))
    if opt is not None:
        _keep_settings(path, opt, mine, saved_groups)
    buf = state["spmdc"]
    buf.seek(0)
    meta = pickle.loads(buf.read())
    if opt is not None and (meta.get("optimizer") or {}).get("fresh"):
        opt.state.clear()   # (saved before its first step: it goes on fresh, as it was)
    torch.set_rng_state(meta["rng"])
    if meta.get("cuda_rng") is not None and view.device.type == "cuda":
        torch.cuda.set_rng_state(meta["cuda_rng"])
    return meta["extra"]


def _state(view: CheckpointView, optimizer: Any, saving: bool) -> dict[str, Any]:
    """``{"model": ..., "optim": ...}`` of the module (torch's ``get_state_dict``); when saving,
    without what another rank writes and with the whole model's parameter names."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(view.module, optimizer if optimizer is not None else [])
    state: dict[str, Any] = {"model": model_sd}
    if optimizer is not None:
        state["optim"] = optim_sd
    if not saving:
        return state
    state = _containers_copied(state)   # entries are swapped and dropped: never in the optimizer's own state
    model_sd, optim_sd = state["model"], state.get("optim", {})
    for key in view.written_elsewhere:
        model_sd.pop(key, None)
        if optimizer is not None:
            optim_sd["state"].pop(key, None)
    if optimizer is not None and view.params is not None and len(optim_sd["param_groups"]) == 1:
        optim_sd["param_groups"][0]["params"] = list(view.params)
    return state


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


def _ragged_entries(view: CheckpointView, state: dict[str, Any]) -> list[tuple[Any, Any, Any, Any, tuple[int, ...]]]:
    """``(container, key, piece, layout, global shape)`` for every ragged parameter in
    ``state["model"]`` and every tensor of its optimizer state shaped like its piece (one mesh)."""
    out = []
    cm = view.module
    for key, v in state["model"].items():
        lay = view.ragged_layout(key)
        if lay is not None:
            out.append((state["model"], key, v, lay, cm.store.shapes[_fqn(cm, key)]))
    for fqn, stats in state.get("optim", {}).get("state", {}).items():
        lay = view.ragged_layout(fqn)
        if lay is None:
            continue
        piece_shape = tuple(cm.get_parameter(fqn).shape)
        for stat, v in stats.items():
            if hasattr(v, "shape") and v.dim() > 0 and tuple(v.shape) == piece_shape:
                out.append((stats, stat, v, lay, cm.store.shapes[_fqn(cm, fqn)]))
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


def _restore_strided(swapped: list[tuple[Any, Any, Any, Any]]) -> None:
    """Cut each loaded plain-layout value back into its strided DTensor (in place), on the
    DTensor's own mesh (a stage's or a group's as well as the module's)."""
    import torch.distributed as dist

    from spmdc.runtime.executor import local_piece
    from spmdc.sharding.mesh import Mesh, to_placement

    for container, key, orig, plain in swapped:
        dm = orig.device_mesh
        names = dm.mesh_dim_names or tuple(f"d{i}" for i in range(dm.ndim))
        mesh, rank = Mesh(dict(zip(names, dm.shape))), dm.mesh.flatten().tolist().index(dist.get_rank())
        piece = local_piece(plain.full_tensor(), [to_placement(p) for p in orig.placements], mesh, rank)
        orig.to_local().copy_(piece)
        container[key] = orig


def _restore_ragged(swapped: list[tuple[Any, Any, Any, Any, Any]], cm: Any) -> None:
    """Cut each loaded value back into the ragged piece it stands for (in place)."""

    from spmdc.runtime.executor import local_piece

    for container, key, piece, layout, loaded in swapped:
        piece.copy_(local_piece(loaded.full_tensor(), layout, cm.mesh, cm.rank))
        container[key] = piece
