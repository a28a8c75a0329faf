"""Inputs, outputs and state of a decomposed program, from its graph signature.

Parameters, buffers (persistent or not) and lifted tensor constants stay graph
placeholders (never inlined), in the order of ``graph_signature.input_specs``:
parameters, buffers, constants, then user inputs.  That order is the order of the
arguments of the imported MLIR function; outputs likewise map to its results.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

from spmdc.frontend.loss import strip_wrapper
from spmdc.frontend.metadata import shape_dtype
from spmdc.frontend.program import ExportError, InputInfo, InputKindName, OutputInfo, OutputKindName

__all__ = ["input_infos", "output_infos"]


def _gradient_targets(ep: ExportedProgram) -> set:
    return {s.target for s in ep.graph_signature.output_specs
            if s.kind == OutputKind.GRADIENT_TO_PARAMETER}


def input_infos(ep: ExportedProgram, strip: bool
                ) -> tuple[list[InputInfo], dict[str, torch.Tensor]]:
    """One :class:`InputInfo` per placeholder, and the value of every non-user input by FQN.

    User inputs are numbered in placeholder order (``InputInfo.user_index``).
    """
    sig = ep.graph_signature
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(sig.input_specs):
        raise ExportError("placeholder count does not match the graph signature")
    grad_targets = _gradient_targets(ep)
    inputs: list[InputInfo] = []
    state: dict[str, torch.Tensor] = {}
    n_user = 0
    for ph, spec in zip(placeholders, sig.input_specs):
        name = getattr(spec.arg, "name", ph.name)
        if name != ph.name:
            raise ExportError(f"placeholder order mismatch: {name} vs {ph.name}")
        fqn, uidx = strip_wrapper(spec.target, strip), None
        if spec.kind == InputKind.USER_INPUT:
            if isinstance(spec.arg, ConstantArgument):
                raise ExportError(
                    f"non-tensor user input {ph.name}={spec.arg.value!r} is not supported; "
                    "bind it in the model (e.g. functools.partial) instead"
                )
            kind: InputKindName = "user_input"
            fqn, uidx = None, n_user
            n_user += 1
        elif spec.kind == InputKind.PARAMETER:
            kind = "parameter"
            state[fqn] = ep.state_dict[spec.target]
        elif spec.kind == InputKind.BUFFER:
            kind = "buffer"
            state[fqn] = (ep.state_dict if spec.persistent else ep.constants)[spec.target]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            kind = "constant"
            state[fqn] = ep.constants[spec.target]
        else:
            raise ExportError(f"unsupported input kind {spec.kind} for {ph.name}")
        shape, dtype = shape_dtype(ph)
        inputs.append(InputInfo(
            index=len(inputs), name=ph.name, kind=kind, fqn=fqn, user_index=uidx,
            shape=shape, dtype=dtype,
            persistent=spec.persistent if spec.kind == InputKind.BUFFER else None,
            requires_grad=spec.kind == InputKind.PARAMETER and spec.target in grad_targets,
        ))
    return inputs, state


def _user_input_index(ep: ExportedProgram, target: str) -> int:
    """The user input a ``GRADIENT_TO_USER_INPUT`` output differentiates: its target names the
    input by name, or (after the joint decomposition) as ``arg<position>_1`` among all inputs."""
    import re

    specs = ep.graph_signature.input_specs
    users = [i for i, s in enumerate(specs) if s.kind == InputKind.USER_INPUT]
    for k, i in enumerate(users):
        if getattr(specs[i].arg, "name", None) == target:
            return k
    m = re.fullmatch(r"arg(\d+)_\d+", str(target))
    if m and int(m.group(1)) in users:
        return users.index(int(m.group(1)))
    raise ExportError(f"a gradient output names input '{target}', which is not a user input")


def output_infos(ep: ExportedProgram, strip: bool) -> list[OutputInfo]:
    """One :class:`OutputInfo` per graph output, in order.

    Joint graphs return ``[buffer mutations..., loss, (model outputs...), grads...]``.
    """
    by_name = {n.name: n for n in ep.graph.nodes}
    outputs: list[OutputInfo] = []
    n_model_out = 0
    for i, spec in enumerate(ep.graph_signature.output_specs):
        oname = getattr(spec.arg, "name", None)
        shape, dtype = shape_dtype(by_name.get(oname) if oname else None)
        uidx, fqn = None, None
        if spec.kind == OutputKind.LOSS_OUTPUT:
            kind: OutputKindName = "loss"
        elif spec.kind == OutputKind.USER_OUTPUT:
            kind, uidx = "model_output", n_model_out
            n_model_out += 1
        elif spec.kind == OutputKind.GRADIENT_TO_PARAMETER:
            kind, fqn = "gradient", strip_wrapper(spec.target, strip)
        elif spec.kind == OutputKind.GRADIENT_TO_USER_INPUT:   # an input that requires grad (a pipeline stage's)
            kind, uidx = "input_gradient", _user_input_index(ep, spec.target)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            kind, fqn = "buffer_mutation", strip_wrapper(spec.target, strip)
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            kind, fqn = "user_input_mutation", spec.target
        else:
            raise ExportError(f"unsupported output kind {spec.kind}")
        outputs.append(OutputInfo(index=i, name=oname or f"out{i}", kind=kind, fqn=fqn,
                                  user_index=uidx, shape=shape, dtype=dtype))
    return outputs
