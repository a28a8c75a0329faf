"""Per-node source information (:class:`NodeInfo`) extracted from an exported graph.

Every ``call_function`` node gets its op name, the module path and type of the
innermost module that produced it, whether autograd produced it for the backward pass,
and its stack trace.  Backward nodes that carry no ``nn_module_stack`` of their own
borrow the one of the forward op with the same autograd ``seq_nr``.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.export import ExportedProgram

from spmdc.frontend import torch_compat
from spmdc.frontend.checkpoint import RECOMPUTE_KEY
from spmdc.frontend.loss import LossWrapper, OutputWrapper, strip_wrapper
from spmdc.frontend.program import NodeInfo

__all__ = ["module_path", "node_infos", "op_name", "shape_dtype"]

_WRAPPER_TYPES = {f"{w.__module__}.{w.__qualname__}" for w in (LossWrapper, OutputWrapper)}


def op_name(target: Any) -> str:
    """``aten.mm.default`` for an op overload, ``operator.getitem`` for Python operators."""
    parts = torch_compat.op_overload_parts(target)
    if parts is not None:
        return ".".join(parts)
    name = getattr(target, "__name__", str(target))
    if getattr(operator, name, None) is target:
        return f"operator.{name}"
    return name


def _is_backward(node: torch.fx.Node) -> bool:
    return node.meta.get("partitioner_tag") == "is_backward" or bool(
        node.meta.get("autograd_backward")
    )


def _forward_stacks_by_seq(graph: torch.fx.Graph) -> dict[int, Any]:
    """``seq_nr`` -> ``nn_module_stack`` of the forward node with that autograd number."""
    stacks: dict[int, Any] = {}
    for node in graph.nodes:
        st, seq = node.meta.get("nn_module_stack"), node.meta.get("seq_nr")
        if st and seq is not None and node.meta.get("partitioner_tag") != "is_backward":
            stacks.setdefault(seq, st)
    return stacks


def _module_of(stack: Any, strip: bool) -> tuple[str, str | None]:
    """(module path, module type name) of the innermost entry of an ``nn_module_stack``."""
    path, mtype = "", None
    if stack:
        path, mtype = list(stack.values())[-1]
        if isinstance(mtype, type):
            mtype = f"{mtype.__module__}.{mtype.__qualname__}"
    path = strip_wrapper(path, strip) or ""
    if strip and path == "" and mtype in _WRAPPER_TYPES:
        mtype = None
    return path, mtype


def module_path(node: torch.fx.Node) -> str:
    """The user module path of a forward ``node`` (its innermost ``nn_module_stack`` entry, the loss
    wrapper's ``model.`` prefix removed; ``""`` outside every module)."""
    return _module_of(node.meta.get("nn_module_stack"), True)[0]


def node_infos(ep: ExportedProgram, strip: bool) -> dict[str, NodeInfo]:
    """:class:`NodeInfo` of every ``call_function`` node, keyed by FX node name.

    ``strip``: remove the loss wrapper's ``model.`` prefix from module paths.
    """
    fwd_stack_by_seq = _forward_stacks_by_seq(ep.graph)
    infos: dict[str, NodeInfo] = {}
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        stack = (
            node.meta.get("nn_module_stack")
            or node.meta.get("fwd_nn_module_stack")
            or fwd_stack_by_seq.get(node.meta.get("seq_nr"))
        )
        path, mtype = _module_of(stack, strip)
        infos[node.name] = NodeInfo(
            name=node.name,
            op=op_name(node.target),
            module_path=path,
            module_type=mtype,
            is_backward=_is_backward(node),
            stack_trace=node.meta.get("stack_trace"),
            arg_strides=tuple(_strides(a) for a in node.args),
            recompute=(node.meta.get("custom") or {}).get(RECOMPUTE_KEY),
        )
    return infos


def _strides(arg: object) -> tuple[int, ...] | None:
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if isinstance(val, torch.Tensor) and not val.is_sparse:
        try:
            return tuple(int(s) for s in val.stride())
        except (RuntimeError, TypeError):   # symbolic or layout without strides
            return None
    return None


def shape_dtype(node: torch.fx.Node | None) -> tuple[tuple[int, ...], torch.dtype | None]:
    """Static shape and dtype of a node's FakeTensor value (``((), None)`` if none)."""
    val = node.meta.get("val") if node is not None else None
    if isinstance(val, torch.Tensor):
        return tuple(int(s) for s in val.shape), val.dtype
    return (), None
