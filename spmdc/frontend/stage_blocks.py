"""A pipeline stage's run of repeated blocks, and the stage cut to its first few of them.

A stage of a deep model holds a run of its identical blocks (stage 1 of 4 over Llama-3-70B:
``model.layers.20`` .. ``model.layers.39``). Its programs are built as a whole model's are
(:mod:`spmdc.frontend.repeated`): the stage is traced cut to 3 blocks (the template) and to 4
(the check), and the program at its depth is built from the template::

    blocks = StageBlocks.find(stage_module, stack)     # stack: the model's BlockStack
    blocks.stack                                       # BlockStack("model.layers", count=20, first=20)
    with blocks.keeping(stage_module, 3):              # its graph runs blocks 20, 21, 22 only
        ...

A stage is an fx graph, not a module tree, so cutting it edits the graph: the nodes of the blocks
after the first ``j`` are dropped, and a node after the run that read the run's last block reads
the same node of block ``j - 1`` instead (the blocks are checked to be the same program, node for
node, before any cut). The dropped blocks' parameter holders leave the stage's module tree while
the cut lasts, so a trace of it sees only the kept blocks' parameters, as a trace of a model whose
container holds fewer blocks does.

A stage whose blocks differ in their fx program, or which holds fewer than two blocks, has no
``StageBlocks``; a stage that cannot be cut (an op after the blocks reads one before the last) or
whose built program differs from a real trace of it is exported whole
(:func:`~spmdc.frontend.repeated.export_reusing_blocks` warns why).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from spmdc.frontend import torch_compat
from spmdc.frontend.loss import WRAP_PREFIX
from spmdc.frontend.metadata import module_path
from spmdc.frontend.repeated import BlockStack, NotRepeatable

__all__ = ["StageBlocks"]


_LIFTED = re.compile(r"lifted_tensor_\d+$")


def _pattern(stack: BlockStack) -> re.Pattern[str]:
    return re.compile(rf"^(?:{re.escape(WRAP_PREFIX)})?{re.escape(stack.path)}\.(\d+)(?=\.|$)")


def _labels(graph: torch.fx.Graph, stack: BlockStack) -> dict[torch.fx.Node, int]:
    """The block index of every get_attr and call node that belongs to one of ``stack``'s blocks:
    by its target (a parameter), its module path, or, outside every module (a mixed-precision cast
    of a block's parameter), by its operands when they are all one block's."""
    pattern = _pattern(stack)
    out: dict[torch.fx.Node, int] = {}
    for n in graph.nodes:
        if n.op == "get_attr":
            m = pattern.match(str(n.target))
        elif n.op == "call_function":
            m = pattern.match(module_path(n))
            if m is None and not module_path(n) and n.all_input_nodes:
                owners = {out.get(a) for a in n.all_input_nodes}
                if len(owners) == 1 and None not in owners:
                    out[n] = owners.pop()
                continue
        else:
            continue
        if m is not None:
            out[n] = int(m.group(1))
    return out


def _signature(n: torch.fx.Node, own: dict[torch.fx.Node, int], label: dict[torch.fx.Node, int],
               block: int) -> tuple:
    """A block's node, relative to its block: what it computes and where its operands come from."""
    def ref(a: torch.fx.Node) -> tuple:
        b = label.get(a)
        if b is None:
            return ("shared", a.name)
        return ("block", b - block, own[a])
    args = torch.fx.node.map_arg((n.args, n.kwargs), ref)
    path = re.sub(r"\.\d+(?=\.|$)", ".#", module_path(n) if n.op == "call_function" else str(n.target), count=1)
    path = _LIFTED.sub("lifted_tensor_#", path)   # (torch.export numbers its lifted constants model-wide)
    return (n.op, str(n.target) if n.op == "call_function" else "", path, repr(args))


@dataclass(frozen=True)
class StageBlocks:
    """A stage's run of blocks: ``stack.first`` .. ``stack.first + stack.count - 1`` of the model's
    container at ``stack.path``."""

    stack: BlockStack

    @staticmethod
    def find(module: torch.fx.GraphModule, stack: BlockStack | None) -> StageBlocks | None:
        """The run of ``stack``'s blocks in the stage ``module``, or None (see the module doc)."""
        if stack is None:
            return None
        try:
            first, blocks = _blocks(module.graph, stack)
        except NotRepeatable:
            return None
        if len(blocks) < 2:
            return None
        return StageBlocks(BlockStack(stack.path, len(blocks), first))

    @contextlib.contextmanager
    def keeping(self, module: torch.fx.GraphModule, j: int) -> Iterator[None]:
        """``module`` runs only its first ``j`` blocks while the body runs; raises
        :class:`~spmdc.frontend.repeated.NotRepeatable` when it cannot be cut."""
        first, blocks = _blocks(module.graph, self.stack)
        if first != self.stack.first or len(blocks) != self.stack.count or not 1 <= j <= len(blocks):
            raise NotRepeatable(f"the stage does not hold blocks {self.stack.first}..{self.stack.first + j - 1}")
        graph = _cut(module.graph, blocks, j)
        container = module.get_submodule(self.stack.path)
        table = torch_compat.children_table(container)
        saved, original = dict(table), module.graph
        for i in range(first + j, first + len(blocks)):
            table.pop(str(i), None)
        module.graph = graph
        try:
            yield
        finally:
            module.graph = original
            table.clear()
            table.update(saved)


def _blocks(graph: torch.fx.Graph, stack: BlockStack) -> tuple[int, list[list[torch.fx.Node]]]:
    """(first block index, each block's nodes in program order); each block must be the same
    program as the second (ops outside the blocks may come between them, as mixed precision's
    casts of every parameter at the top do: the cut refuses one that reads a dropped block)."""
    label = _labels(graph, stack)
    if not label:
        raise NotRepeatable(f"the stage holds no block of '{stack.path}'")
    first, last = min(label.values()), max(label.values())
    blocks: list[list[torch.fx.Node]] = [[] for _ in range(last - first + 1)]
    for n in graph.nodes:
        if n in label:
            blocks[label[n] - first].append(n)
    if any(not b for b in blocks):
        raise NotRepeatable("the stage's blocks are not a run")
    own = {n: i for b in blocks for i, n in enumerate(b)}

    def shape(b: list[torch.fx.Node]) -> list[tuple[str, str]]:
        return [(n.op, str(n.target) if n.op == "call_function" else "") for n in b]
    template = [_signature(n, own, label, first + 1) for n in blocks[1]] if len(blocks) > 1 else []
    for i in range(1, len(blocks)):
        if [_signature(n, own, label, first + i) for n in blocks[i]] != template or \
                shape(blocks[i]) != shape(blocks[0]):
            raise NotRepeatable(f"block {first + i}'s program differs from block {first + 1}'s")
    _same_constants(graph, blocks)
    return first, blocks


def _same_constants(graph: torch.fx.Graph, blocks: list[list[torch.fx.Node]]) -> None:
    """Every block's lifted constants hold the template's values (a built block takes its template's)."""
    owner = graph.owning_module
    for pos, n in enumerate(blocks[1] if len(blocks) > 1 else []):
        if n.op != "get_attr" or not _LIFTED.search(str(n.target)) or owner is None:
            continue
        ref = owner.get_buffer(str(n.target)) if _has(owner, str(n.target)) else None
        for b in blocks[1:]:
            v = owner.get_buffer(str(b[pos].target)) if _has(owner, str(b[pos].target)) else None
            if not isinstance(ref, torch.Tensor) or not isinstance(v, torch.Tensor):
                continue
            real = not any(t.device.type == "meta" or torch_compat.is_fake(t) for t in (ref, v))
            if ref.shape != v.shape or ref.dtype != v.dtype or (real and not torch.equal(ref, v)):
                raise NotRepeatable(f"constant '{b[pos].target}' differs from '{n.target}'")


def _has(module: torch.nn.Module, target: str) -> bool:
    try:
        module.get_buffer(target)
    except AttributeError:
        return False
    return True


def _cut(graph: torch.fx.Graph, blocks: list[list[torch.fx.Node]], j: int) -> torch.fx.Graph:
    """``graph`` with only the first ``j`` blocks; what read the last block reads block ``j - 1``."""
    dropped = {n for b in blocks[j:] for n in b}
    last = {n: i for i, n in enumerate(blocks[-1])}
    kept_last = blocks[j - 1]
    out = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}

    def arg(a: torch.fx.Node) -> torch.fx.Node:
        if a in dropped:
            if a not in last:
                raise NotRepeatable(f"'{a.name}' of a dropped block is read after the blocks")
            return env[kept_last[last[a]]]
        return env[a]

    for n in graph.nodes:
        if n in dropped:
            continue
        env[n] = out.node_copy(n, arg)
    out.lint()
    return out

