"""General FX graph rewrites applied around the decomposition (none model-specific).

* :func:`merge_aliased_and_unused` (before decomposing): tied parameters become one
  placeholder, unused trainable parameters are dropped.  torch.export lists every alias
  of a tied weight (``lm_head.weight is wte.weight``) as its own PARAMETER input but
  routes all uses through one of them, so the others get no gradient and AOTAutograd
  asserts ("Found a parameter that did not receive a gradient").
* :func:`cleanup_graph` (after): drop metadata asserts and forward ``aten.alias``.
* :func:`make_views_safe` (after): ``aten.clone`` before an ``aten.view`` that cannot
  be a view of its FakeTensor input, so ``graph_module`` stays runnable eagerly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from collections.abc import Sequence

import torch
import torch.nn as nn
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from spmdc.frontend import torch_compat

__all__ = ["cleanup_graph", "make_views_safe", "merge_aliased_and_unused", "viewable"]

# Node meta copied from a view onto the clone inserted before it.
_SOURCE_META = ("nn_module_stack", "stack_trace", "source_fn_stack", "from_node")


def _named_tensors(root: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``root`` by FQN, aliases included."""
    named: dict[str, torch.Tensor] = dict(root.named_parameters(remove_duplicate=False))
    for n, b in root.named_buffers(remove_duplicate=False):
        named.setdefault(n, b)
    return named


def _find_aliases_and_unused(ep: ExportedProgram, root: nn.Module, train: bool
                             ) -> tuple[dict[str, str], list[str], set[int]]:
    """Reroute uses of tied aliases to the first FQN; returns (tied, unused, drop_specs)."""
    named = _named_tensors(root)
    specs = ep.graph_signature.input_specs
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    canonical_by_id: dict[int, tuple[str, torch.fx.Node]] = {}
    tied: dict[str, str] = {}
    drop: set[int] = set()
    for idx, spec in enumerate(specs):
        t = named.get(spec.target) if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) else None
        if t is None:
            continue
        node = placeholders[spec.arg.name]
        if id(t) in canonical_by_id:
            cfqn, cnode = canonical_by_id[id(t)]
            node.replace_all_uses_with(cnode)
            tied[spec.target] = cfqn
            drop.add(idx)
        else:
            canonical_by_id[id(t)] = (spec.target, node)
    unused: list[str] = []
    if train:
        for idx, spec in enumerate(specs):
            if idx not in drop and spec.kind == InputKind.PARAMETER \
                    and not placeholders[spec.arg.name].users:
                unused.append(spec.target)
                drop.add(idx)
    return tied, unused, drop


def merge_aliased_and_unused(
    ep: ExportedProgram, root: nn.Module, train: bool
) -> tuple[ExportedProgram, dict[str, str], list[str]]:
    """Merge placeholders of tied parameters/buffers and drop unused parameters.

    We keep the first FQN of each tied group (the one ``named_parameters()`` yields).
    Returns ``(program, tied alias -> kept FQN, unused parameter FQNs)``.
    """
    tied, unused, drop = _find_aliases_and_unused(ep, root, train)
    if not drop:
        return ep, tied, unused
    gm, sig = ep.graph_module, ep.graph_signature
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    new_specs = []
    state_dict = dict(ep.state_dict)
    for idx, spec in enumerate(sig.input_specs):
        if idx not in drop:
            new_specs.append(spec)
            continue
        node = placeholders[spec.arg.name]
        assert not node.users, node
        gm.graph.erase_node(node)
        if spec.target in tied:
            state_dict.pop(spec.target, None)
    gm.graph.lint()
    gm.recompile()
    new_sig = dataclasses.replace(sig, input_specs=new_specs)
    ep = torch_compat.update_exported_program(ep, gm, new_sig, state_dict=state_dict)
    return ep, tied, unused


def viewable(val: torch.Tensor, shape: Sequence[int]) -> bool:
    """Whether ``val`` (a FakeTensor) can be ``view``-ed to ``shape`` with its strides."""
    shape = [int(s) for s in shape]
    if val.is_contiguous():
        return True
    with torch_compat.real_tensors():
        probe = torch.empty_strided(tuple(val.shape), tuple(val.stride()), device="meta",
                                    dtype=val.dtype)
        try:
            probe.view(shape)
            return True
        except RuntimeError:
            return False


def make_views_safe(gm: torch.fx.GraphModule) -> int:
    """Insert ``clone(contiguous)`` before ``aten.view`` nodes that cannot be views.

    Decompositions (notably in backward graphs) emit ``aten.view.default`` on tensors
    that are not contiguous in the traced FakeTensor layout.  Eagerly that raises
    "view size is not compatible with input tensor's size and stride"; we make the
    graph runnable and layout-agnostic (a no-op in torch-mlir, where tensors have no
    strides).  Returns the number of rewritten nodes.
    """
    count = 0
    g = gm.graph
    for node in list(g.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.view.default:
            continue
        src = node.args[0]
        val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            continue
        try:
            ok = viewable(val, node.args[1])
        except Exception:
            ok = False
        if ok:
            continue
        with g.inserting_before(node):
            c = g.call_function(
                torch.ops.aten.clone.default, (src,), {"memory_format": torch.contiguous_format}
            )
        c.meta = dict(src.meta)
        c.meta.update({k: v for k, v in node.meta.items() if k in _SOURCE_META})
        c.meta["val"] = val.clone(memory_format=torch.contiguous_format)
        node.replace_input_with(src, c)
        count += 1
    if count:
        g.lint()
        gm.recompile()
    return count


def cleanup_graph(gm: torch.fx.GraphModule) -> int:
    """Drop ops with no value semantics: metadata asserts and ``aten.alias``.

    The asserts (:func:`~spmdc.frontend.torch_compat.no_op_check_targets`) come from
    ``Tensor.to`` in training IR and survive decomposition; ``alias`` comes from
    ``detach``/saved tensors in joint graphs.  Neither means anything for value-semantics
    tensors.  Aliases feeding the output node are kept so output names in the graph
    signature stay valid.  Returns the number of removals.
    """
    checks = torch_compat.no_op_check_targets()
    g = gm.graph
    count = 0
    output = g.output_node()
    for node in list(g.nodes):
        if node.op != "call_function":
            continue
        if node.target in checks and not node.users:
            g.erase_node(node)
            count += 1
        elif node.target is torch.ops.aten.alias.default and output not in node.users:
            node.replace_all_uses_with(node.args[0])
            g.erase_node(node)
            count += 1
    if count:
        g.lint()
        gm.recompile()
    return count


def retype_attention_bookkeeping(gm: torch.fx.GraphModule) -> int:
    """Give the CUDA attention kernels' ``philox_seed`` / ``philox_offset`` outputs an
    ``int64`` type in the node metadata (they are ``uint64``, which torch-mlir's importer cannot
    type). Only the attention's own backward reads them, and spmdc translates that pair without
    them (they become "unavailable" values an op reading them would be refused for), so the
    type is never computed with. Returns how many values were retyped."""
    ops = torch_compat.fused_attention_ops()
    targets = {ops["cuda_efficient"], ops["cuda_flash"]} - {None}
    count = 0
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op != "call_function" or node.target not in targets or not isinstance(val, (tuple, list)):
            continue
        fixed = []
        for v in val:
            if isinstance(v, torch.Tensor) and v.dtype == torch.uint64:
                mode = getattr(v, "fake_mode", None)
                with mode if mode is not None else contextlib.nullcontext():
                    v = torch.empty(v.shape, dtype=torch.int64, device=v.device)
                count += 1
            fixed.append(v)
        node.meta["val"] = type(val)(fixed)
        for user in node.users:
            if user.target is operator.getitem and isinstance(user.meta.get("val"), torch.Tensor):
                user.meta["val"] = fixed[user.args[1]]
                user.meta.pop("tensor_meta", None)   # the importer types a value from it first
    return count


def flash_attention_as_cpu_kernels(gm: torch.fx.GraphModule) -> int:
    """Rewrite the CUDA flash-attention pair (``_scaled_dot_product_flash_attention`` and its
    backward, from a model captured on a GPU) as the CPU flash kernels, which compute the same
    function without the sequence-length bookkeeping (``cum_seq_q``, ``max_q``, ... are ``None``
    or integers torch-mlir's importer cannot type). Dropout stays refused by the translation.
    Returns how many nodes were rewritten."""
    ops = torch_compat.fused_attention_ops()
    fwd, bwd, cpu_fwd, cpu_bwd = (ops[k] for k in ("cuda_flash", "cuda_flash_backward", "cpu_flash",
                                                   "cpu_flash_backward"))
    if fwd is None or cpu_fwd is None or cpu_bwd is None:
        return 0
    g = gm.graph
    count = 0
    for node in list(g.nodes):
        if node.op != "call_function":
            continue
        if node.target is fwd:
            q, k, v, dropout_p, is_causal = (list(node.args) + [0.0, False])[:5]
            with g.inserting_before(node):
                new = g.call_function(cpu_fwd, (q, k, v, dropout_p, is_causal), {"scale": node.kwargs.get("scale")})
            new.meta.update(node.meta)
            new.meta["val"] = tuple(node.meta["val"][:2])
            for user in list(node.users):
                if user.target is operator.getitem and user.args[1] < 2:
                    user.replace_input_with(node, new)
            count += 1
        elif node.target is bwd and bwd is not None:
            do, q, k, v, out, lse = node.args[:6]
            dropout_p, is_causal = node.args[10], node.args[11]
            with g.inserting_before(node):
                new = g.call_function(cpu_bwd, (do, q, k, v, out, lse, dropout_p, is_causal),
                                      {"scale": node.kwargs.get("scale")})
            new.meta.update(node.meta)
            node.replace_all_uses_with(new)
            g.erase_node(node)
            count += 1
    if count:   # the CUDA forwards' bookkeeping outputs are now unread: drop them and the forwards
        for node in reversed(list(g.nodes)):
            dead_getitem = node.target is operator.getitem and not node.users and node.args[0].target is fwd
            if dead_getitem or (node.target is fwd and not node.users):
                g.erase_node(node)
        g.lint()
        gm.recompile()
    return count
