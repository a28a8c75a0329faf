"""Switching strategy at run time (Hetu v2): re-specialize for a new plan and move the training
state there directly, without a checkpoint.

    cm = spmdc.compile(model, batch, mesh="dp=4", plan="fsdp", train=True, optimizer="adamw", ...)
    for _ in range(100): cm.step(x, y)
    cm = cm.switch(plan="megatron", mesh="tp=4")          # every rank calls it; same losses on
    for _ in range(100): cm.step(x, y)                    # as a run loaded from a checkpoint

    cm = cm.switch(plan="fsdp", mesh="dp=4", ranks=[0, 1, 2, 3])   # 6 ranks -> 4: on ranks 4 and 5
                                                                   # it returns None (they leave)

What moves: every parameter and every tensor of its optimizer state (AdamW's ``exp_avg``,
``exp_avg_sq``, SGD's momentum; laid out like the parameter), from each rank's piece of the old
layout on the old mesh to each rank's piece of the new layout on the new mesh (or the new
pipeline's stage meshes: a parameter two stages read goes to both). The tables are the
finest-slice tables of :mod:`spmdc.sharding.slices` (a rank sends only what the receiver lacks,
and copies locally what it keeps); all tensors for one (sender, receiver) pair are packed into
one buffer and every message of the switch goes in **one** ``batch_isend_irecv``. Scalars (the
optimizer's ``step``) travel with the small descriptor exchange every rank makes first.

The new program is compiled collectively by its ranks while the old module still holds the state;
ranks of the job outside the new mesh only send (a simulated device failure: the two dropped
ranks of 6 → 4 hand over their pieces and leave; the survivors' process groups are new ones over
the survivors). Refused by name: a source with device groups (heterogeneous plans) or pipeline
stages, strided shards (``SS``: several boxes per rank), a pipeline target on fewer ranks than
the job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from spmdc.sharding.slices import BsrPlan, MeshSpec, box_numel, box_view, bsr_plan


@dataclass
class SwitchReport:
    """What a switch did on this rank (and, summed over ranks, ``bytes_total``)."""

    seconds: float = 0.0
    compile_seconds: float = 0.0
    transfer_seconds: float = 0.0
    messages: int = 0
    bytes_sent: int = 0
    bytes_total: int = 0
    tensors: int = 0


@dataclass(frozen=True)
class Holding:
    """Where one tensor lives in a module: a mesh over job ranks and a layout on it."""

    mesh: MeshSpec
    layout: tuple
    shape: tuple[int, ...]


@dataclass
class _Side:
    holdings: dict[str, list[Holding]] = field(default_factory=dict)   # canonical fqn -> where


def _canonical(model: Any) -> dict[int, str]:
    out: dict[int, str] = {}
    for n, p in model.named_parameters():
        out.setdefault(id(p), n)
    return out


def _old_side(cm: Any) -> tuple[_Side, dict[str, Any]]:
    """The old module's holdings and this rank's local tensors per (fqn, slot)."""
    from spmdc.dialects.shard import StridedShard

    spec = MeshSpec(tuple(cm.mesh.axis_names), tuple(cm.mesh.shape), tuple(cm.members))
    side, local = _Side(), {}
    for fqn, layout in cm._storage.items():
        if any(isinstance(p, StridedShard) for p in layout):
            raise NotImplementedError(f"parameter '{fqn}' is stored with a strided shard {layout} (several pieces per "
                                      "rank): switching it directly is not supported yet; go through a checkpoint "
                                      "(cm.save / load)")
        side.holdings[fqn] = [Holding(spec, tuple(layout), tuple(cm._shapes[fqn]))]
        p = cm.get_parameter(fqn)
        local[(fqn, "param")] = p.to_local() if hasattr(p, "to_local") else p.detach()
        st = cm.optimizer.state.get(p, {}) if cm.optimizer is not None else {}
        for k, v in st.items():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                local[(fqn, k)] = v.to_local() if hasattr(v, "to_local") else v
    return side, local


def _scalars(cm: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if cm.optimizer is None:
        return out
    for fqn in cm._storage:
        st = cm.optimizer.state.get(cm.get_parameter(fqn), {})
        out[fqn] = {k: (v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v) for k, v in st.items()
                    if not (isinstance(v, torch.Tensor) and v.dim() > 0)}
        out[fqn]["__tensors__"] = sorted(k for k, v in st.items() if isinstance(v, torch.Tensor) and v.dim() > 0)
    return out


def _new_side(new: Any) -> _Side:
    """This rank's view of the new module's holdings (its own stage's, for a pipeline)."""
    side = _Side()
    if new is None:
        return side
    from spmdc.api.pipeline_module import PipelineModule

    if isinstance(new, PipelineModule):
        spec = new.plan.stages[new.stage]
        mesh = MeshSpec(tuple(spec.mesh.axis_names), tuple(spec.mesh.shape), tuple(spec.ranks))
        for name, p in new.params.items():
            fqn = new._aliases(name)[0]
            side.holdings[fqn] = [Holding(mesh, tuple(new._storage[name]), tuple(p.shape))]
        return side
    mesh = MeshSpec(tuple(new.mesh.axis_names), tuple(new.mesh.shape), tuple(new.members))
    for fqn, layout in new._storage.items():
        side.holdings[fqn] = [Holding(mesh, tuple(layout), tuple(new._shapes[fqn]))]
    return side


def _check_survivors(cm: Any, lost: frozenset[int]) -> None:
    """Every parameter is whole on the ranks that are not lost (else: refused, naming it)."""
    from spmdc.dialects.shard import ShardingAttr
    from spmdc.sharding.slices import pieces

    side, _ = _old_side(cm)
    for fqn, (h,) in sorted(side.holdings.items()):
        full = ((0, n) for n in h.shape)
        box = tuple(full)
        kept = [p for p in pieces(h.shape, ShardingAttr("old", h.layout), {"old": h.mesh}) if p.device not in lost]
        covered = sum(_numel(p.box) for p in _distinct(kept))
        if covered < _numel(box):
            raise NotImplementedError(
                f"parameter '{fqn}' ({h.layout} on {h.mesh.axes}) cannot be recovered: parts of it lived only on the "
                f"lost ranks {sorted(lost)}: restore from a checkpoint instead")


def _numel(box: Any) -> int:
    n = 1
    for s, e in box:
        n *= max(0, e - s)
    return n


def _distinct(ps: list[Any]) -> list[Any]:
    """Pieces of a plain layout either coincide or are disjoint: one of each box."""
    seen, out = set(), []
    for p in ps:
        if p.box not in seen:
            seen.add(p.box)
            out.append(p)
    return out


def _plans(old: _Side, new: _Side, lost: frozenset[int] = frozenset()) -> dict[str, list[BsrPlan]]:
    from spmdc.dialects.shard import ShardingAttr

    out = {}
    for fqn, dsts in sorted(new.holdings.items()):
        if fqn not in old.holdings:
            raise ValueError(f"the new module has parameter '{fqn}', which the old one does not hold")
        (src,) = old.holdings[fqn]
        plans = []
        for k, dst in enumerate(dsts):
            meshes = {"old": src.mesh, f"new{k}": dst.mesh}
            try:
                plans.append(bsr_plan(src.shape, ShardingAttr("old", src.layout), ShardingAttr(f"new{k}", dst.layout),
                                      meshes, lost))
            except (ValueError, NotImplementedError) as e:
                raise NotImplementedError(f"parameter '{fqn}': cannot move {src.layout} to {dst.layout}: {e}") from None
        out[fqn] = plans
    return out


def _targets(new: Any) -> dict[str, tuple[Any, Any]]:
    """fqn -> (parameter, optimizer) of the new module on this rank."""
    if new is None:
        return {}
    from spmdc.api.pipeline_module import PipelineModule

    if isinstance(new, PipelineModule):
        return {new._aliases(n)[0]: (p, new.optimizer) for n, p in new.params.items()}
    return {fqn: (new.get_parameter(fqn), new.optimizer) for fqn in new._storage}


def transfer(plans: dict[str, list[BsrPlan]], slots: dict[str, list[str]], local: dict[Any, Any], rank: int,
             dtypes: dict[Any, Any], device: Any) -> tuple[dict[Any, Any], int, int]:
    """Run every table at once: one buffer per (sender, receiver) pair, one ``batch_isend_irecv``.
    Returns this rank's received pieces per (fqn, slot), messages and bytes sent."""
    import torch.distributed as dist

    out: dict[Any, Any] = {}
    order = [(fqn, plan) for fqn in sorted(plans) for plan in plans[fqn]]
    for fqn, plan in order:   # this rank's destination pieces
        mine = next((p for p in plan.dst if p.device == rank), None)
        if mine is not None:
            for slot in slots[fqn]:
                out.setdefault((fqn, slot), torch.zeros(tuple(e - s for s, e in mine.box),
                                                        dtype=dtypes[(fqn, slot)], device=device))
    pairs = sorted({pair for _, plan in order for pair in plan.sends})
    ops, recvs, keep, sent = [], [], [], 0
    for s, d in pairs:
        cells = [(fqn, slot, c) for fqn, plan in order for slot in slots[fqn] for c in plan.sends.get((s, d), [])]
        if s == rank and d == rank:
            for fqn, slot, (cell, sbox, dbox) in cells:
                box_view(out[(fqn, slot)], cell, dbox).copy_(box_view(local[(fqn, slot)], cell, sbox))
        elif s == rank:
            parts = [box_view(local[(fqn, slot)], cell, sbox).reshape(-1).to(torch.float32 if
                     dtypes[(fqn, slot)].is_floating_point else dtypes[(fqn, slot)])
                     for fqn, slot, (cell, sbox, _) in cells]
            buf = torch.cat(parts).contiguous()
            keep.append(buf)
            sent += buf.numel() * buf.element_size()
            ops.append(dist.P2POp(dist.isend, buf, d))
        elif d == rank:
            n = sum(box_numel(c) for _, _, (c, _, _) in cells)
            buf = torch.empty(n, dtype=torch.float32, device=device)
            recvs.append((buf, cells))
            ops.append(dist.P2POp(dist.irecv, buf, s))
    if ops:
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    for buf, cells in recvs:
        at = 0
        for fqn, slot, (cell, _, dbox) in cells:
            n = box_numel(cell)
            view = box_view(out[(fqn, slot)], cell, dbox)
            view.copy_(buf[at:at + n].view(view.shape))
            at += n
    return out, sum(1 for op in ops if op.op is dist.isend), sent


def switch(cm: Any, plan: Any, mesh: Any = None, ranks: Sequence[int] | None = None,
           lost: Sequence[int] = (), **options: Any) -> Any:
    """Every rank of the job calls it; see the module doc. Returns the new module on its ranks,
    None elsewhere; ``spmdc.api.switch.last_report`` (and the new module's ``switch_report``)
    say what moved. ``lost``: ranks whose state is gone (failed devices; they still take part in
    setting up the new groups but send nothing): every slice comes from a surviving copy, or the
    switch is refused naming the parameter (restore from a checkpoint then)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from spmdc.api.compiled_module import CompiledModule
    from spmdc.sharding.mesh import Mesh
    from spmdc.sharding.pipeline_plan import PipelinePlan
    from spmdc.sharding.plan import Plan

    global last_report
    t0 = time.perf_counter()
    if not isinstance(cm, CompiledModule):
        raise TypeError(f"switch moves a module of spmdc.compile; got {type(cm).__name__}")
    if cm._hetero is not None:
        raise NotImplementedError("switching from a heterogeneous plan (device groups) is not supported yet")
    if cm.members != list(range(dist.get_world_size())):
        raise NotImplementedError("switch is called by every rank of the job: the old module must span the job "
                                  f"(it spans ranks {cm.members})")
    if isinstance(plan, str) and plan.endswith((".json", ".yaml", ".yml")):
        plan = Plan.load(plan)
    lost_set = frozenset(int(r) for r in lost)
    if lost_set:
        _check_survivors(cm, lost_set)   # before compiling anything
    o = cm._opts
    model_args, loss_args, kwargs = cm._example
    example = (tuple(model_args), tuple(loss_args)) if loss_args else tuple(model_args)
    rank, world = dist.get_rank(), dist.get_world_size()
    new: Any = None
    if isinstance(plan, PipelinePlan):
        if mesh is not None or ranks is not None:
            raise ValueError(f"pipeline plan '{plan.name}' names its stages' ranks and meshes: pass no mesh or ranks")
        if plan.world != world:
            raise NotImplementedError(f"pipeline plan '{plan.name}' has {plan.world} ranks but the job has {world}: "
                                      "a pipeline target spans the whole job")
        from spmdc.api.pipeline_module import PipelineModule

        members = list(range(world))
        new = PipelineModule(cm._model, example, plan=plan, loss_fn=o.loss_fn, optimizer=cm._optimizer_spec,
                             example_kwargs=kwargs, device=cm.device.type, target=o.target, **options)
    else:
        if mesh is None:
            raise ValueError("switch(plan=...) needs mesh= (e.g. 'tp=4'), or a pipeline plan")
        mesh = mesh if isinstance(mesh, Mesh) else Mesh.of(mesh)
        members = list(ranks) if ranks is not None else list(range(mesh.size))
        if len(members) != mesh.size or len(set(members)) != len(members) or not set(members) <= set(range(world)):
            raise ValueError(f"ranks {members} must be {mesh.size} distinct ranks of the job (0..{world - 1}) for mesh "
                             f"{mesh}")
        dm = DeviceMesh(cm.device.type, torch.tensor(members).reshape(mesh.shape), mesh_dim_names=mesh.axis_names)
        group = dist.new_group(members)   # every rank of the job takes part: new groups over the survivors
        if rank in members:
            kw = dict(train=o.can_train, loss_fn=o.loss_fn, optimizer=cm._optimizer_spec, device=cm.device.type,
                      target=o.target, bucket=o.bucket, example_kwargs=kwargs, rng=o.rng, checkpoint=o.checkpoint,
                      clip_grad_norm=o.clip, grad_accum=o.accum, inputs=o.inputs, check_inputs=o.check_inputs)
            kw.update(options)
            new = CompiledModule(cm._model, example, mesh=mesh, plan=plan, device_mesh=dm, group=group, **kw)
    compile_s = time.perf_counter() - t0
    # descriptors: the old side (identical on the old ranks), each rank's new side, the scalars
    old_side, local = _old_side(cm)
    mine = (_new_side(new), _scalars(cm) if rank == 0 else None,
            {k: v.dtype for k, v in local.items()} if rank == 0 else None)
    every: list[Any] = [None] * world
    dist.all_gather_object(every, mine)
    new_side = _Side()
    for side, _, _ in every:
        for fqn, hs in side.holdings.items():
            for h in hs:
                if h not in new_side.holdings.setdefault(fqn, []):
                    new_side.holdings[fqn].append(h)
    scalars, dtypes = every[0][1], every[0][2]
    if lost_set & set(members):
        raise ValueError(f"lost ranks {sorted(lost_set & set(members))} cannot be in the new mesh (ranks {members})")
    try:
        plans = _plans(old_side, new_side, lost_set)
    except NotImplementedError as e:
        raise NotImplementedError(f"{e}: restore from a checkpoint instead" if lost_set else str(e)) from None
    slots = {fqn: ["param"] + scalars.get(fqn, {}).get("__tensors__", []) for fqn in plans}
    t1 = time.perf_counter()
    got, messages, sent = transfer(plans, slots, local, rank, dtypes, cm.device)
    transfer_s = time.perf_counter() - t1
    if new is not None:
        _install(new, got, slots, scalars)
    total = torch.tensor([float(sent)])
    dist.all_reduce(total)
    report = SwitchReport(time.perf_counter() - t0, compile_s, transfer_s, messages, sent, int(total.item()),
                          sum(len(s) for s in slots.values()))
    last_report = report
    if new is not None:
        new.switch_report = report
    return new


last_report: SwitchReport | None = None


def _install(new: Any, got: dict[Any, Any], slots: dict[str, list[str]], scalars: dict[str, Any]) -> None:
    """Received pieces into the new module's parameters and optimizer state."""
    from torch.distributed.tensor import DTensor

    from spmdc.runtime.dtensors import contiguous_stride

    for fqn, (p, opt) in _targets(new).items():
        with torch.no_grad():
            target = p.to_local() if hasattr(p, "to_local") else p
            target.copy_(got[(fqn, "param")])
        if opt is None:
            continue
        state: dict[str, Any] = {}
        for k, v in scalars.get(fqn, {}).items():
            if k != "__tensors__":
                state[k] = v.to(p.device if not hasattr(p, "device_mesh") else p.to_local().device) \
                    if isinstance(v, torch.Tensor) else v
        for slot in slots[fqn][1:]:
            piece = got[(fqn, slot)]
            if hasattr(p, "device_mesh"):
                state[slot] = DTensor.from_local(piece, p.device_mesh, p.placements, run_check=False,
                                                 shape=tuple(p.shape), stride=contiguous_stride(p.shape))
            else:
                state[slot] = piece
        if state:
            opt.state[p] = state


__all__ = ["Holding", "SwitchReport", "switch", "transfer"]
