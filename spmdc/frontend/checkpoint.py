"""Activation checkpointing kept through capture: the backward recomputes checkpointed regions.

``torch.export`` inlines ``torch.utils.checkpoint`` (the captured graph is the plain model's,
the recomputation silently gone). spmdc keeps it in two steps:

1. :func:`marking_checkpoints` — while the model is traced, every ``checkpoint(fn, ...)`` call
   (reentrant or not, however the user imported it: both implementations are looked up in
   ``torch.utils.checkpoint`` at call time) runs ``fn`` under an FX annotation naming its
   region; with ``blocks`` set, every repeated block (an element of an ``nn.ModuleList`` /
   ``nn.Sequential`` of same-type modules: ``layers.3``, ``h.0``) is a region too, as a plan's
   ``checkpoint: blocks`` asks (``blocks/K``: every K-th block, ``layers.0``, ``layers.K``, ...).
2. :func:`rematerialize` — in the joint forward+backward graph, the forward values of a region
   that the backward reads are recomputed right before the backward first needs them, from the
   region's inputs; the backward reads the copies, so the originals die in the forward. The
   copies are ordinary ops (sharding gives them their own collectives: an FSDP weight is
   gathered again). Dropout replays its forward mask (kept as ``i1``, one byte per element):
   eager PyTorch restores the generator instead, with the same numbers. Other random draws in
   a region are kept, not redrawn.

Ops that recompute carry ``{spmdc.recompute = <region>}`` in the IR, so CSE never merges a
recomputation with the forward op it repeats.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import warnings
from collections.abc import Iterator

import torch
import torch.fx.traceback as fx_traceback
import torch.nn as nn

from spmdc.frontend import torch_compat

__all__ = ["CHECKPOINT_KEY", "RECOMPUTE_KEY", "block_modules", "marking_checkpoints", "rematerialize",
           "region_of"]

CHECKPOINT_KEY = "spmdc_checkpoint"
RECOMPUTE_KEY = "spmdc_recompute"
_RANDOM = ("aten.rand", "aten.randn", "aten.randint", "aten.bernoulli", "aten.uniform", "aten.normal",
           "aten.native_dropout")


def block_modules(model: nn.Module) -> list[str]:
    """Paths of the repeated blocks of ``model``: elements of the outermost ``nn.ModuleList`` /
    ``nn.Sequential`` containers whose (two or more) children share one type."""
    blocks: list[str] = []
    for path, module in model.named_modules():
        if any(path == b or path.startswith(b + ".") for b in blocks):
            continue
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            children = list(module.named_children())
            if len(children) >= 2 and len({type(m) for _, m in children}) == 1:
                blocks += [f"{path}.{name}" if path else name for name, _ in children]
    return blocks


class _Regions:
    def __init__(self) -> None:
        self.ids = itertools.count()
        self.active: list[contextlib.AbstractContextManager] = []

    def enter(self) -> None:
        ctx = fx_traceback.annotate({CHECKPOINT_KEY: next(self.ids)})
        ctx.__enter__()
        self.active.append(ctx)

    def exit(self) -> None:
        self.active.pop().__exit__(None, None, None)


@contextlib.contextmanager
def marking_checkpoints(model: nn.Module, blocks: bool | int = False) -> Iterator[None]:
    """Trace ``model`` with checkpointed regions annotated (see the module doc); ``blocks``: every
    repeated block a region (True or 1), or every K-th of them (K: blocks 0, K, 2K, ... of
    :func:`block_modules`, as a plan's ``checkpoint: blocks/K``)."""
    import torch.utils.checkpoint as ckpt

    regions = _Regions()

    def without_reentrant(fn, preserve_rng_state=True, context_fn=ckpt.noop_context_fn, determinism_check="default",
                          debug=False, *args, **kwargs):
        if context_fn is not ckpt.noop_context_fn:
            warnings.warn("spmdc: checkpoint(context_fn=...) (selective checkpointing) recomputes the whole region",
                          stacklevel=4)
        regions.enter()
        try:
            yield
        finally:
            regions.exit()

    class Reentrant:
        @staticmethod
        def apply(function, preserve_rng_state, *args):
            # as the autograd.Function: no input needing a gradient means no gradient flows back
            # into the region (eager PyTorch warns and leaves its parameters without gradients)
            grads = any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
            regions.enter()
            try:
                with contextlib.nullcontext() if grads else torch.no_grad():
                    return function(*args)
            finally:
                regions.exit()

    handles = []
    if blocks:
        named = dict(model.named_modules())
        for path in block_modules(model)[::int(blocks)]:   # (blocks=K: every K-th, from the first)
            handles.append(named[path].register_forward_pre_hook(lambda m, a: regions.enter()))
            handles.append(named[path].register_forward_hook(lambda m, a, o: regions.exit()))
    try:
        with torch_compat.checkpoint_implementations(without_reentrant, Reentrant), \
                fx_traceback.preserve_node_meta():
            yield
    finally:
        for h in handles:
            h.remove()


def region_of(node: torch.fx.Node) -> int | None:
    """The checkpoint region of a forward node (None outside regions and in the backward)."""
    if node.meta.get("partitioner_tag") == "is_backward":
        return None
    custom = node.meta.get("custom") or {}
    return custom.get(CHECKPOINT_KEY)


def _is_backward(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.meta.get("partitioner_tag") == "is_backward"


def _is_random(node: torch.fx.Node) -> bool:
    name = str(node.target)
    return any(name.startswith(r) for r in _RANDOM)


def rematerialize(graph: torch.fx.Graph) -> int:
    """Recompute every checkpointed region's backward inputs in the backward; returns how many
    nodes were copied."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    by_region: dict[int, list[torch.fx.Node]] = {}
    for n in graph.nodes:
        r = region_of(n) if n.op == "call_function" else None
        if r is not None:
            by_region.setdefault(r, []).append(n)
    copied = 0
    for r, members in by_region.items():
        inside = set(members)
        # a value read in the forward outside this region (another region's input, the next op after
        # it, an output) is the region's output: saved anyway, as eager checkpoint() returns it
        needed = [n for n in members if any(_is_backward(u) for u in n.users)
                  and not any(not _is_backward(u) and region_of(u) != r for u in n.users)]
        if not needed:
            continue
        first = min((u for n in needed for u in n.users if _is_backward(u)), key=order.__getitem__)
        todo = _closure(needed, inside)
        mapping: dict[torch.fx.Node, torch.fx.Node] = {}
        with graph.inserting_before(first):
            for n in sorted(todo, key=order.__getitem__):
                mapping[n] = _copy(graph, n, mapping, r)
                copied += 1
        for n in needed:
            for u in list(n.users):
                if _is_backward(u) and n in mapping:
                    u.replace_input_with(n, mapping[n])
    return copied


def _closure(needed: list[torch.fx.Node], inside: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """The region nodes to copy: ``needed`` and what they read inside the region, stopping at
    random draws (replayed, not redrawn) and at the region's inputs."""
    todo: set[torch.fx.Node] = set()
    stack = list(needed)
    while stack:
        n = stack.pop()
        if n in todo or n not in inside:
            continue
        if _is_random(n):
            continue   # the forward's draw is reused (dropout: see _copy)
        if n.target is operator.getitem and _is_random(n.args[0]) and "native_dropout" not in str(n.args[0].target):
            continue
        todo.add(n)
        for a in n.all_input_nodes:
            if n.target is operator.getitem and "native_dropout" in str(a.target):
                stack.append(a.args[0])   # dropout's input is recomputed; its mask is kept
            else:
                stack.append(a)
    return todo


def _copy(graph: torch.fx.Graph, n: torch.fx.Node, mapping: dict, region: int) -> torch.fx.Node:
    src = n.args[0] if n.target is operator.getitem else None
    if src is not None and "native_dropout" in str(src.target):
        return _replay_dropout(graph, n, src, mapping, region)
    new = graph.node_copy(n, lambda a: mapping.get(a, a))
    _mark(new, n, region)
    return new


def _replay_dropout(graph: torch.fx.Graph, n: torch.fx.Node, dropout: torch.fx.Node, mapping: dict,
                    region: int) -> torch.fx.Node:
    """``getitem(native_dropout(x, p, train), k)`` recomputed: the mask (k = 1) is the forward's;
    the output (k = 0) is ``(x' * mask) * 1/(1-p)`` as the kernel computes it."""
    mask = next((u for u in dropout.users if u.target is operator.getitem and u.args[1] == 1), None)
    if mask is None:
        with graph.inserting_after(dropout):
            mask = graph.call_function(operator.getitem, (dropout, 1))
        mask.meta.update({k: v for k, v in dropout.meta.items() if k != "val"})
        mask.meta["val"] = dropout.meta["val"][1]
    if n.args[1] == 1:
        return mask
    x, p = mapping.get(dropout.args[0], dropout.args[0]), dropout.args[1]
    train = dropout.args[2] if len(dropout.args) > 2 else True
    out_val = n.meta["val"]
    if not train or p == 0:
        return x
    fake = getattr(out_val, "fake_mode", None)
    with fake if fake is not None else contextlib.nullcontext():
        mask_val = torch.ops.prims.convert_element_type.default(mask.meta["val"], out_val.dtype)
    steps = [(torch.ops.prims.convert_element_type.default, lambda prev: (mask, out_val.dtype), mask_val),
             (torch.ops.aten.mul.Tensor, lambda prev: (x, prev), out_val),
             (torch.ops.aten.mul.Tensor, lambda prev: (prev, 1.0 / (1.0 - p)), out_val)]
    prev = None
    for target, args, val in steps:
        node = graph.call_function(target, args(prev))
        node.meta.update({k: v for k, v in n.meta.items() if k != "val"})
        node.meta["val"] = val
        _mark(node, n, region)
        prev = node
    return prev  # type: ignore[return-value]


def _mark(new: torch.fx.Node, old: torch.fx.Node, region: int) -> None:
    new.meta["partitioner_tag"] = "is_backward"
    custom = dict(old.meta.get("custom") or {})
    custom.pop(CHECKPOINT_KEY, None)
    custom[RECOMPUTE_KEY] = region
    new.meta["custom"] = custom
