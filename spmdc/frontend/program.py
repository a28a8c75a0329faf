"""Data model of a captured program: :class:`ExportedProgramInfo` and its parts.

Placeholders (== arguments of the imported MLIR function) are described by
:class:`InputInfo`, graph outputs (== results) by :class:`OutputInfo`, and every aten
call by a :class:`NodeInfo` carrying its module path.  FQNs and module paths are those
of the user's model (the loss wrapper's ``model.`` prefix is already stripped).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch.export import ExportedProgram

__all__ = [
    "ExportError",
    "ExportedProgramInfo",
    "InputInfo",
    "InputKindName",
    "NodeInfo",
    "OutputInfo",
    "OutputKindName",
]

InputKindName = Literal["parameter", "buffer", "constant", "user_input"]
OutputKindName = Literal[
    "model_output", "loss", "gradient", "input_gradient", "buffer_mutation", "user_input_mutation"
]


class ExportError(RuntimeError):
    """Raised when a model cannot be captured; the message names the stage."""


@dataclass(frozen=True)
class InputInfo:
    """One graph placeholder == one argument of the imported MLIR function."""

    index: int  # position among placeholders (== MLIR func argument index)
    name: str  # FX placeholder name, e.g. "p_blocks_0_attn_c_attn_weight"
    kind: InputKindName
    fqn: str | None  # parameter/buffer/constant FQN ("blocks.0.attn.c_attn.weight")
    user_index: int | None  # index into example_inputs for kind == "user_input"
    shape: tuple[int, ...]
    dtype: torch.dtype
    persistent: bool | None = None  # buffers only
    requires_grad: bool = False  # parameters that get a gradient output


@dataclass(frozen=True)
class OutputInfo:
    """One graph output == one result of the imported MLIR function."""

    index: int
    name: str  # FX name of the producing node
    kind: OutputKindName
    fqn: str | None = None  # for "gradient" / "buffer_mutation": the target FQN
    user_index: int | None = None  # "model_output": index in flattened outputs; "input_gradient": user input
    shape: tuple[int, ...] = ()
    dtype: torch.dtype | None = None


@dataclass(frozen=True)
class NodeInfo:
    """Source information for one aten call in the exported graph."""

    name: str  # FX node name (also used as the MLIR location name)
    op: str  # e.g. "aten.mm.default"
    module_path: str  # e.g. "blocks.0.attn.c_attn" ("" for the root module)
    module_type: str | None  # e.g. "torch.nn.modules.linear.Linear"
    is_backward: bool  # True when produced by autograd for the backward pass
    stack_trace: str | None = None
    # strides of each positional tensor argument in the traced run (None for non-tensors):
    # where eager PyTorch's result depends on memory layout (random draws fill in storage order)
    arg_strides: tuple[tuple[int, ...] | None, ...] = ()
    recompute: int | None = None   # checkpoint region this backward op recomputes (spmdc.frontend.checkpoint)


@dataclass
class ExportedProgramInfo:
    """An exported, decomposed program plus the bookkeeping to call it like the model."""

    exported_program: ExportedProgram
    train: bool
    inputs: list[InputInfo]
    outputs: list[OutputInfo]
    nodes: dict[str, NodeInfo]
    # alias FQN -> canonical FQN for parameters/buffers that were the same tensor
    tied_parameters: dict[str, str] = field(default_factory=dict)
    # trainable parameters not used by the graph (their gradient is zero)
    unused_parameters: list[str] = field(default_factory=list)
    # concrete values of every parameter/buffer/constant placeholder, keyed by FQN
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    # False when the joint decomposition had to run without metadata preservation:
    # nodes then may have an empty module path / no stack trace (numerics unaffected)
    metadata_complete: bool = True
    output_tree: Any = None   # a forward capture: the model output's structure (spmdc.frontend.loss.output_tree)

    # ---- convenience -------------------------------------------------------------
    @property
    def graph_module(self) -> torch.fx.GraphModule:
        """The decomposed FX graph module (placeholders in :attr:`inputs` order)."""
        return self.exported_program.graph_module

    def input_by_fqn(self, fqn: str) -> InputInfo:
        """The input of parameter/buffer ``fqn`` (a tied alias maps to the kept FQN)."""
        fqn = self.tied_parameters.get(fqn, fqn)
        for i in self.inputs:
            if i.fqn == fqn:
                return i
        raise KeyError(fqn)

    def gradient_outputs(self) -> dict[str, OutputInfo]:
        """Gradient outputs keyed by parameter FQN."""
        return {o.fqn: o for o in self.outputs if o.kind == "gradient"}

    def loss_output(self) -> OutputInfo | None:
        """The loss output of a training capture (None for a forward capture)."""
        for o in self.outputs:
            if o.kind == "loss":
                return o
        return None

    def op_names(self) -> list[str]:
        """Sorted distinct op names (``aten.mm.default`` ...) of the graph."""
        return sorted({n.op for n in self.nodes.values()})

    def flat_args(
        self, *user_inputs: torch.Tensor, state: Mapping[str, torch.Tensor] | None = None
    ) -> list[Any]:
        """Arguments in placeholder order (== MLIR function argument order)."""
        st = self.state if state is None else {**self.state, **state}
        args: list[Any] = []
        for inp in self.inputs:
            if inp.kind == "user_input":
                args.append(user_inputs[inp.user_index])
            else:
                args.append(st[inp.fqn])
        return args

    def run(
        self, *user_inputs: torch.Tensor, state: Mapping[str, torch.Tensor] | None = None
    ) -> list[Any]:
        """Run the captured graph eagerly; returns outputs in ``self.outputs`` order."""
        with torch.no_grad():
            out = self.graph_module(*self.flat_args(*user_inputs, state=state))
        return list(out) if isinstance(out, (list, tuple)) else [out]
