"""Switching strategy at run time (Hetu v2): re-specialize for a new plan and move the training
state there directly, without a checkpoint — between any two layout kinds: one mesh, device
groups (a HeteroPlan), pipeline stages (a PipelinePlan).

    cm = spmdc.compile(model, batch, mesh="dp=4", plan="fsdp", train=True, optimizer="adamw", ...)
    for _ in range(100): cm.step(x, y)
    cm = cm.switch(plan="megatron", mesh="tp=4")          # every rank calls it; the job goes on
    pm = cm.switch(PipelinePlan.from_dict({...}))         # to pipeline stages (pm.switch: back)
    gm = pm.switch(HeteroPlan.from_dict({...}))           # to device groups
    cm = gm.switch(plan="fsdp", mesh="dp=4", ranks=[0, 1, 2, 3])   # 6 ranks -> 4: None on 4 and 5
    em = cm.switch("fsdp+tp", mesh="dp=2,tp=2", execution="eager")   # to eager mode (spmdc.eager)
    cm = em.switch("megatron", mesh="tp=4", execution="compiled")    # and back to compiled programs

An eager module (:func:`spmdc.eager`) switches like a compiled one — same state interface, same
layouts — and stays eager unless ``execution="compiled"`` is given (then bucketing, overlap and
fused collectives, which eager turns off, are back at their defaults); ``execution="eager"`` turns
them off. Pipeline stages and device groups refuse eager execution by name.

What moves: every parameter and every tensor of its optimizer state (AdamW's ``exp_avg``,
``exp_avg_sq``, SGD's momentum; laid out like the parameter), from each rank's piece of the old
layout to each rank's piece of the new one. Everything is read and written through the modules'
public state interface (``compile_args``, ``state_holdings``, ``state_pieces``,
``full_state_tensor``, ``load_state_piece`` of :class:`~spmdc.api.compiled_module.CompiledModule`
for every layout kind, pipeline stages included).

**The direct path** (every tensor without a strided shard): the finest-slice tables of
:mod:`spmdc.sharding.slices` from the old holdings to the new ones. A parameter several old
holders hold whole (every device group, two pipeline stages sharing a tied weight) is a ``dup``
union of them: each destination slice comes from the destination itself when it holds it, else
from a holder already sending to it, else the least-loaded holder. A parameter two new holders
read goes to both. All tensors for one (sender, receiver) pair are packed into one buffer and
every message goes in **one** ``batch_isend_irecv``. Scalars (the optimizer's ``step``) travel
with the small descriptor exchange every rank makes first.

**The general path** (a strided shard ``SS`` on either side — HF GPT-2's fused ``c_attn`` under
megatron — or ``direct=False``): one tensor at a time, gathered whole by its old holders
(``full_state_tensor``; broadcast to the job when they are not every rank), then cut by each new
rank for its layout (``load_state_piece(..., full=True)``): at most one whole tensor lives at once.

The new module is compiled collectively by its ranks while the old one still holds the state, with
the old module's options (``compile_args``) and the job's random number generator state put back
afterwards, so the training goes on as if uninterrupted. Ranks of the job outside the new mesh
only send (a simulated device failure: the two dropped ranks of 6 → 4 hand over their pieces and
leave; the survivors' process groups are new ones over the survivors). Refused by name: a target
on more ranks than the job, device groups or pipeline stages on fewer ranks than the job, ``lost``
ranks with a strided shard (the general path gathers from every holder), an option of the old
module the new kind does not take.
"""

from __future__ import annotations

import inspect
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
    streamed: int = 0   # tensors moved by the general path (through their whole value)


@dataclass(frozen=True)
class Holding:
    """Where one tensor lives in a module: a mesh over job ranks and a layout on it."""

    mesh: MeshSpec
    layout: tuple
    shape: tuple[int, ...]


@dataclass
class _Side:
    holdings: dict[str, list[Holding]] = field(default_factory=dict)   # canonical fqn -> where


STATE_INTERFACE = ("compile_args", "state_holdings", "state_pieces", "full_state_tensor", "load_state_piece")


def _is_module(m: Any) -> bool:
    """A module of ``spmdc.compile`` / ``spmdc.eager`` of any layout kind: it has the public state
    interface switch reads and writes (nothing private is touched)."""
    return all(callable(getattr(m, name, None)) for name in STATE_INTERFACE)


# what spmdc.eager forces off (per-rank collective rewrites of the compiled program)
EAGER_FORCED = {"bucket": False, "overlap": False, "fuse_collectives": False}


def _execution_options(old: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The switch's option changes with the execution mode's own: to ``execution="eager"``, the
    per-rank rewrites eager does not run are off (given on: refused by name); from eager to
    ``execution="compiled"``, they are back at their defaults unless given.

        >>> _execution_options(CompileOptions(execution="eager", bucket=False), {"execution": "compiled"})
        {'execution': 'compiled', 'bucket': True, 'overlap': True, 'fuse_collectives': True}
    """
    from spmdc.compiler.options import CompileOptions

    was = getattr(old, "execution", "compiled") if old is not None else "compiled"
    to = options.get("execution", was)
    out = dict(options)
    if to == "eager":
        for k, off in EAGER_FORCED.items():
            if out.get(k, off) != off:
                raise TypeError(f"switch to execution='eager' runs the global program op by op: '{k}' is an "
                                "option of the compiled program")
            out[k] = off
        if was == "eager" and getattr(old, "eager_trace", False):
            out.setdefault("eager_trace", True)   # eager to eager: the trace goes on being recorded
    elif was == "eager":
        defaults = CompileOptions()
        for k in EAGER_FORCED:
            out.setdefault(k, getattr(defaults, k))
    return out


def _canonical_names(model: Any) -> dict[str, str]:
    """Every name of each of the model's parameters -> its first name (tied weights have several)."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        out[n] = first.setdefault(id(p), n)
    return out


def _side(module: Any, canon: dict[str, str]) -> _Side:
    """This rank's holdings in ``module`` (None: none), under canonical names."""
    side = _Side()
    if module is not None:
        for name, (mesh, layout, shape) in module.state_holdings().items():
            side.holdings[canon.get(name, name)] = [Holding(mesh, tuple(layout), tuple(shape))]
    return side


def _merge(sides: Sequence[_Side]) -> _Side:
    out = _Side()
    for side in sides:
        for fqn, hs in side.holdings.items():
            for h in hs:
                if h not in out.holdings.setdefault(fqn, []):
                    out.holdings[fqn].append(h)
    for hs in out.holdings.values():
        hs.sort(key=lambda h: h.mesh.devices)
    return out


def _strided(h: Holding) -> bool:
    from spmdc.dialects.shard import StridedShard

    return any(isinstance(p, StridedShard) for p in h.layout)


def _descriptors(old: Any, canon: dict[str, str]) -> tuple[dict[Any, Any], dict[str, Any], dict[Any, Any]]:
    """This rank's local pieces per (fqn, slot), optimizer scalars and dtypes per (fqn, slot) of
    what it holds in the old module."""
    local: dict[Any, Any] = {}
    scalars: dict[str, Any] = {}
    for name in old.state_holdings():
        fqn = canon.get(name, name)
        sc: dict[str, Any] = {}
        tensors = []
        for slot, v in old.state_pieces(name).items():
            if slot == "param" or (isinstance(v, torch.Tensor) and v.dim() > 0):
                local[(fqn, slot)] = v
                if slot != "param":
                    tensors.append(slot)
            else:
                sc[slot] = (v.detach().cpu().clone(), v.device.type) if isinstance(v, torch.Tensor) else (v, None)
        scalars[fqn] = {"scalars": sc, "tensors": sorted(tensors)}
    return local, scalars, {k: v.dtype for k, v in local.items()}


def _check_survivors(old: _Side, lost: frozenset[int]) -> None:
    """Every parameter is whole on the ranks that are not lost (else: refused, naming it)."""
    from spmdc.dialects.shard import ShardingAttr
    from spmdc.sharding.slices import pieces

    for fqn, hs in sorted(old.holdings.items()):
        if len(hs) != 1:
            continue   # several holders: the slice tables find (or miss) a surviving copy
        (h,) = hs
        box = tuple((0, n) for n in h.shape)
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


def _source(hs: list[Holding]) -> tuple[Any, dict[str, MeshSpec]]:
    """The old layout of a tensor: its one holding, or the ``dup`` union of several whole copies."""
    from spmdc.dialects.shard import Dup, ShardingAttr, UnionShardingAttr

    if len(hs) == 1:
        return ShardingAttr("old", hs[0].layout), {"old": hs[0].mesh}
    members = tuple(ShardingAttr(f"old{k}", h.layout) for k, h in enumerate(hs))
    return UnionShardingAttr(Dup(), members), {f"old{k}": h.mesh for k, h in enumerate(hs)}


def _plans(old: _Side, new: _Side, fqns: Sequence[str], lost: frozenset[int] = frozenset()) -> dict[str, list[BsrPlan]]:
    from spmdc.dialects.shard import ShardingAttr

    out = {}
    for fqn in sorted(fqns):
        src, meshes = _source(old.holdings[fqn])
        shape = old.holdings[fqn][0].shape
        plans = []
        for k, dst in enumerate(new.holdings[fqn]):
            try:
                plans.append(bsr_plan(shape, src, ShardingAttr(f"new{k}", dst.layout), {**meshes, f"new{k}": dst.mesh},
                                      lost))
            except (ValueError, NotImplementedError) as e:
                layouts = [h.layout for h in old.holdings[fqn]]
                raise NotImplementedError(f"parameter '{fqn}': cannot move {layouts} to {dst.layout}: {e}") from None
        out[fqn] = plans
    return out


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
            buf = torch.cat(parts).contiguous().to(device)
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


def _stream(old: Any, new: Any, fqn: str, slots: list[str], old_side: _Side, new_side: _Side, names: dict[str, str],
            dtypes: dict[Any, Any], device: Any) -> int:
    """The general path for one parameter: each of its tensors gathered whole by its old holders
    (broadcast from the first when they are not the whole job), cut by the new ranks. Returns the
    bytes this rank broadcast."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    holders = sorted({d for h in old_side.holdings[fqn] for d in h.mesh.devices})
    receivers = {d for h in new_side.holdings.get(fqn, []) for d in h.mesh.devices}
    shape = old_side.holdings[fqn][0].shape
    sent = 0
    for slot in slots:
        full = old.full_state_tensor(names.get(fqn, fqn), slot) if rank in holders else None   # collective
        if not receivers <= set(holders):
            buf = full.to(device).contiguous() if rank == holders[0] else \
                torch.empty(shape, dtype=dtypes[(fqn, slot)], device=device)
            if len(holders) < world:
                dist.broadcast(buf, src=holders[0])
                sent += buf.numel() * buf.element_size() if rank == holders[0] else 0
            full = buf if full is None else full
        if new is not None and rank in receivers:
            new.load_state_piece(fqn, slot, full, full=True)
    return sent


def _fit_options(args: dict[str, Any], old_cls: type, new_cls: type, what: str) -> dict[str, Any]:
    """The old module's options that the new kind takes; one it does not take, set to other than
    its default, is refused by name (it would silently change the training)."""
    takes = inspect.signature(new_cls.__init__).parameters
    defaults = {k: p.default for k, p in inspect.signature(old_cls.__init__).parameters.items()}
    out = {}
    for k, v in args.items():
        if k in takes:
            out[k] = v
        elif k != "train" and not _same(v, defaults.get(k, inspect.Parameter.empty)):
            raise NotImplementedError(f"switch to {what}: the old module's option {k}={v!r} is not taken by "
                                      f"{new_cls.__name__} (the training would change); switch from a module "
                                      "without it")
    return out


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (a is None and b is None)
    except Exception:  # noqa: BLE001 - tensors and other values without a truth value
        return a is b


def _build(old: Any, plan: Any, mesh: Any, ranks: Sequence[int] | None, options: dict[str, Any]) -> tuple[Any, list]:
    """The new module on this rank (None outside the new ranks) and the new ranks."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from spmdc.api.compiled_module import CompiledModule
    from spmdc.compiler.options import CompileOptions
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.mesh import Mesh
    from spmdc.sharding.pipeline_plan import PipelinePlan

    args = dict(old.compile_args())
    model, example = args.pop("model"), args.pop("example_inputs")
    for k in ("plan", "mesh", "device_mesh", "group", "dump"):
        args.pop(k, None)   # the old layout's own (the new plan and mesh are given)
    names = CompileOptions.names()
    options = _execution_options(args.get("options"), options)
    # the old module's options, without its layout's own (eager_trace, the old pipeline's schedule),
    # with the switch's changes; the new kind refuses by name what it cannot run
    changes = {"eager_trace": False, "pp_schedule": None, "microbatches": None,
               **{k: v for k, v in options.items() if k in names}}
    args["options"] = CompileOptions.of(args.get("options"), "switch", **changes)
    args.update({k: v for k, v in options.items() if k not in names})
    rank, world = dist.get_rank(), dist.get_world_size()
    if isinstance(plan, (PipelinePlan, HeteroPlan)):
        what = "pipeline plan" if isinstance(plan, PipelinePlan) else "plan (device groups)"
        if mesh is not None or ranks is not None:
            raise ValueError(f"{what} '{plan.name}' names its ranks and meshes: pass no mesh or ranks")
        if plan.world != world:
            raise NotImplementedError(f"{what} '{plan.name}' has {plan.world} ranks but the job has {world}: "
                                      "a pipeline or device-group target spans the whole job")
        kw = _fit_options(args, type(old), CompiledModule, f"{what} '{plan.name}'")
        return CompiledModule(model, example, mesh=None, plan=plan, **{**kw, "train": True}), list(range(world))
    if mesh is None:
        raise ValueError("switch(plan=...) needs mesh= (e.g. 'tp=4'), or a pipeline or device-group plan")
    mesh = mesh if isinstance(mesh, Mesh) else Mesh.of(mesh)
    members = list(ranks) if ranks is not None else list(range(mesh.size))
    if len(members) != mesh.size or len(set(members)) != len(members) or not set(members) <= set(range(world)):
        raise ValueError(f"ranks {members} must be {mesh.size} distinct ranks of the job (0..{world - 1}) for mesh "
                         f"{mesh}")
    kw = _fit_options(args, type(old), CompiledModule, f"plan '{getattr(plan, 'name', plan)}' on {mesh}")
    device = kw.get("device") or "cpu"
    dm = DeviceMesh(device, torch.tensor(members).reshape(mesh.shape), mesh_dim_names=mesh.axis_names)
    group = dist.new_group(members)   # every rank of the job takes part: new groups over the survivors
    if rank not in members:
        return None, members
    return CompiledModule(model, example, mesh=mesh, plan=plan, device_mesh=dm, group=group,
                          **{**kw, "train": True}), members


def switch(cm: Any, plan: Any, mesh: Any = None, ranks: Sequence[int] | None = None,
           lost: Sequence[int] = (), direct: bool = True, **options: Any) -> Any:
    """Every rank of the job calls it; see the module doc. Returns the new module on its ranks,
    None elsewhere; ``spmdc.api.switch.last_report`` (and the new module's ``switch_report``)
    say what moved. ``lost``: ranks whose state is gone (failed devices; they still take part in
    setting up the new groups but send nothing): every slice comes from a surviving copy, or the
    switch is refused naming the parameter (restore from a checkpoint then). ``direct=False``:
    every tensor through its whole value (the general path). ``options``: compile options of the
    new module that differ from the old one's."""
    import torch.distributed as dist

    from spmdc.sharding.plan import Plan

    global last_report
    t0 = time.perf_counter()
    if not _is_module(cm):
        raise TypeError(f"switch moves a module of spmdc.compile; got {type(cm).__name__}")
    rank, world = dist.get_rank(), dist.get_world_size()
    if isinstance(plan, str) and plan.endswith((".json", ".yaml", ".yml")):
        plan = Plan.load(plan)
    spec = cm.compile_args()
    if getattr(cm, "kind", None) == "mesh" and cm.members != list(range(world)):   # (groups, stages span the job)
        raise NotImplementedError("switch is called by every rank of the job: the old module must span the job "
                                  f"(it spans ranks {cm.members})")
    canon = _canonical_names(spec["model"])
    covered: list[Any] = [None] * world
    dist.all_gather_object(covered, _side(cm, canon))
    old_side = _merge(covered)
    lost_set = frozenset(int(r) for r in lost)
    if lost_set:
        if not direct or any(_strided(h) for hs in old_side.holdings.values() for h in hs):
            raise NotImplementedError(f"lost ranks {sorted(lost_set)}: the general path (strided shards, "
                                      "direct=False) gathers every tensor from all its holders; restore from a "
                                      "checkpoint instead")
        _check_survivors(old_side, lost_set)   # before compiling anything
    dev = torch.device("cuda", torch.cuda.current_device()) if spec["device"] == "cuda" else None
    with torch.random.fork_rng(devices=[dev] if dev is not None else []):   # the job's draws go on as before
        new, members = _build(cm, plan, mesh, ranks, options)
    compile_s = time.perf_counter() - t0
    # descriptors: each rank's new holdings, its old scalars and dtypes
    local, scalars, dtypes = _descriptors(cm, canon)
    every: list[Any] = [None] * world
    dist.all_gather_object(every, (_side(new, canon), scalars, dtypes))
    new_side = _merge([e[0] for e in every])
    all_scalars: dict[str, Any] = {}
    all_dtypes: dict[Any, Any] = {}
    for _, sc, dt in every:
        for k, v in sc.items():
            all_scalars.setdefault(k, v)
        for k, v in dt.items():
            all_dtypes.setdefault(k, v)
    if lost_set & set(members):
        raise ValueError(f"lost ranks {sorted(lost_set & set(members))} cannot be in the new mesh (ranks {members})")
    missing = sorted(set(new_side.holdings) - set(old_side.holdings))
    if missing:
        raise ValueError(f"the new module has parameter '{missing[0]}', which the old one does not hold")
    slots = {fqn: ["param"] + all_scalars.get(fqn, {}).get("tensors", []) for fqn in new_side.holdings}
    streamed = sorted(f for f in new_side.holdings if not direct or any(
        _strided(h) for h in old_side.holdings[f] + new_side.holdings[f]))
    try:
        plans = _plans(old_side, new_side, [f for f in new_side.holdings if f not in streamed], lost_set)
    except NotImplementedError as e:
        raise NotImplementedError(f"{e}: restore from a checkpoint instead" if lost_set else str(e)) from None
    t1 = time.perf_counter()
    device = dev if dev is not None else torch.device("cpu")
    names = {canon.get(n, n): n for n in cm.state_holdings()}
    with torch.no_grad():
        got, messages, sent = transfer(plans, slots, local, rank, all_dtypes, device)
        for fqn in streamed:
            sent += _stream(cm, new, fqn, slots[fqn], old_side, new_side, names, all_dtypes, device)
        if new is not None:
            _install(new, got, slots, all_scalars, canon)
    transfer_s = time.perf_counter() - t1
    total = torch.tensor([float(sent)], device=device)
    dist.all_reduce(total)
    report = SwitchReport(time.perf_counter() - t0, compile_s, transfer_s, messages, sent, int(total.item()),
                          sum(len(slots[f]) for f in slots), sum(len(slots[f]) for f in streamed))
    last_report = report
    if new is not None:
        new.switch_report = report
    return new


last_report: SwitchReport | None = None


def _install(new: Any, got: dict[Any, Any], slots: dict[str, list[str]], scalars: dict[str, Any],
             canon: dict[str, str]) -> None:
    """Received pieces and the optimizer's scalars into the new module (its public interface)."""
    for name in new.state_holdings():
        fqn = canon.get(name, name)
        for slot in slots.get(fqn, []):
            if (fqn, slot) in got:
                new.load_state_piece(name, slot, got[(fqn, slot)])
        if getattr(new, "optimizer", None) is None:
            continue
        for k, (v, kind) in scalars.get(fqn, {}).get("scalars", {}).items():
            if isinstance(v, torch.Tensor):   # where it was (AdamW keeps ``step`` on the CPU)
                v = v.clone() if kind == "cpu" else v.to(new.state_pieces(name)["param"].device)
            new.load_state_piece(name, k, v)


__all__ = ["Holding", "SwitchReport", "switch", "transfer"]
