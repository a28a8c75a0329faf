"""Joint forward+backward decomposition that keeps module paths on every node.

:func:`joint_decompose` runs :func:`~spmdc.frontend.torch_compat.decompose_joint`
(torch.export's joint decomposition with our table).  Left alone, that path drops
``nn_module_stack``/``stack_trace``: AOTAutograd first builds the joint graph ``fx_g``
(node meta preserved, backward nodes tagged ``partitioner_tag="is_backward"``), then
``make_fx`` re-traces ``fx_g`` by calling its generated Python code.  To keep the meta
we (1) run the exported graph module through an ``fx.Interpreter`` and (2) wrap
AOTAutograd's export function for the duration of the call
(:func:`~spmdc.frontend.torch_compat.wrapped_aot_export_function`) so ``fx_g`` is
interpreted too; under ``preserve_node_meta`` make_fx then copies each source node's
meta onto the nodes it produces.  Backward nodes get the forward module stack of the
op they differentiate (:func:`copy_forward_module_stack_to_backward`).

That wrapping relies on a private torch function.  If it cannot be installed or the
wrapped path raises, the decomposition is redone plainly: the capture succeeds, one
warning says so, and :attr:`JointResult.metadata_complete` is False (backward nodes,
and possibly forward ones, then have no module path).  Numerics are unaffected.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
from torch.export import ExportedProgram

from spmdc.frontend import torch_compat

__all__ = ["JointResult", "MetadataLostWarning", "copy_forward_module_stack_to_backward",
           "joint_decompose"]


class MetadataLostWarning(UserWarning):
    """The joint graph was captured without module paths for (some) nodes."""


@dataclass(frozen=True)
class JointResult:
    """The decomposed joint program and whether node metadata was preserved."""

    program: ExportedProgram
    metadata_complete: bool


def copy_forward_module_stack_to_backward(graph: torch.fx.Graph) -> None:
    """Give backward nodes the ``nn_module_stack`` of the forward op they differentiate.

    In AOTAutograd's joint graph a backward node shares the autograd ``seq_nr`` of its
    forward op (same idea as ``copy_fwd_metadata_to_bw_nodes`` in the compile path).
    """
    fwd: dict[int, Any] = {}
    for n in graph.nodes:
        st, seq = n.meta.get("nn_module_stack"), n.meta.get("seq_nr")
        if st and seq is not None and n.meta.get("partitioner_tag") != "is_backward":
            fwd.setdefault(seq, st)
    for n in graph.nodes:
        if n.op != "call_function" or n.meta.get("nn_module_stack"):
            continue
        if n.meta.get("partitioner_tag") == "is_backward" or n.meta.get("autograd_backward"):
            st = fwd.get(n.meta.get("seq_nr"))
            if st:
                n.meta["nn_module_stack"] = copy.copy(st)


def _interpreted(graph_module: torch.fx.GraphModule) -> Callable:
    """A callable running ``graph_module`` node by node (so tracing sees each node)."""

    def run(*args: Any) -> Any:
        return torch.fx.Interpreter(graph_module).run(*args)

    return run


def _interpret_joint_graph(original: Callable) -> Callable:
    """Wrap AOTAutograd's export function: its joint graph is returned interpreted."""

    def export_fn(*args: Any, **kwargs: Any):
        fx_g, metadata, in_spec, out_spec = original(*args, **kwargs)
        if kwargs.get("trace_joint") and isinstance(fx_g, torch.fx.GraphModule):
            copy_forward_module_stack_to_backward(fx_g.graph)
            return _interpreted(fx_g), metadata, in_spec, out_spec
        return fx_g, metadata, in_spec, out_spec

    return export_fn


def _decompose_preserving_metadata(ep: ExportedProgram, table: dict[Any, Callable]
                                   ) -> ExportedProgram:
    """:func:`torch_compat.decompose_joint` with node metadata preserved (may raise)."""
    gm = ep.graph_module
    gm.forward = _interpreted(gm)  # instance attribute shadows the class method
    try:
        with torch_compat.wrapped_aot_export_function(_interpret_joint_graph), \
                fx_traceback.preserve_node_meta():
            return torch_compat.decompose_joint(ep, table)
    finally:
        try:
            del gm.forward
        except AttributeError:
            pass


def joint_decompose(ep: ExportedProgram, table: dict[Any, Callable]) -> JointResult:
    """Decompose the loss-returning program ``ep`` into a joint forward+backward graph.

    Falls back to a plain decomposition (with a :class:`MetadataLostWarning`) when the
    metadata-preserving path fails; errors of the plain decomposition propagate.
    """
    try:
        return JointResult(_decompose_preserving_metadata(ep, table), True)
    except Exception as err:  # noqa: BLE001 - any failure of the private path degrades
        cause = f"{type(err).__name__}: {err}"
    program = torch_compat.decompose_joint(ep, table)
    warnings.warn(
        "spmdc: could not preserve module paths in the joint forward+backward graph "
        f"({cause}); captured without them (ExportedProgramInfo.metadata_complete=False).",
        MetadataLostWarning,
        stacklevel=3,
    )
    return JointResult(program, False)
