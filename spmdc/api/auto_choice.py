"""``spmdc.compile(..., plan="auto")``: the layout search run inside a job, its choice the same on every rank.

    cm = spmdc.compile(model, (x,), plan="auto", train=True, loss_fn=F.cross_entropy, loss_inputs=(y,),
                       optimizer="adamw")          # every rank of a torchrun job, as with any plan
    cm.auto_plan.label()                           # "fsdp on dp=4, keep gathered"
    open("chosen.yaml", "w").write(cm.auto_plan.plan_file())   # to read, edit and re-run

Rank 0 runs :func:`~spmdc.api.auto_plan.search` for the job's world size (``mesh=``: only the layouts
on that mesh) on :func:`default_device`'s profile with :data:`SEARCH_BUDGET` seconds, as ``spmdc run
--plan auto`` does, and broadcasts the best candidate that fits (the search's budget is wall time,
so ranks searching on their own could choose differently); every rank then compiles it. When no
layout fits or every one is refused, every rank raises the same error. What the search chooses
itself (``pp_schedule=``, ``microbatches=``) cannot be given with it, nor eager execution (the search
prices compiled programs); a DeviceMesh restricts the
search to its shape (the chosen layout's mesh is built as any mesh given by shape is).

``optimizer=`` given to ``compile`` (a name, ``(name, options)`` or :class:`~spmdc.runtime.optimizers.Optimizer`)
has its state priced in the memory; for a training step without one (an optimizer the user builds
over ``cm.parameters()``, FSDP2's way, or a factory) the search prices :data:`UNKNOWN_OPTIMIZER`'s
state and update, the largest of ``torch.optim``'s common ones, so that the chosen layout fits
whichever the user builds; name it (``optimizer="sgd"``) to have it priced as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SEARCH_AXES", "SEARCH_BUDGET", "UNKNOWN_OPTIMIZER", "choose_on_ranks", "default_device", "priced_optimizer",
           "why_none"]

SEARCH_BUDGET = 20.0
"""Seconds the search spends by default (``--search-budget``, :func:`~spmdc.api.auto_plan.search`'s ``budget_s``)."""


def default_device() -> Any:
    """The profile an automatic plan prices with: the stored ``local`` one (``spmdc calibrate``) when
    there is one, else ``h100`` where CUDA is available, else ``cpu``."""
    import torch

    from spmdc.compiler.devices import device_profile, stored_profiles

    if "local" in stored_profiles():
        return device_profile("local")
    return device_profile("h100" if torch.cuda.is_available() else "cpu")


SEARCH_AXES = ("pp", "rep", "dp", "tp", "ep")
"""The mesh axes the search lays out (:func:`spmdc.api.auto_plan.candidates`)."""


def why_none(mesh: Any) -> str:
    """Why the search has no candidate on ``mesh``: an axis it does not lay out (with near names),
    else what its meshes are."""
    import difflib

    for a in mesh.axis_names:
        if a not in SEARCH_AXES:
            near = difflib.get_close_matches(a, SEARCH_AXES, n=2)
            return (f"mesh axis '{a}' is not one the search lays out ({', '.join(SEARCH_AXES)})"
                    + (f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""))
    size = dict(zip(mesh.axis_names, (mesh.axis_size(a) for a in mesh.axis_names)))
    why = ("'rep' (hsdp's replicas) only beside 'dp'" if "rep" in size and "dp" not in size else
           f"tp of at most 8 (one node), not tp={size['tp']}" if size.get("tp", 1) > 8 else
           "'ep' only for a model with experts (mixture-of-experts layers)" if "ep" in size else
           f"pp={size['pp']} only for training steps of a model with at least {size['pp']} repeated blocks (one "
           "stage each at most)"
           if "pp" in size else "its candidates on this mesh were all left out")
    return f"the search lays out {why}"


UNKNOWN_OPTIMIZER = "adamw"
"""What a training step's optimizer is priced as when ``compile`` is given none, or a factory
(two float32 states per parameter: Adam's, AdamW's; SGD with momentum and Adagrad hold one)."""


def priced_optimizer(optimizer: Any, train: bool) -> str | None:
    """The ``torch.optim`` name the search prices the state and update of: the one given by name
    (``"adamw"``, ``("adamw", {...})``, an :class:`~spmdc.runtime.optimizers.Optimizer`), else for a
    training step :data:`UNKNOWN_OPTIMIZER`; None for a forward."""
    if not train:
        return None
    if isinstance(optimizer, str):
        return optimizer
    if isinstance(optimizer, tuple) and optimizer and isinstance(optimizer[0], str):
        return optimizer[0]
    name = getattr(optimizer, "name", None)   # (spmdc's Optimizer; a factory has none)
    return name if isinstance(name, str) else UNKNOWN_OPTIMIZER


def _as_mesh(mesh: Any) -> Any:
    """``mesh`` (text, :class:`~spmdc.sharding.mesh.Mesh` or a named DeviceMesh) as a Mesh, or None."""
    from spmdc.sharding.mesh import Mesh, _is_device_mesh

    if _is_device_mesh(mesh):
        names = mesh.mesh_dim_names
        if not names:
            raise ValueError('spmdc.compile(plan="auto"): the DeviceMesh needs named dims (mesh_dim_names)')
        return Mesh(list(zip(names, mesh.mesh.shape)))
    return Mesh.parse(mesh) if isinstance(mesh, str) else mesh


def _whole_batch(values: Sequence[Any], world: int) -> list[Any]:
    """A global batch of the shapes ``world`` ranks' pieces make (each batched tensor ``world`` times along dim 0)."""
    import torch

    return [torch.cat([v] * world) if isinstance(v, torch.Tensor) and v.dim() else v for v in values]


def _one_piece_per_rank(only: Callable[[Any], bool] | None, world: int, inputs: Sequence[Any],
                        kwargs: dict[str, Any] | None) -> Callable[[Any], bool]:
    """``only`` and a layout with ``world`` data-parallel replicas (``inputs="local"``: the user's
    pieces were cut before the choice, one per rank, as a DistributedSampler over the job cuts them)."""
    from spmdc.runtime.input_check import batch_replicas
    from spmdc.sharding.mesh import Mesh

    first = next((t for t in (*inputs, *(kwargs or {}).values()) if hasattr(t, "dim")), None)
    ndim = first.dim() if first is not None else 1

    def replicas(c: Any) -> int:
        return 0 if c.pipeline else batch_replicas(c.preset, Mesh(list(c.mesh)), ndim)
    return lambda c: (only is None or only(c)) and replicas(c) == world


def _mesh_filter(mesh: Any, world: int) -> Callable[[Any], bool] | None:
    """The candidates on ``mesh`` (a Mesh), or None for every mesh; refused when its size is not the
    job's."""
    if mesh is None:
        return None
    if mesh.size != world:
        raise ValueError(f'spmdc.compile(plan="auto"): mesh {mesh} has {mesh.size} devices but the job has {world} '
                         "ranks")
    text = str(mesh)
    return lambda c: c.mesh_text == text


def choose_on_ranks(model: Any, example_inputs: Any, *, mesh: Any, train: bool, loss_fn: Callable | None,
                    loss_inputs: Sequence[Any], optimizer: Any, example_kwargs: dict[str, Any] | None,
                    options: Any) -> Any:
    """The best candidate (a :class:`~spmdc.api.auto_plan.Candidate`), searched on rank 0 and the same
    on every rank of the initialized job (see the module doc)."""
    import torch.distributed as dist

    from spmdc.api.auto_plan import search
    from spmdc.compiler.driver import split_example_inputs

    if not dist.is_initialized():
        raise ValueError('spmdc.compile(plan="auto"): call it on every rank of an initialized job (the search '
                         "runs for its world size)")
    if options.execution == "eager":
        raise ValueError('spmdc.compile(plan="auto"): eager execution (op by op, spmdc.eager) is not what the '
                         "search prices (compiled programs); give a plan to run eagerly")
    for what, given in (("pp_schedule", options.pp_schedule), ("microbatches", options.microbatches)):
        if given is not None:
            raise ValueError(f'spmdc.compile(plan="auto"): {what}={given!r}: the search chooses it; give a plan '
                             "to set it")
    world = dist.get_world_size()
    mesh = _as_mesh(mesh)
    only = _mesh_filter(mesh, world)
    payload: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            inputs, loss_args = split_example_inputs(example_inputs, loss_fn, loss_inputs)
            if options.inputs == "local":   # (rank 0's piece stands for every rank's: the global batch's shapes)
                only = _one_piece_per_rank(only, world, inputs, example_kwargs)
                inputs, loss_args, example_kwargs = _whole_batch(inputs, world), _whole_batch(loss_args, world), \
                    dict(zip(example_kwargs or {}, _whole_batch(list((example_kwargs or {}).values()), world)))
            ranked = search(model, inputs, nproc=world, device=default_device(),
                            memory_cap=options.memory_cap or None, train=train, loss_fn=loss_fn,
                            loss_inputs=loss_args, kwargs=example_kwargs, optimizer=priced_optimizer(optimizer, train),
                            options=options, only=only, budget_s=SEARCH_BUDGET)
            best = ranked[0] if ranked else None
            if best is None:
                why = ("every layout there shares a piece among ranks, but inputs='local' gives every rank "
                       "a piece of its own (its DistributedSampler's over the job); give a plan, or "
                       "inputs='global'" if options.inputs == "local" else
                       f"{why_none(mesh)}; give a plan to run on this mesh" if mesh else "")
                payload[0] = f"no candidate layout for {world} ranks" + (f" on mesh {mesh}" if mesh else "") + (
                    f": {why}" if why else "")
            elif not best.ok:
                payload[0] = (f"every layout for {world} ranks was refused (first: {best.candidate.label()}: "
                              f"{best.refused})")
            elif not best.fits:
                cap = f"{options.memory_cap:,} bytes" if options.memory_cap else "the device's memory"
                payload[0] = (f"no layout for {world} ranks fits {cap} per rank (the smallest predicted peak: "
                              f"{min(s.peak_bytes for s in ranked if s.ok):,} bytes)")
            else:
                payload[0] = best.candidate
        except Exception as e:   # (every rank raises it, none waits for a choice that never comes)
            payload[0] = f"the search failed: {type(e).__name__}: {e}"
    dist.broadcast_object_list(payload, src=0)
    if isinstance(payload[0], str):
        raise ValueError(f'spmdc.compile(plan="auto"): {payload[0]}')
    return payload[0]
