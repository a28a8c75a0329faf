"""A sketch of every layout's cost from one model profile: the order in which the search prices them.

Pricing a candidate compiles its programs (:func:`spmdc.api.dry_run.dry_run`); at Llama-3-70B
shapes on 4096 ranks that is about five seconds per candidate even with the model cut to 4-6 blocks
(:mod:`spmdc.api.auto_plan`), and there are ~180 candidates. So the search first sketches them
all from one :class:`ModelProfile` — the model compiled on one rank at a depth of 4 and of 5 blocks,
whose difference is what one repeated block costs and the rest what lies outside the blocks —
then compiles candidates in the sketch's order for as long as its budget allows.

    profile = model_profile(model, inputs, device=dev, train=True, loss_fn=loss, optimizer="adamw")
    step_s, peak_bytes = sketch(Candidate((("dp", 512), ("tp", 8)), "fsdp+tp"), profile, dev)

The sketch of a candidate on ``pp × rep × dp × tp (× ep)`` ranks, ``L`` blocks, ``m`` micro-batches
(``S = ⌈L / pp⌉`` blocks on the busiest stage, which also holds everything outside the blocks;
``D = rep·dp·ep`` ranks share the batch, ``Z`` the ranks a parameter is sharded over: ``tp``, times
``dp`` for an fsdp preset, times ``ep``):

* **compute**: the profile's compute (roofline per op) of those blocks, divided by ``D·tp``, plus a
  launch per op per micro-batch; recomputed blocks (checkpointing: all, or every K-th under
  ``blocks/K``; a pipeline's backward that recomputes its forward) add a third of a block's;
* **collectives** (α-β over the links, :class:`~spmdc.sharding.cost.AxisCost`, one call per block
  and one for the rest): ``dp`` all-reduces the gradients (in a pipeline, each stage's summed over
  its micro-batches, in one call per step); an fsdp preset gathers each block's
  parameters (twice when resharding after the forward) and reduce-scatters its gradients, hsdp
  all-reduces the shards over ``rep`` (in a pipeline, per micro-batch, gathering twice: its
  forward and its backward are two programs); ``tp`` all-reduces a block's input four times (two in the
  forward, two in the backward); ``ep`` exchanges it four times (all-to-all); ``pp`` sends it
  forward and back per micro-batch; each bucketed call also its members' packing (the device's
  :meth:`~spmdc.compiler.devices.DeviceProfile.member_us` per tensor); hidden behind compute by the
  device's ``overlap``; plus the
  device's ``sync_us`` per wait on peers after computing alone (:func:`~spmdc.api.predict.sync_points`:
  each fsdp gather, each ``tp`` all-reduce, each micro-batch's receives, the gradients' reductions);
* **the update**: as a prediction prices it (:func:`~spmdc.api.predict.optimizer_seconds`: a host
  cost per op on each parameter and its bytes) for the parameters a rank stores; **the bubble**: ``(pp - 1)``
  micro-batch times of the stage (:func:`~spmdc.api.predict.pipeline_step`);
* **memory**: parameters, optimizer state and gradients of the stage over ``Z`` (``dp``: gradients
  over ``tp`` only); an fsdp preset's gathered parameters (all of them when kept, two blocks' when
  resharded); activations at the profile's peak over ``D·tp`` (a pipeline: one micro-batch's, plus
  each stashed micro-batch's block input; checkpointed blocks: each recomputed block's input, the
  others' whole, and one block's while it recomputes).

It is a sketch: layouts the compiler would refuse (heads that do not split) are sketched anyway,
and where a preset places things differently from these rules the figures differ. The search
shows which candidates were priced from their programs and which only sketched.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ModelProfile", "model_profile", "sketch"]


@dataclass(frozen=True)
class Part:
    """What one block (or everything outside the blocks) costs on one rank at the global batch."""

    compute_s: float = 0.0    # roofline seconds, launches excluded
    kernels: int = 0
    params: float = 0.0       # bytes
    optimizer: float = 0.0
    activations: float = 0.0  # at the step's peak
    grad_calls: float = 1.0   # the dp preset's gradient all-reduces (as many as fsdp's reduce-scatters)
    gathers: float = 1.0      # the fsdp preset's all-gathers, resharding after the forward (on dp=2)
    scatters: float = 1.0     # its reduce-scatters
    tp_calls: float = 4.0     # megatron's all-reduces on tp (tp=2)
    tp_bytes: float = 0.0     # and their payload for the global batch (0: four times the block input)
    tp_activations: float = -1.0   # activations at the peak on tp=2 (-1: not compiled; as if all split)

    def __sub__(self, other: Part) -> Part:
        return Part(*(max(a - b, 0) for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def __mul__(self, k: float) -> Part:
        return Part(*(a * k for a in dataclasses.astuple(self)))


@dataclass(frozen=True)
class ModelProfile:
    """The model's cost per repeated block and outside them (see the module doc)."""

    blocks: int               # L: repeated blocks of the model
    block: Part
    rest: Part
    boundary: float           # bytes of one block's input for the global batch (the residual stream)
    batch: int = 1            # samples of the global batch (the block input's first dimension)
    trainable: float = 1.0    # the share of parameter bytes that get gradients
    optimizer: str | None = None
    block_tensors: int = 0    # trainable parameters (tensors) of one block, and outside the blocks
    rest_tensors: int = 0


def _busiest(report: Any) -> Any:
    return max(report.roles, key=lambda r: r.prediction.step_seconds).prediction


def _part(report: Any, device: Any) -> Part:
    p = _busiest(report)
    m = p.memory
    return Part(max(p.compute_seconds - p.kernels * device.launch_us * 1e-6, 0.0), p.kernels, m.parameters,
                m.optimizer, m.activations)


def _calls(report: Any, axis: str, kind: str) -> tuple[int, int]:
    """(calls, payload bytes) of collective ``kind`` (buckets included) on ``axis``."""
    rows = [r for r in _busiest(report).comm
            if r.axes == axis and r.kind.removeprefix("comm.").removesuffix("_bucket") == kind]
    return sum(r.count for r in rows), sum(r.bytes for r in rows)


def _boundary(model: Any, stack: Any, inputs: Sequence[Any], kwargs: Mapping[str, Any] | None) -> tuple[float, int]:
    """Bytes and samples of the first block's input, from a forward on the meta device ((0, 1) when it
    cannot run)."""
    import torch

    from spmdc.frontend.repeated import keep_blocks

    seen: list[float] = []
    block = (model.get_submodule(stack.path) if stack.path else model)[0]

    def hook(_mod: Any, args: tuple, kw: dict) -> None:
        t = args[0] if args else next((v for v in kw.values() if isinstance(v, torch.Tensor)), None)
        if isinstance(t, torch.Tensor) and not seen:
            seen.append((float(t.numel() * t.element_size()), int(t.shape[0]) if t.dim() else 1))

    def meta(v: Any) -> Any:
        return v.to("meta") if isinstance(v, torch.Tensor) else v

    handle = block.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with keep_blocks(model, stack, [0]), torch.no_grad():
            params = {n: p for n, p in model.named_parameters()}
            if all(p.device.type == "meta" for p in params.values()):
                model(*map(meta, inputs), **{k: meta(v) for k, v in (kwargs or {}).items()})
            else:
                model(*inputs, **dict(kwargs or {}))
    except Exception:   # (a model whose forward cannot run on these inputs here: no boundary traffic sketched)
        pass
    finally:
        handle.remove()
    return seen[0] if seen else (0.0, 1)


def model_profile(model: Any, inputs: Sequence[Any], *, device: Any, train: bool = True,
                  loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                  kwargs: Mapping[str, Any] | None = None, optimizer: str | None = None,
                  options: Any = None) -> ModelProfile | None:
    """The model compiled on one rank with 4 and 5 of its repeated blocks (1 and 2 when it has
    fewer; None without repeated blocks: the search then prices every candidate from its
    programs)."""
    from spmdc.api.auto_plan import DEPTHS
    from spmdc.api.dry_run import dry_run
    from spmdc.frontend.repeated import find_block_stack, keep_blocks
    from spmdc.sharding.mesh import Mesh

    stack, _ = find_block_stack(model)
    if stack is None or stack.count < 2:
        return None

    def compiled(depth: int, mesh: str, plan: str) -> Any:
        with keep_blocks(model, stack, list(range(depth))):
            return dry_run(model, inputs, mesh=Mesh.parse(mesh), plan=plan, device=device, train=train,
                           loss_fn=loss_fn, loss_inputs=loss_inputs, kwargs=kwargs, optimizer=optimizer,
                           options=options)

    parts = []
    missing: set[str] = set()
    depths = DEPTHS[:2] if stack.count >= DEPTHS[1] else (1, 2)   # (what the search compiles: captures shared)
    for depth in depths:
        part = _part(compiled(depth, "dp=1", "dp"), device)
        counts: dict[str, float] = {}
        for mesh, plan, axis, kinds in (("dp=2", "fsdp", "dp", {"gathers": "all_gather", "scatters": "reduce_scatter"}),
                                        ("tp=2", "megatron", "tp", {"tp_calls": "all_reduce"})):
            try:
                report = compiled(depth, mesh, plan)
            except Exception:   # (a layout this model cannot take: its calls keep their default)
                missing.update(kinds)
                continue
            for name, kind in kinds.items():
                counts[name], nbytes = _calls(report, axis, kind)
                if name == "scatters":   # (dp's gradient all-reduces are bucketed as fsdp's reduce-scatters)
                    counts["grad_calls"] = counts[name]
                if name == "tp_calls":
                    counts["tp_bytes"] = nbytes
                    counts["tp_activations"] = _busiest(report).memory.activations
        parts.append(dataclasses.replace(part, **counts))
    block = parts[1] - parts[0]
    rest = parts[0] - block * depths[0]
    missing |= {"tp_bytes", "tp_activations"} if "tp_calls" in missing else set()
    missing |= {"grad_calls"} if "scatters" in missing else set()
    defaults = {f.name: f.default for f in dataclasses.fields(Part) if f.name in missing}
    block, rest = dataclasses.replace(block, **defaults), dataclasses.replace(rest, **defaults)
    sizes = [(p.numel() * p.element_size(), p.requires_grad) for p in model.parameters()]
    trainable = sum(n for n, g in sizes if g) / max(sum(n for n, _ in sizes), 1)
    boundary, batch = _boundary(model, stack, inputs, kwargs)
    container = model.get_submodule(stack.path) if stack.path else model
    in_block = sum(1 for p in container[0].parameters() if p.requires_grad)
    every = sum(1 for p in model.parameters() if p.requires_grad)
    return ModelProfile(stack.count, block, rest, boundary, batch, trainable, optimizer if train else None,
                        in_block, every - stack.count * in_block)


def sketch(c: Any, profile: ModelProfile, device: Any) -> tuple[float, float]:
    """``(step seconds, peak bytes per rank)`` of candidate ``c`` (see the module doc)."""
    from spmdc.api.auto_plan import FSDP_PRESETS
    from spmdc.api.predict import optimizer_seconds, pipeline_step
    from spmdc.sharding.cost import AxisCost
    from spmdc.sharding.mesh import Mesh

    mesh = Mesh(list(c.mesh))
    d = dict(c.mesh)
    pp, rep, dp, tp, ep = (d.get(a, 1) for a in ("pp", "rep", "dp", "tp", "ep"))
    m = c.microbatches or 1
    data = rep * dp * ep
    fsdp = c.preset in FSDP_PRESETS
    shard = tp * ep * (dp if fsdp else 1)
    blocks = math.ceil(profile.blocks / pp)
    b, r = profile.block, profile.rest

    def total(field: str) -> float:
        return getattr(r, field) + blocks * getattr(b, field)

    def axis(name: str) -> AxisCost:
        return AxisCost(latency_us=device.latency_us, bandwidth_gbps=device.axis_bandwidth(mesh, name))

    per_mb = profile.batch / m   # (a micro-batch smaller than the ranks sharing it is kept whole)
    share = (math.ceil(per_mb / data) if per_mb >= data else per_mb) / profile.batch   # a rank's samples
    redo = 1 / c.checkpoint if c.checkpoint else 0   # (the share of blocks recomputed: every K-th)
    redo += 1 if pp > 1 else 0
    compute = (total("compute_s") + redo * blocks * b.compute_s / 3) * share * m / tp
    compute += (total("kernels") + redo * blocks * b.kernels / 3) * m * device.launch_us * 1e-6

    def spread(cost: Callable[[float, int], float], nbytes: float, calls: float, n: int) -> float:
        """µs of ``calls`` collectives moving ``nbytes`` together over ``n`` ranks."""
        calls = max(calls, 1.0) if nbytes > 0 else calls
        return calls * cost(nbytes / calls, n) if calls else 0.0

    us = syncs = 0.0   # (syncs: the waits on peers after computing alone, predict.sync_points)
    per = m if pp > 1 else 1   # (a pipeline's stage programs gather and reduce per micro-batch)
    tokens = profile.boundary * share               # one block's input per micro-batch and rank
    summed = summed_members = 0.0   # (dp in a pipeline: the stage's gradients summed over its micro-batches,
    # all-reduced once)

    def members(kind: str, n: int, count: float) -> float:   # µs of packing ``count`` tensors into buckets
        return count * device.member_us(kind, n) if n > 1 and hasattr(device, "member_us") else 0.0

    for part, k, in_block in ((r, 1, False), (b, blocks, True)):
        params, grads = part.params / (tp * ep), part.params * profile.trainable / (tp * ep)
        held = profile.block_tensors if in_block else profile.rest_tensors
        if c.preset == "dp" and pp > 1:
            summed += k * grads
            summed_members += k * held
        elif c.preset == "dp":
            us += k * spread(axis("dp").all_reduce, grads, part.grad_calls, rep * dp)
            us += members("all_reduce", rep * dp, k * held)
            syncs += 1 if in_block and rep * dp > 1 else 0   # (the gradients' reductions, waited at the end)
        elif fsdp:
            twice = c.reshard_after_forward or pp > 1   # (its forward and backward are two programs)
            gathers = part.gathers if twice else part.gathers / 2
            syncs += (k * per * gathers + (per if in_block else 0)) if dp > 1 else 0   # (each gather; the scatters)
            us += k * per * spread(axis("dp").all_gather, params * (2 if twice else 1), gathers, dp)
            us += k * per * spread(axis("dp").reduce_scatter, grads, part.scatters, dp)
            us += members("all_gather", dp, k * per * held * (2 if twice else 1))
            us += members("reduce_scatter", dp, k * per * held)
            if rep > 1:
                us += k * per * spread(axis("rep").all_reduce, grads / dp, part.scatters, rep)
                us += members("all_reduce", rep, k * per * held)
        if tp > 1:
            tp_bytes = part.tp_bytes * share if part.tp_bytes else (4 * tokens if in_block else 0.0)
            us += k * m * spread(axis("tp").all_reduce, tp_bytes, part.tp_calls, tp)
            syncs += k * m * part.tp_calls
        if ep > 1 and in_block:
            us += k * m * 4 * axis("ep").all_to_all(tokens * ep, ep)
    if summed and rep * dp > 1:   # (one bucket, after the last micro-batch)
        us += axis("dp").all_reduce(summed, rep * dp) + members("all_reduce", rep * dp, summed_members)
        syncs += 1
    if pp > 1:
        us += 2 * m * (device.latency_us + tokens / (device.axis_bandwidth(mesh, "pp") * 1e3))
        syncs += 2 * m   # (each micro-batch's activations and gradients received)
    comm = (us + syncs * getattr(device, "sync_us", 0.0)) * 1e-6
    busy = compute + comm - device.overlap * min(compute, comm)
    tensors = profile.rest_tensors + blocks * profile.block_tensors   # (the update: per tensor and byte)
    local = total("params") * profile.trainable / shard
    update = optimizer_seconds(profile.optimizer, [local / tensors] * tensors, device) if tensors else 0.0
    step = pipeline_step(busy + update, busy / m, pp, device) if pp > 1 else busy + update
    grads = total("params") * profile.trainable / (shard if fsdp else tp * ep)
    gathered = (total("params") if not c.reshard_after_forward else 2 * b.params) / (tp * ep) if fsdp else 0.0
    split = 1.0   # (the share of activations tp splits: from the tp=2 compile)
    if b.tp_activations >= 0 and b.activations > 0:
        split = min(max(2 * (1 - b.tp_activations / b.activations), 0.0), 1.0)
    over_tp = (1 - split) + split / tp
    acts = total("activations") * share * over_tp
    if c.checkpoint:   # a recomputed block keeps its input; the others all they hold; one recomputes at a time
        again = math.ceil(blocks / c.checkpoint)
        acts = (r.activations + (blocks - again + 1) * b.activations) * share * over_tp + again * tokens
    if pp > 1:
        acts += min(pp, m) * tokens
    peak = (total("params") + total("optimizer")) / shard + grads + gathered + acts
    return step, peak
