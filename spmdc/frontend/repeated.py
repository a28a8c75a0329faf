"""Repeated blocks captured once: a deep model's program built from a shallow capture.

A transformer's 80 decoder layers are the same module class with the same shapes: tracing each
one again costs about a second of torch.export time per layer. When a model holds one
``nn.ModuleList`` (or ``nn.Sequential``) of identical blocks, :func:`export_reusing_blocks`

1. traces the model cut to its first 3 blocks (the container holds only them while the trace
   runs; nothing else changes, so constants derived from the config keep their values),
2. takes the middle block's nodes as the template and builds the program at the full depth
   ``L`` by repeating them (:func:`extend`): a copy's references to its own nodes, to the block
   before or after it (the residual stream forward, the gradient flowing in backward), to the
   block's parameters (renamed ``layers.1.`` -> ``layers.j.``) and to shared values (rotary
   tables, masks) are resolved per copy,
3. checks the construction before trusting it: the program built from 3 blocks for a depth of 4
   must equal, node for node (op, arguments, names, shapes, strides, module paths, checkpoint
   regions, signature), the program traced with blocks ``0, 1, 2`` and the model's last block
   (so a last block that behaves by its index is seen). Otherwise, or when a cut model cannot be
   traced, the model is exported whole and a :class:`RepeatedBlocksWarning` says why.

What is compared is the FX program every later stage starts from, so the torch-mlir import, the
translation and every pass see the same program as a full export would give them (node names
too: FX names nodes by creation order, and the construction creates them in program order).

Blocks must be alike to be repeated: the same classes, parameter and buffer shapes, dtypes,
``requires_grad`` and ``training`` flags, and the same plain attributes (an integer attribute may
follow the block's index, as HuggingFace's ``layer_idx`` does; a per-layer ``sliding_window`` or
attention type makes the blocks differ). Parameters shared between blocks, or nodes outside the
blocks that read a middle block (all layers' router logits summed into one loss, every hidden
state returned) make the model be exported whole.

For a forward pass over layers ``0 1 2`` the template is block 1; at depth 5::

    capture (k = 3):  embed  L0  L1  L2  norm ... | ... L2'  L1'  L0'  embed'
    built (L = 5):    embed  L0  L1  L1  L1  L2  norm ... | ... L2'  L1'  L1'  L1'  L0'  embed'
                                 c0  c1  c2                           c2   c1   c0
"""

from __future__ import annotations

import contextlib
import re
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch.export.graph_signature import ExportGraphSignature, InputSpec, OutputSpec, TensorArgument

from spmdc.frontend import torch_compat
from spmdc.frontend.checkpoint import CHECKPOINT_KEY, RECOMPUTE_KEY, block_modules
from spmdc.frontend.export import Traced
from spmdc.frontend.loss import WRAP_PREFIX, strip_wrapper
from spmdc.frontend.metadata import node_infos
from spmdc.frontend.program import ExportedProgramInfo, NodeInfo

__all__ = ["MIN_BLOCKS", "MIN_STAGE_BLOCKS", "BlockReuse", "BlockStack", "NotRepeatable", "RepeatedBlocksWarning",
           "export_reusing_blocks", "extend", "find_block_stack", "first_difference", "keep_blocks",
           "reusing_templates"]

MIN_BLOCKS = 8       # fewer blocks: exporting depths 3 and 4 costs about what the whole export does
MIN_STAGE_BLOCKS = 12   # a pipeline stage is traced at 4 and 5 blocks: below this, exported whole
TEMPLATE_DEPTH = 3   # blocks 0, 1 (the template: it has a block before and after it), 2
CHECK_DEPTH = 4      # the construction is checked against a real export at this depth
_TEMPLATE = 1


class NotRepeatable(Exception):
    """The program cannot be built from a shallow capture; the message says why."""


class RepeatedBlocksWarning(UserWarning):
    """Blocks looked alike but the built program did not match a real export: exported whole."""


@dataclass(frozen=True)
class BlockStack:
    """The repeated blocks: children ``first .. first+count-1`` of the container at ``path`` (user
    FQN); ``first`` is 0 for a model, a pipeline stage's first block for a stage
    (:mod:`spmdc.frontend.stage_blocks`)."""

    path: str
    count: int
    first: int = 0


@dataclass
class BlockReuse:
    """What :func:`export_reusing_blocks` did (``Captured.blocks``)."""

    stack: BlockStack | None
    reused: bool
    reason: str = ""                         # why not, when not reused
    timings: dict[str, float] = field(default_factory=dict)


# -- which blocks ----------------------------------------------------------------------------------
_SIMPLE = (bool, int, float, str, type(None))


def _plain(v: Any) -> bool:
    return isinstance(v, _SIMPLE) or (isinstance(v, (tuple, list)) and all(_plain(x) for x in v))


def _attributes(block: nn.Module) -> dict[str, Any]:
    """Every submodule's type, ``training`` flag, parameters, buffers, hooks and plain attributes,
    keyed by path within the block."""
    out: dict[str, Any] = {}
    for path, mod in block.named_modules(remove_duplicate=False):
        out[f"{path}:type"] = type(mod)
        out[f"{path}:training"] = mod.training
        out[f"{path}:hooks"] = torch_compat.hook_counts(mod)
        for name, p in mod.named_parameters(recurse=False):
            out[f"{path}.{name}:param"] = (tuple(p.shape), p.dtype, p.requires_grad)
        for name, b in mod.named_buffers(recurse=False):
            out[f"{path}.{name}:buffer"] = (tuple(b.shape), b.dtype, not torch_compat.is_persistent_buffer(mod, name))
        for name, v in vars(mod).items():
            if name.startswith("_") or name == "training":
                continue
            out[f"{path}.{name}"] = v if _plain(v) else ("object", type(v))
    return out


def _describe(key: str, value: Any) -> str:
    if key.endswith(":param"):
        shape, dtype, grad = value
        return f"{list(shape)} {str(dtype).removeprefix('torch.')}{'' if grad else ', frozen'}"
    return repr(value)


def find_block_stack(model: nn.Module) -> tuple[BlockStack | None, str]:
    """The container of identical blocks to build from a template, or ``(None, why not)``.

    The container is the one holding most blocks among :func:`~spmdc.frontend.checkpoint.block_modules`'s
    (an ``nn.ModuleList`` / ``nn.Sequential`` whose children share one type)."""
    by_container: dict[str, list[str]] = {}
    for path in block_modules(model):
        parent, _, name = path.rpartition(".")
        by_container.setdefault(parent, []).append(name)
    if not by_container:
        return None, "no nn.ModuleList / nn.Sequential of blocks of one type"
    path, names = max(by_container.items(), key=lambda kv: len(kv[1]))
    if names != [str(i) for i in range(len(names))]:
        return None, f"the blocks of '{path}' are not named 0..{len(names) - 1}"
    container = model.get_submodule(path) if path else model
    blocks = [container.get_submodule(n) for n in names]
    if len({id(b) for b in blocks}) != len(blocks):
        return None, f"'{path}' holds one module more than once"
    owners: dict[int, int] = {}
    for i, b in enumerate(blocks):
        for p in b.parameters():
            if owners.setdefault(id(p), i) != i:
                return None, f"a parameter is shared by blocks {owners[id(p)]} and {i} of '{path}'"
    inside = set(owners)
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in inside and not name.startswith(f"{path}." if path else ""):
            return None, f"parameter '{name}' outside the blocks is a block's parameter (tied)"
    attrs = [_attributes(b) for b in blocks]
    for key in attrs[0]:
        values = [a.get(key) for a in attrs]
        if all(v == values[0] for v in values):
            continue
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values) and \
                len({v - i for i, v in enumerate(values)}) == 1:
            continue   # the block's index, as HuggingFace's layer_idx
        where = key.split(":")[0].strip(".") or key
        j = next(i for i, v in enumerate(values) if v != values[0])
        return None, (f"block {j} of '{path}' differs from block 0 in '{where}' "
                      f"({_describe(key, values[j])} vs {_describe(key, values[0])})")
    if any(set(a) != set(attrs[0]) for a in attrs):
        return None, f"the blocks of '{path}' differ in their submodules or attributes"
    return BlockStack(path, len(blocks)), ""


@contextlib.contextmanager
def keep_blocks(model: nn.Module, stack: BlockStack, indices: list[int]) -> Iterator[None]:
    """The container holds only the blocks ``indices``, renamed ``0, 1, ...``, while the body runs
    (the same container object, so every reference the model holds to it sees the cut)."""
    container = model.get_submodule(stack.path) if stack.path else model
    blocks = list(torch_compat.children_table(container).values())
    with _holding(container, [blocks[i] for i in indices]):
        yield


@contextlib.contextmanager
def _holding(container: nn.Module, modules: list[nn.Module]) -> Iterator[None]:
    """The container holds ``modules`` as ``0, 1, ...`` while the body runs; the blocks it held
    before the outermost cut are :data:`_WHOLE`'s meanwhile."""
    table = torch_compat.children_table(container)
    saved = list(table.items())
    outer = _WHOLE.get(id(container))
    if outer is None:
        _WHOLE[id(container)] = [m for _, m in saved]
    table.clear()
    table.update((str(pos), m) for pos, m in enumerate(modules))
    try:
        yield
    finally:
        table.clear()
        table.update(saved)
        if outer is None:
            del _WHOLE[id(container)]


@contextlib.contextmanager
def _holding_last(container: nn.Module, first: list[nn.Module], last: nn.Module) -> Iterator[None]:
    """:func:`_holding` ``first + [last]``, ``last`` a block the cut left out: on the meta device
    it is traced with fake parameters, as the model's own are meanwhile (``fake_parameters``)."""
    from spmdc.frontend.deferred_init import fake_parameters, is_meta_model

    with _holding(container, [*first, last]), (fake_parameters(last) if is_meta_model(last) else
                                                contextlib.nullcontext()):
        yield


_WHOLE: dict[int, list[nn.Module]] = {}
"""A cut container's blocks before the cut (:func:`keep_blocks`), by the container's id: a cut
model's program is built from its template checked against the model's real last block."""


_TEMPLATES: dict[Any, tuple[Traced, Callable[[int], Callable[[Key, str], str]]] | str] | None = None
"""Checked templates (or why the blocks cannot be repeated) within :func:`reusing_templates`."""


@contextlib.contextmanager
def reusing_templates() -> Iterator[None]:
    """Within it, the traces a model's program is built from (its first 3 blocks, and the check at
    4 blocks with its last one) are made once per model and settings: every depth it is cut to
    (:func:`keep_blocks`: the layout search prices a 70B model at 4, 5, 6, ... blocks per stage,
    :mod:`spmdc.api.auto_plan`) is then built from them without tracing (about 4 s of torch.export
    per depth for a HuggingFace Llama), checked against the uncut model's last block. Entered by
    :func:`~spmdc.frontend.capture.reusing_captures`."""
    global _TEMPLATES
    outer = _TEMPLATES
    _TEMPLATES = {} if outer is None else outer
    try:
        yield
    finally:
        _TEMPLATES = outer


# -- building the program ----------------------------------------------------------------------------
_SUFFIX = re.compile(r"^(.*?)(?:_(\d+))?$")
_LIFTED = re.compile(r"^(.*lifted_tensor_)(\d+)$")


class _Layout:
    """Which block (0 .. k-1, or None: shared) every node of a ``k``-block program belongs to, and its
    position within the block's nodes."""

    def __init__(self, traced: Traced, stack: BlockStack, k: int) -> None:
        self.k = k
        self.first = stack.first
        self.pattern = re.compile(rf"^({re.escape(WRAP_PREFIX)})?({re.escape(stack.path)}\.)(\d+)(?=\.|$)")
        self.nodes = list(traced.ep.graph.nodes)
        self.specs = dict(zip([n for n in self.nodes if n.op == "placeholder"],
                              traced.ep.graph_signature.input_specs))
        self.infos: dict[str, NodeInfo] = node_infos(traced.ep, True)
        self.label: dict[torch.fx.Node, int | None] = {}
        for n in self.nodes:
            if n.op == "placeholder":
                self.label[n] = self.block_of(self.specs[n].target)
            elif n.op == "call_function":
                ni = self.infos.get(n.name)
                self.label[n] = self.block_of(ni.module_path) if ni else None
            elif n.op != "output":
                raise NotRepeatable(f"node '{n.name}' is a {n.op}")
        self._assign_gaps()
        self._assign_block_casts()
        self.blocks: list[list[torch.fx.Node]] = [[] for _ in range(k)]
        for n in self.nodes:
            if self.label.get(n) is not None:
                self.blocks[self.label[n]].append(n)
        self.pos = {n: i for b in self.blocks for i, n in enumerate(b)}
        sigs = [[self._signature(n) for n in b] for b in self.blocks]
        # block 0 may differ (nothing upstream needs a gradient: its input's is not computed)
        # (at more than TEMPLATE_DEPTH blocks, the last may differ too: a stage's, see export_reusing_blocks)
        for i in range(_TEMPLATE + 1, k - 1 if k > TEMPLATE_DEPTH else k):
            if sigs[i] != sigs[_TEMPLATE]:
                diff = next((j for j, (a, b) in enumerate(zip(sigs[_TEMPLATE], sigs[i])) if a != b),
                            min(len(sigs[_TEMPLATE]), len(sigs[i])))
                raise NotRepeatable(f"block {i}'s program differs from block {_TEMPLATE}'s at its node {diff} "
                                    f"({len(sigs[i])} vs {len(sigs[_TEMPLATE])} nodes)")
        self.previous = self._previous()

    def _previous(self) -> dict[torch.fx.Node, int]:
        """For each node of block 0 the template reads: the position in the template of the node
        block 2 reads in its place (what a later copy reads of the copy before it)."""
        m = _TEMPLATE
        eq: dict[torch.fx.Node, int] = {}
        for x, y in zip(self.blocks[m], self.blocks[m + 1]):
            for a, b in zip(x.all_input_nodes, y.all_input_nodes):
                if self.label.get(a) != m - 1:
                    continue
                if self.label.get(b) != m or eq.setdefault(a, self.pos[b]) != self.pos[b]:
                    raise NotRepeatable(f"'{x.name}' of block {m} reads '{a.name}' of block {m - 1}, "
                                        f"block {m + 1} does not read block {m} alike")
        return eq

    def block_of(self, path: str | None) -> int | None:
        m = self.pattern.match(path or "")
        if m is None:
            return None
        i = int(m.group(3)) - self.first
        return i if 0 <= i < self.k else None

    def renamed(self, path: str, block: int) -> str:
        return self.pattern.sub(lambda m: f"{m.group(1) or ''}{m.group(2)}{self.first + block}", path, count=1)

    def _assign_gaps(self) -> None:
        """A call's nodes between two blocks' spans of one phase belong to the earlier block (the
        gradient accumulated for the value flowing between them); unlabelled nodes right after the
        last span of a phase belong to its block."""
        calls = [n for n in self.nodes if n.op == "call_function"]
        infos = self.infos
        phase = {n: bool(infos[n.name].is_backward) if n.name in infos else False for n in calls}
        spans: dict[tuple[int, bool], list[int]] = {}
        for i, n in enumerate(calls):
            if self.label[n] is not None:
                s = spans.setdefault((self.label[n], phase[n]), [i, i])
                s[1] = i
        ordered = sorted(spans.items(), key=lambda kv: kv[1][0])
        for (a, sa), (b, sb) in zip(ordered, ordered[1:]):
            if sa[1] >= sb[0]:
                raise NotRepeatable(f"blocks {a[0]} and {b[0]} interleave")
        for idx, ((blk, ph), (lo, hi)) in enumerate(ordered):
            for i in range(lo, hi + 1):
                self.label[calls[i]] = blk
            nxt = ordered[idx + 1] if idx + 1 < len(ordered) else None
            if nxt is not None and nxt[0][1] == ph:
                end = nxt[1][0]
                for i in range(hi + 1, end):
                    self.label[calls[i]] = blk
            else:
                i = hi + 1   # (up to a node that reads another block's: a stage's gradient casts at the end)
                while i < len(calls) and not infos[calls[i].name].module_path and phase[calls[i]] == ph and \
                        all(self.label.get(a) in (None, blk) for a in calls[i].all_input_nodes):
                    self.label[calls[i]] = blk
                    i += 1

    def _assign_block_casts(self) -> None:
        """Nodes outside every module that read only one block's values belong to that block: mixed
        precision's casts of its parameters at the top of the program, and of its gradients at the
        end."""
        for n in self.nodes:
            if n.op != "call_function" or self.label.get(n) is not None or self.infos[n.name].module_path:
                continue
            owners = {self.label.get(a) for a in n.all_input_nodes}
            if len(owners) == 1 and None not in owners:
                self.label[n] = owners.pop()

    def _signature(self, n: torch.fx.Node) -> tuple:
        if n.op == "placeholder":
            spec = self.specs[n]
            rel = _LIFTED.sub(r"\1", self.renamed(spec.target, 0))
            return ("placeholder", spec.kind, rel, spec.persistent)
        ni = self.infos.get(n.name)
        return ("call", str(n.target), ni.is_backward if ni else None,
                self.renamed(ni.module_path, 0) if ni and ni.module_path else "")


def _resolved_stacks(graph_nodes: list[torch.fx.Node]) -> dict[torch.fx.Node, Any]:
    """Each call's ``nn_module_stack`` as :func:`~spmdc.frontend.metadata.node_infos` resolves it."""
    by_seq: dict[int, Any] = {}
    for n in graph_nodes:
        st, seq = n.meta.get("nn_module_stack"), n.meta.get("seq_nr")
        if st and seq is not None and n.meta.get("partitioner_tag") != "is_backward":
            by_seq.setdefault(seq, st)
    return {n: (n.meta.get("nn_module_stack") or n.meta.get("fwd_nn_module_stack")
                or by_seq.get(n.meta.get("seq_nr")))
            for n in graph_nodes if n.op == "call_function"}


Key = tuple  # (node of the k-block program, copy of the template or None)


def extend(traced: Traced, stack: BlockStack, k: int, depth: int, model: nn.Module,
           names: Callable[[Key, str], str] | None = None) -> tuple[Traced, list[Key]]:
    """The program of ``model`` at ``depth`` blocks, built from ``traced``, its trace at ``k`` blocks
    (``k >= 3``; ``depth >= k - 1``), and the key of every node built, in program order. Parameters
    and buffers of the added blocks are ``model``'s. ``names(key, natural)`` names a node (default:
    as FX names it when created in program order). Raises :class:`NotRepeatable` when the
    trace's structure does not allow it."""
    if k < 3 or depth < k - 1:
        raise NotRepeatable(f"cannot build {depth} blocks from {k}")
    lay = _Layout(traced, stack, k)
    m, extra = _TEMPLATE, depth - k           # copies 0 .. extra of block m
    copies = range(extra + 1)
    ep = traced.ep

    def new_block(label: int, c: int | None) -> int:
        return m + c if c is not None else (label if label < m else label + extra)

    env: dict[tuple[torch.fx.Node, int | None], torch.fx.Node] = {}

    def node_at(block: int, pos: int) -> torch.fx.Node:
        if block < m:
            return env[(lay.blocks[block][pos], None)]
        if block <= m + extra:
            return env[(lay.blocks[m][pos], block - m)]
        return env[(lay.blocks[block - extra][pos], None)]

    def resolve(a: torch.fx.Node, reader: int | None, owner: int | None) -> torch.fx.Node:
        """``a`` as read by a node of capture block ``reader`` that is in new block ``owner``
        (both None: a shared node)."""
        la = lay.label.get(a)
        try:
            if la is None:
                return env[(a, None)]
            if reader is None:
                if la == 0:
                    return node_at(0, lay.pos[a])
                if la == k - 1:
                    return node_at(depth - 1, lay.pos[a])
                raise NotRepeatable(f"'{a.name}' of block {la} is read outside the blocks")
            if abs(la - reader) > 1:
                raise NotRepeatable(f"block {reader} reads '{a.name}' of block {la}")
            if reader == m and la == m - 1 and owner > m:   # a later copy reads the copy before it
                return node_at(owner - 1, lay.previous[a])
            return node_at(owner + la - reader, lay.pos[a])
        except KeyError:
            raise NotRepeatable(f"'{a.name}' is read before the built program defines it") from None

    # emission order: every run of template nodes is repeated, ascending or descending as the
    # blocks around it run (forward: 0 1 2; backward: 2 1 0)
    order: list[tuple[torch.fx.Node, int | None]] = []
    nodes = lay.nodes
    i = 0
    while i < len(nodes):
        n = nodes[i]
        if lay.label.get(n) != m or n.op == "output":
            order.append((n, None))
            i += 1
            continue
        j = i
        while j < len(nodes) and lay.label.get(nodes[j]) == m and nodes[j].op == n.op:
            j += 1
        before = next((lay.label[x] for x in reversed(nodes[:i]) if lay.label.get(x) not in (None, m)), None)
        after = next((lay.label[x] for x in nodes[j:] if lay.label.get(x) not in (None, m)), None)
        ascending = before < m if before is not None else (after is None or after > m)
        for c in (copies if ascending else reversed(copies)):
            order.extend((x, c) for x in nodes[i:j])
        i = j

    # placeholders' targets: block renamed, lifted constants numbered again in program order
    targets: dict[tuple[torch.fx.Node, int | None], str | None] = {}
    lifted = 0
    for n, c in order:
        if n.op != "placeholder":
            continue
        t = lay.specs[n].target
        label = lay.label[n]
        if t is not None and label is not None:
            t = _lifted_buffer(lay, n, lay.renamed(t, new_block(label, c)), new_block(label, c) - label)
        if t is not None and lay.specs[n].kind == torch.export.graph_signature.InputKind.CONSTANT_TENSOR:
            mm = _LIFTED.match(t)
            if mm:
                t = f"{mm.group(1)}{lifted}"
                lifted += 1
        targets[(n, c)] = t

    graph = torch.fx.Graph()
    regions = _Regions(lay, new_block)
    stacks = _resolved_stacks(nodes)
    seq_stride = 1 + max((n.meta.get("seq_nr") or 0 for n in nodes), default=0)
    input_specs: list[InputSpec] = []
    state_dict: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    output_node = nodes[-1]
    for n, c in order:
        if n is output_node:
            break
        label = lay.label.get(n)
        owner = new_block(label, c) if label is not None else None
        if n.op == "placeholder":
            spec = lay.specs[n]
            t = targets[(n, c)]
            name = n.name
            if spec.target is not None and t != spec.target:
                old, new = spec.target.replace(".", "_"), t.replace(".", "_")
                if not n.name.endswith(old):   # torch.export lower-cases some names
                    old, new = old.lower(), new.lower()
                if not n.name.endswith(old):
                    raise NotRepeatable(f"placeholder '{n.name}' is not named after '{spec.target}'")
                name = n.name[: len(n.name) - len(old)] + new
            new_node = graph.create_node("placeholder", name, name=name)
            new_node.meta = dict(n.meta)
            input_specs.append(InputSpec(kind=spec.kind, arg=TensorArgument(name=new_node.name), target=t,
                                         persistent=spec.persistent))
            _state(ep, spec, t, model, state_dict, constants)
        else:
            args = torch.fx.node.map_arg(n.args, lambda a: resolve(a, label, owner))
            kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: resolve(a, label, owner))
            natural = _SUFFIX.match(n.name).group(1)
            wanted = names((n, c), natural) if names else natural
            new_node = graph.create_node(n.op, n.target, args, kwargs, name=wanted)
            if names and new_node.name != wanted:
                raise NotRepeatable(f"node name '{wanted}' is taken")
            meta = dict(n.meta)
            st = stacks.get(n)
            if st and label is not None:
                meta["nn_module_stack"] = {key: (lay.renamed(p, owner) if isinstance(p, str) else p, t)
                                           for key, (p, t) in st.items()}
            elif st:
                meta["nn_module_stack"] = st
            if c is not None and meta.get("seq_nr") is not None:
                meta["seq_nr"] = meta["seq_nr"] + (c + 1) * seq_stride
            region = (meta.get("custom") or {}).get(CHECKPOINT_KEY)
            if region is not None and meta.get("partitioner_tag") != "is_backward":
                meta["custom"] = {**meta["custom"], CHECKPOINT_KEY: regions.key(region, label, owner)}
            new_node.meta = meta
        env[(n, c)] = new_node

    # the outputs: a block's gradients / buffer updates repeat with it
    out_specs = list(ep.graph_signature.output_specs)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    values = list(output_node.args[0])
    entries: list[tuple[int, int | None]] = []
    labels = [lay.block_of(s.target) if s.target is not None and s.kind.name in (
        "GRADIENT_TO_PARAMETER", "BUFFER_MUTATION") else None for s in out_specs]
    i = 0
    while i < len(values):
        if labels[i] != m:
            entries.append((i, None))
            i += 1
            continue
        j = i
        while j < len(values) and labels[j] == m:
            j += 1
        for c in copies:
            entries.extend((x, c) for x in range(i, j))
        i = j
    new_values, new_out_specs = [], []
    for idx, c in entries:
        v, spec, label = values[idx], out_specs[idx], labels[idx]
        if label is None:
            nv = torch.fx.node.map_arg(v, lambda a: resolve(a, None, None))
            target = spec.target
            if spec.kind.name == "GRADIENT_TO_USER_INPUT":   # (a stage's boundary input, named anew)
                target = _input_named(target, placeholders, [x for x in graph.nodes if x.op == "placeholder"], env)
        else:
            if not isinstance(v, torch.fx.Node) or lay.label.get(v) != label:
                raise NotRepeatable(f"output '{spec.target}' is not computed in its block")
            block = new_block(label, c)
            nv = node_at(block, lay.pos[v])
            target = lay.renamed(spec.target, block)
        new_values.append(nv)
        arg = TensorArgument(name=nv.name) if isinstance(nv, torch.fx.Node) else spec.arg
        new_out_specs.append(OutputSpec(kind=spec.kind, arg=arg, target=target))
    out = graph.output(type(output_node.args[0])(new_values))
    out.meta = dict(output_node.meta)
    _renumber_regions(graph, min((r for n in nodes if isinstance(r := (n.meta.get("custom") or {}).get(CHECKPOINT_KEY),
                                                                   int)), default=0))
    gm = torch.fx.GraphModule(ep.graph_module, graph)
    sig = ExportGraphSignature(input_specs=input_specs, output_specs=new_out_specs)
    new_ep = torch_compat.update_exported_program(ep, gm, sig, state_dict=state_dict, constants=constants)
    return _traced(new_ep, traced, lay, depth), [key for key in order if key[0] is not output_node]


def _input_named(target: str, old: list[torch.fx.Node], new: list[torch.fx.Node], env: dict) -> str:
    """An input gradient's target (the input's name, or ``arg<position>_1`` after the joint
    decomposition) in the built program."""
    m = re.fullmatch(r"arg(\d+)_(\d+)", target)
    if m:
        return f"arg{new.index(env[(old[int(m.group(1))], None)])}_{m.group(2)}"
    named = next((x for x in old if x.name == target), None)
    if named is None:
        raise NotRepeatable(f"a gradient output names input '{target}', which the trace does not hold")
    return env[(named, None)].name


def _lifted_buffer(lay: _Layout, n: torch.fx.Node, target: str, shift: int) -> str:
    """A block's constant held as a buffer (a pipeline stage holds the model's lifted constants,
    numbered model-wide: ``layers.8.attn.lifted_tensor_18``) at a block ``shift`` blocks on: its
    number steps as from the template block to the next."""
    mm = _LIFTED.match(target)
    if mm is None or shift == 0 or lay.specs[n].kind != torch.export.graph_signature.InputKind.BUFFER:
        return target
    pos = lay.pos.get(n)
    if pos is None or len(lay.blocks) <= _TEMPLATE + 1 or pos >= len(lay.blocks[_TEMPLATE + 1]):
        raise NotRepeatable(f"constant '{target}' has no counterpart in the next block")
    step = (_number(lay.specs[lay.blocks[_TEMPLATE + 1][pos]].target)[1]
            - _number(lay.specs[lay.blocks[_TEMPLATE][pos]].target)[1])
    return f"{mm.group(1)}{_number(lay.specs[n].target)[1] + shift * step}"


def _state(ep: Any, spec: InputSpec, target: str | None, model: nn.Module, state_dict: dict, constants: dict) -> None:
    """The value of a placeholder of the built program: an added block's parameters and buffers are
    the model's; constants are the template's (the same value in every block)."""
    kind = spec.kind.name
    if kind == "USER_INPUT":
        return
    same = target == spec.target
    if kind == "PARAMETER":
        state_dict[target] = ep.state_dict[spec.target] if same else model.get_parameter(strip_wrapper(target, True))
    elif kind == "BUFFER":
        value = (ep.state_dict if spec.persistent else ep.constants)[spec.target] if same else \
            model.get_buffer(strip_wrapper(target, True))
        (state_dict if spec.persistent else constants)[target] = value
    elif kind == "CONSTANT_TENSOR":
        constants[target] = ep.constants[spec.target]
    else:
        raise NotRepeatable(f"input kind {kind}")


class _Regions:
    """Checkpoint regions of the built program. A region belongs to the block most of its forward
    nodes are in; a node's region is keyed by the new block it belongs to and its rank among that
    block's regions (a node of block 1 may carry block 0's region: the check of its input)."""

    def __init__(self, lay: _Layout, new_block: Callable[[int, int | None], int]) -> None:
        counts: dict[Any, dict[int | None, int]] = {}
        for n in lay.nodes:
            r = (n.meta.get("custom") or {}).get(CHECKPOINT_KEY)
            if r is not None and n.meta.get("partitioner_tag") != "is_backward":
                by = counts.setdefault(r, {})
                by[lay.label.get(n)] = by.get(lay.label.get(n), 0) + 1
        self.block = {r: max(by, key=lambda b: by[b]) for r, by in counts.items()}
        self.rank = {r: sorted(q for q in self.block if self.block[q] == b).index(r) for r, b in self.block.items()}
        self.new_block = new_block

    def key(self, region: Any, label: int | None, owner: int | None) -> Any:
        b = self.block.get(region)
        if b is None:
            return ("shared", region)
        if label is None:
            if b == _TEMPLATE:
                raise NotRepeatable(f"a node outside the blocks is in block {b}'s checkpoint region")
            return ("block", self.new_block(b, None), self.rank[region])
        return ("block", owner + b - label, self.rank[region])


def _renumber_regions(graph: torch.fx.Graph, start: int = 0) -> None:
    """Checkpoint regions numbered again from ``start`` in the order the forward enters them (a
    copy's regions are its own; a pipeline stage's regions keep the model's numbers: they start at
    its first block's)."""
    ids: dict[Any, int] = {}
    for n in graph.nodes:   # a region is a forward notion (backward nodes inherit their op's tag)
        custom = n.meta.get("custom")
        if custom and CHECKPOINT_KEY in custom and n.meta.get("partitioner_tag") != "is_backward":
            ids.setdefault(custom[CHECKPOINT_KEY], start + len(ids))
    for n in graph.nodes:
        custom = n.meta.get("custom")
        if custom and any(custom.get(key) in ids for key in (CHECKPOINT_KEY, RECOMPUTE_KEY)):
            n.meta["custom"] = {key: ids.get(v, v) if key in (CHECKPOINT_KEY, RECOMPUTE_KEY) else v
                                for key, v in custom.items()}


def _traced(ep: Any, template: Traced, lay: _Layout, depth: int) -> Traced:
    for alias, canon in template.tied.items():
        if lay.block_of(alias) is not None or lay.block_of(canon) is not None:
            raise NotRepeatable(f"'{alias}' is tied to '{canon}'")
    per_block = [sorted(lay.renamed(u, 0) for u in template.unused if lay.block_of(u) == i) for i in range(lay.k)]
    if any(p != per_block[_TEMPLATE] for p in per_block[_TEMPLATE:]):
        raise NotRepeatable("the blocks leave different parameters unused")
    extra = depth - lay.k
    unused: list[str] = []
    for u in template.unused:
        b = lay.block_of(u)
        if b is None or b < _TEMPLATE:
            unused.append(u)
        elif b == _TEMPLATE:
            unused.extend(lay.renamed(u, j) for j in range(b, b + extra + 1))
        else:
            unused.append(lay.renamed(u, b + extra))
    return Traced(ep, template.train, template.root, dict(template.tied), unused, template.metadata_complete,
                  dict(template.timings))


# -- checking ------------------------------------------------------------------------------------
def _node_rows(graph: torch.fx.Graph, infos: dict[str, NodeInfo], with_names: bool = True) -> list[Any]:
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}

    def ref(a: Any) -> Any:
        return ("%", index[a]) if isinstance(a, torch.fx.Node) else a

    rows: list[Any] = []
    for n in nodes:
        val = n.meta.get("val")
        vals = tuple((tuple(v.shape), v.dtype, tuple(v.stride()) if v.layout == torch.strided else None)
                     if isinstance(v, torch.Tensor) else repr(v)
                     for v in (val if isinstance(val, (tuple, list)) else (val,)))
        ni = infos.get(n.name)
        rows.append((n.name if with_names else "", n.op, str(n.target) if with_names or n.op != "placeholder" else "",
                     repr(torch.fx.node.map_aggregate(n.args, ref)), repr(torch.fx.node.map_aggregate(n.kwargs, ref)),
                     vals, (ni.op, ni.module_path, ni.module_type, ni.is_backward, ni.stack_trace, ni.arg_strides,
                            ni.recompute) if ni else None))
    return rows


def _rows(info: ExportedProgramInfo) -> list[Any]:
    rows = _node_rows(info.graph_module.graph, info.nodes)
    rows += [("input", i) for i in info.inputs] + [("output", o) for o in info.outputs]
    rows.append(("unused", sorted(info.unused_parameters)))
    rows.append(("tied", sorted(info.tied_parameters.items())))
    rows.append(("state", sorted(info.state)))
    return rows


def first_difference(a: ExportedProgramInfo, b: ExportedProgramInfo) -> str | None:
    """None when the two programs are the same node for node; else the first difference."""
    ra, rb = _rows(a), _rows(b)
    for x, y in zip(ra, rb):
        if x != y:
            what = f"node '{y[0]}'" if isinstance(y[0], str) and y[0] not in ("input", "output") else y[0]
            field = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), None)
            built, exported = (x, y) if field is None else (x[field], y[field])
            return f"at {what}: built {built!r:.160}, exported {exported!r:.160}"
    if len(ra) != len(rb):
        return f"{len(ra)} vs {len(rb)} rows"
    for fqn, v in a.state.items():
        w = b.state[fqn]
        if (v.device.type != "meta" and not torch_compat.is_fake(v)
                and w.device.type != "meta" and not torch_compat.is_fake(w)
                and fqn.rpartition(".")[2].startswith("lifted_tensor") and not torch.equal(v, w)):
            return f"constant '{fqn}' differs"
    return None


# -- names -----------------------------------------------------------------------------------------
def _number(name: str) -> tuple[str, int]:
    m = _SUFFIX.match(name)
    return m.group(1), int(m.group(2) or 0)


def _fitted_names(built: list[Key], check: Traced,
                  k: int = TEMPLATE_DEPTH) -> Callable[[int], Callable[[Key, str], str]]:
    """Node names at a depth, as a full export would give them (call the result with the depth).

    FX numbers the nodes of one base name (``mm``, ``mm_1``, ...) in the order they were created,
    which is not always program order. A node's number is linear in the depth and in its copy's
    index: fitted on the trace at 3 blocks (copy 0) and the trace at 4 (copies 0 and 1), matched
    node for node with the program built for 4 blocks (``built``: its keys in program order)."""
    exported = [n for n in check.ep.graph.nodes if n.op != "output"]
    if len(exported) != len(built):
        raise NotRepeatable(f"the program built for {k + 1} blocks has {len(built)} nodes, "
                            f"the exported one {len(exported)}")
    at4 = {key: node.name for key, node in zip(built, exported)}

    def at(depth: int) -> Callable[[Key, str], str]:
        def name(key: Key, natural: str) -> str:
            x, c = key
            first = (x, 0 if c is not None else None)
            if first not in at4:
                return natural
            base, n3 = _number(x.name)
            b4, n4 = _number(at4[first])
            if b4 != base:
                raise NotRepeatable(f"'{x.name}' is named '{at4[first]}' at {k + 1} blocks")
            number = n3 + (depth - k) * (n4 - n3)
            if c is not None:
                number += c * (_number(at4[(x, 1)])[1] - n4)
            return base if number == 0 else f"{base}_{number}"
        return name

    return at


def _trace_blocks(keep: Callable[[list[int]], contextlib.AbstractContextManager], indices: list[int],
                  trace: Callable[[], Traced]) -> Traced:
    with keep(indices):
        try:
            return trace()
        except Exception as e:  # noqa: BLE001  (the model may need all its blocks: export it whole)
            raise NotRepeatable(f"tracing blocks {indices} alone failed: {type(e).__name__}: {e}") from e


def _checked_template(model: nn.Module, stack: BlockStack, depth: int,
                      keep: Callable[[list[int]], contextlib.AbstractContextManager],
                      keep_check: Callable[[list[int]], contextlib.AbstractContextManager], check_indices: list[int],
                      trace: Callable[[], Traced], finish: Callable[[Traced], ExportedProgramInfo],
                      timings: dict[str, float]) -> tuple[Traced, Callable[[int], Callable[[Key, str], str]]]:
    """The trace of the first ``depth`` blocks (``keep``) and its names at any depth, checked: the
    program built from it for ``depth + 1`` blocks must equal the trace of the blocks
    ``check_indices`` (``keep_check``: the first ``depth`` and a last one); raises
    :class:`NotRepeatable`."""
    t = time.perf_counter()
    shallow = _trace_blocks(keep, list(range(depth)), trace)
    timings[f"trace_{depth}"] = time.perf_counter() - t
    t = time.perf_counter()
    check = _trace_blocks(keep_check, check_indices, trace)
    timings[f"trace_{depth + 1}"] = time.perf_counter() - t
    _, keys = extend(shallow, stack, depth, depth + 1, model)
    names = _fitted_names(keys, check, depth)
    built, _ = extend(shallow, stack, depth, depth + 1, model, names(depth + 1))
    diff = first_difference(finish(built), finish(check))
    if diff is not None:
        raise NotRepeatable(f"the program built for {depth + 1} blocks differs from the exported one {diff}")
    return shallow, names


# -- entry -------------------------------------------------------------------------------------------
def export_reusing_blocks(model: nn.Module, trace: Callable[[], Traced],
                          finish: Callable[[Traced], ExportedProgramInfo],
                          reuse: bool | None, key: Any = None) -> tuple[ExportedProgramInfo, BlockReuse]:
    """``finish(trace())`` of ``model``, or its program built from shallow traces when it holds
    repeated blocks (``reuse``: None = when it has at least :data:`MIN_BLOCKS`; True = whenever it
    can; False = never); ``key``: what ``trace`` traces besides the model (its inputs and settings),
    to build from the same traces within :func:`reusing_templates`."""
    if reuse is False or not isinstance(model, nn.Module):
        return finish(trace()), BlockReuse(None, False, "off")
    stage = getattr(model, "repeated_blocks", None)   # a pipeline stage's run (spmdc.frontend.stage_blocks)
    if stage is not None:
        stack, why = stage.stack, ""
        # (a stage is cut to its first blocks; that every block is the same program was checked
        # on its fx graph, the last one included)
        # (its last block may differ from the others: a stage's output gradient comes in as an
        # input, so the template is the trace at one block more)
        depth = TEMPLATE_DEPTH + 1
        check_indices = list(range(depth + 1))

        def keep(indices: list[int]) -> contextlib.AbstractContextManager:
            return stage.keeping(model, len(indices))
    else:
        stack, why = find_block_stack(model)
        depth = TEMPLATE_DEPTH
        check_indices = [*range(CHECK_DEPTH - 1), stack.count - 1] if stack is not None else []

        def keep(indices: list[int]) -> contextlib.AbstractContextManager:
            return keep_blocks(model, stack, indices)
    least = len(check_indices) + 1 if reuse else MIN_STAGE_BLOCKS if stage is not None else MIN_BLOCKS
    if stage is None and stack is not None and key is not None and _TEMPLATES is not None:
        return _from_template(model, stack, trace, finish, key, least)
    if stack is None or stack.count < least:
        return finish(trace()), BlockReuse(stack, False, why or f"{stack.count} blocks (< {least})")
    timings: dict[str, float] = {}
    try:
        # the check's last block is the model's last: a block that behaves by its index at the end
        # (HuggingFace's layer_types, a last layer without its MLP) makes the check fail
        shallow, names = _checked_template(model, stack, depth, keep, keep, check_indices, trace, finish, timings)
        t = time.perf_counter()
        built, _ = extend(shallow, stack, depth, stack.count, model, names(stack.count))
        info = finish(built)
        timings["build"] = time.perf_counter() - t
    except NotRepeatable as e:
        warnings.warn(f"spmdc: the {stack.count} blocks of '{stack.path}' are exported one by one: {e}",
                      RepeatedBlocksWarning, stacklevel=3)
        return finish(trace()), BlockReuse(stack, False, str(e), timings)
    info.timings.update(timings)
    return info, BlockReuse(stack, True, "", timings)


def _from_template(model: nn.Module, stack: BlockStack, trace: Callable[[], Traced],
                   finish: Callable[[Traced], ExportedProgramInfo], key: Any,
                   least: int) -> tuple[ExportedProgramInfo, BlockReuse]:
    """:func:`export_reusing_blocks` within :func:`reusing_templates`: the model, whole or cut to
    :data:`CHECK_DEPTH` blocks or more (:func:`keep_blocks`), built from its template, traced and
    checked once per model, blocks and settings; the check's last block is the uncut model's. A
    model of fewer than ``least`` blocks (uncut) is traced whole, as without the cache."""
    container = model.get_submodule(stack.path) if stack.path else model
    blocks = list(torch_compat.children_table(container).values())
    whole = _WHOLE.get(id(container), blocks)
    if len(whole) < least or stack.count < CHECK_DEPTH:
        return finish(trace()), BlockReuse(stack, False, f"{len(whole)} blocks (< {least})" if len(whole) < least
                                           else f"cut to {stack.count} blocks")
    inside = {id(m) for b in blocks for m in b.modules()}
    tkey = (key, id(container), tuple(map(id, blocks[:TEMPLATE_DEPTH])), id(whole[-1]),
            tuple(id(m) for m in model.modules() if id(m) not in inside))
    assert _TEMPLATES is not None
    timings: dict[str, float] = {}
    if tkey not in _TEMPLATES:
        t = time.perf_counter()
        try:
            _TEMPLATES[tkey] = _checked_template(
                model, stack, TEMPLATE_DEPTH, lambda ix: keep_blocks(model, stack, ix),
                lambda ix: _holding_last(container, blocks[:TEMPLATE_DEPTH], whole[-1]),
                [*range(TEMPLATE_DEPTH), len(whole) - 1], trace, finish, timings)
        except NotRepeatable as e:
            warnings.warn(f"spmdc: the {len(whole)} blocks of '{stack.path}' are exported one by one: {e}",
                          RepeatedBlocksWarning, stacklevel=4)
            _TEMPLATES[tkey] = str(e)
        timings["template"] = time.perf_counter() - t
    got = _TEMPLATES[tkey]
    if isinstance(got, str):
        return finish(trace()), BlockReuse(stack, False, got, timings)
    shallow, names = got
    t = time.perf_counter()
    built, _ = extend(shallow, stack, TEMPLATE_DEPTH, stack.count, model, names(stack.count))
    info = finish(built)
    timings["build"] = time.perf_counter() - t
    info.timings.update(timings)
    return info, BlockReuse(stack, True, "", timings)
