"""Capture an ``nn.Module`` (forward only, or a whole training step) with torch.export.

Entry point: :func:`export_program`.  The steps live in small modules:

1. training only: the model and the loss are wrapped in a
   :class:`~spmdc.frontend.loss.LossWrapper` whose ``forward(*inputs)`` returns
   ``(loss,)`` (optionally ``(loss, *model_outputs)``);
2. ``torch.export.export(root, args, kwargs, strict=False)`` gives a training-IR program;
3. :func:`~spmdc.frontend.graph_surgery.merge_aliased_and_unused` merges tied
   parameters and drops unused ones;
4. decomposition with :func:`~spmdc.frontend.decompositions.default_decomposition_table`:
   ``ep.run_decompositions(table)`` for a forward capture,
   :func:`~spmdc.frontend.joint.joint_decompose` for a training step (the graph returns
   ``[buffer mutations..., loss, (model outputs...), grad(param_0), ...]``);
5. :mod:`~spmdc.frontend.graph_surgery` clean-ups, then the bookkeeping:
   :mod:`~spmdc.frontend.signature` (inputs/outputs/state) and
   :mod:`~spmdc.frontend.metadata` (module path of every node) fill an
   :class:`~spmdc.frontend.program.ExportedProgramInfo`.

Private torch APIs are used only through :mod:`spmdc.frontend.torch_compat`.
The data model and the decomposition table are re-exported here.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.export import ExportedProgram

from spmdc.dialects.attrs import checkpoint_every
from spmdc.frontend.checkpoint import marking_checkpoints, rematerialize
from spmdc.frontend.decompositions import default_decomposition_table
from spmdc.frontend.graph_surgery import (
    cleanup_graph,
    flash_attention_as_cpu_kernels,
    make_views_safe,
    merge_aliased_and_unused,
    retype_attention_bookkeeping,
)
from spmdc.frontend.joint import joint_decompose
from spmdc.frontend.loss import LossWrapper, OutputLeftOutWarning, OutputWrapper, strip_wrapper
from spmdc.frontend.metadata import node_infos
from spmdc.frontend.mixed_precision import MixedPrecision
from spmdc.frontend.program import (
    ExportedProgramInfo,
    ExportError,
    InputInfo,
    NodeInfo,
    OutputInfo,
)
from spmdc.frontend.signature import input_infos, output_infos
from spmdc.frontend.torch_compat import quiet_fake_tensor_errors

__all__ = [
    "ExportedProgramInfo",
    "InputInfo",
    "OutputInfo",
    "NodeInfo",
    "ExportError",
    "ModuleModes",
    "default_decomposition_table",
    "export_program",
    "finish_program",
    "trace_program",
    "Traced",
    "kept_modes",
    "module_flags",
]


@dataclass(frozen=True)
class ModuleModes:
    """Every module's own ``training`` flag, in ``named_modules()`` order (``""``: the root).

    A model in training mode may hold submodules in eval mode (a frozen BatchNorm, a frozen
    encoder with dropout, a HuggingFace model ``from_pretrained`` left in eval inside a wrapper):
    capture traces each module in its own mode, so these flags, not the root's alone, say
    which program a capture gives.
    """

    paths: tuple[str, ...]
    flags: tuple[bool, ...]

    @classmethod
    def of(cls, model: nn.Module) -> ModuleModes:
        named = list(model.named_modules())
        return cls(tuple(p for p, _ in named), tuple(bool(m.training) for _, m in named))

    def describe(self) -> str:
        """The root's mode and every submodule whose mode differs from its parent's
        (``train; enc=eval, bn=eval``)."""
        flag = dict(zip(self.paths, self.flags))
        name = {True: "train", False: "eval"}
        flips = [f"{p}={name[f]}" for p, f in zip(self.paths[1:], self.flags[1:])
                 if f != flag.get(p.rpartition(".")[0], self.flags[0])]
        return "; ".join([name[self.flags[0]], *([", ".join(flips)] if flips else [])])


def module_flags(model: nn.Module) -> tuple[bool, ...]:
    """Every module's ``training`` flag, depth first (a module reached twice counts twice): the
    cheap key a compiled module looks its programs up by on every call."""
    flags, stack = [], [model]
    while stack:
        m = stack.pop()
        flags.append(m.training)
        stack.extend(reversed(list(m.children())))
    return tuple(flags)


@contextlib.contextmanager
def kept_modes(model: nn.Module) -> Iterator[ModuleModes]:
    """Run the body, then give every module of ``model`` its own ``training`` flag back, also when
    the body raises (``model.train(flag)`` would set one flag on every submodule)."""
    saved = [(m, m.training) for m in model.modules()]
    try:
        yield ModuleModes.of(model)
    finally:
        for m, flag in saved:
            m.training = flag


def mixed_dtypes_hint(policy: str) -> str:
    """Why an op sees two float dtypes under a mixed-precision ``policy`` (bf16, fp16) and what to do."""
    return (f" (under mixed precision {policy} the parameters and floating inputs are cast, as FSDP2's "
            "MixedPrecisionPolicy does, but buffers and tensors the model creates keep their dtype: this "
            "model mixes them in one op; it fails the same way eagerly under the policy. Cast them in "
            "the model, or run without mixed precision)")


def _export(root: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ExportedProgram:
    try:
        with quiet_fake_tensor_errors():
            return torch.export.export(root, args, kwargs, strict=False)
    except Exception as e:  # noqa: BLE001
        policy = getattr(root, "policy", None)
        hint = ""
        if policy is not None and ("dtype" in str(e).lower() or "scalar type" in str(e)):
            hint = mixed_dtypes_hint(policy.name)
        raise ExportError(f"torch.export.export failed: {type(e).__name__}: {e}{hint}") from e


def _decompose(ep: ExportedProgram, table: dict[Any, Callable], train: bool
               ) -> tuple[ExportedProgram, bool]:
    """(decomposed program, whether node metadata is complete)."""
    try:
        if not train:
            return ep.run_decompositions(table), True
        joint = joint_decompose(ep, table)
        return joint.program, joint.metadata_complete
    except Exception as e:  # noqa: BLE001
        raise ExportError(
            f"decomposition ({'joint forward+backward' if train else 'forward'}) failed: "
            f"{type(e).__name__}: {e}"
        ) from e


def _check_gradients(info: ExportedProgramInfo) -> None:
    grads = info.gradient_outputs()
    missing = [i.fqn for i in info.inputs if i.kind == "parameter" and i.fqn not in grads
               and info.state[i.fqn].requires_grad]
    if missing:
        raise ExportError(f"joint graph lacks gradients for parameters: {missing}")


def export_program(
    model: nn.Module,
    example_inputs: Sequence[Any],
    *,
    train: bool = False,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    loss_inputs: Sequence[Any] = (),
    return_model_outputs: bool = False,
    decomposition_table: dict[Any, Callable] | None = None,
    example_kwargs: Mapping[str, Any] | None = None,
    checkpoint: str | None = None,
    mixed_precision: Any = None,
) -> ExportedProgramInfo:
    """Export ``model`` with torch.export and decompose it to (near-)core ATen.

    Args:
      model: the module.  Not modified: each module is traced in its own mode (``training``
        flag) and keeps it, also when the capture fails.
      example_inputs: positional model inputs (tensors), static shapes.
      train: capture a joint forward+backward graph returning the loss and the gradient
        of every trainable parameter.
      loss_fn: ``loss_fn(model_output, *loss_inputs) -> scalar``.  When None with
        ``train=True`` the model must itself return the loss (tensor, tuple whose first
        element is the loss, or an object with ``.loss`` like HF ``ModelOutput``).
      loss_inputs: extra tensors passed to ``loss_fn`` (e.g. targets); they become user
        inputs numbered after ``example_inputs``.
      return_model_outputs: for train=True also return the model's tensor outputs
        (only when ``loss_fn`` is given).
      decomposition_table: overrides :func:`default_decomposition_table`.
      example_kwargs: keyword model inputs (e.g. ``labels=`` for HF models).
      checkpoint: ``"blocks"`` checkpoints every repeated block (a plan's ``checkpoint:
        blocks``), ``"blocks/K"`` every K-th; ``torch.utils.checkpoint`` regions are kept either way
        (:mod:`spmdc.frontend.checkpoint`).
      mixed_precision: ``"bf16"``, a :class:`~spmdc.frontend.mixed_precision.MixedPrecision` or
        FSDP2's ``MixedPrecisionPolicy``: the model runs with its parameters cast to
        ``param_dtype`` inside the program (:mod:`spmdc.frontend.mixed_precision`).

    User inputs are numbered (``InputInfo.user_index``) in the flattened order
    ``[*example_inputs, *loss_inputs, *example_kwargs.values()]``; pass them in that
    order to :meth:`ExportedProgramInfo.run` / ``flat_args``.

    Returns an :class:`ExportedProgramInfo`; its ``metadata_complete`` is False when the
    joint decomposition had to drop module paths (a warning says why).
    """
    return finish_program(trace_program(
        model, example_inputs, train=train, loss_fn=loss_fn, loss_inputs=loss_inputs,
        return_model_outputs=return_model_outputs, decomposition_table=decomposition_table,
        example_kwargs=example_kwargs, checkpoint=checkpoint, mixed_precision=mixed_precision))


@dataclass
class Traced:
    """A program traced and decomposed, before :func:`finish_program` (checkpoint rematerialization,
    clean-ups, bookkeeping): what :mod:`spmdc.frontend.repeated` builds deep programs from. Names
    (``tied``, ``unused``) keep the wrapper's ``model.`` prefix."""

    ep: ExportedProgram
    train: bool
    root: nn.Module
    tied: dict[str, str]
    unused: list[str]
    metadata_complete: bool
    timings: dict[str, float]


def trace_program(
    model: nn.Module,
    example_inputs: Sequence[Any],
    *,
    train: bool = False,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    loss_inputs: Sequence[Any] = (),
    return_model_outputs: bool = False,
    decomposition_table: dict[Any, Callable] | None = None,
    example_kwargs: Mapping[str, Any] | None = None,
    checkpoint: str | None = None,
    mixed_precision: Any = None,
) -> Traced:
    """The first half of :func:`export_program` (same arguments): torch.export, tied and unused
    parameters merged, decomposition (the joint forward+backward graph for training)."""
    timings: dict[str, float] = {}
    example_inputs, loss_inputs = tuple(example_inputs), tuple(loss_inputs)
    kwargs: dict[str, Any] = dict(example_kwargs or {})
    table = (default_decomposition_table() if decomposition_table is None
             else dict(decomposition_table))
    try:
        every = checkpoint_every(checkpoint)
    except ValueError as e:
        raise ExportError(f"checkpoint={checkpoint!r}: {e}") from None
    if not train and (loss_fn is not None or loss_inputs):
        raise ExportError("loss_fn / loss_inputs require train=True")
    policy = MixedPrecision.parse(mixed_precision)
    if train:
        root: nn.Module = LossWrapper(model, loss_fn, len(example_inputs), return_model_outputs, policy)
        args = example_inputs + loss_inputs
    else:
        root, args = OutputWrapper(model, policy), example_inputs
    t0 = time.perf_counter()
    marking = marking_checkpoints(model, blocks=every) if train else contextlib.nullcontext()
    with kept_modes(model):   # traced in every module's own mode, and each flag kept as it was
        with marking:
            ep = _export(root, args, kwargs)
            timings["export"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            ep, tied, unused = merge_aliased_and_unused(ep, root, train)
            ep, metadata_complete = _decompose(ep, table, train)
        timings["decompose"] = time.perf_counter() - t1
    return Traced(ep, train, root, tied, unused, metadata_complete, timings)


def finish_program(traced: Traced) -> ExportedProgramInfo:
    """The second half of :func:`export_program`: checkpointed regions rematerialized in the
    backward, graph clean-ups, then inputs, outputs, state and per-node source information."""
    ep, train, root = traced.ep, traced.train, traced.root
    t = time.perf_counter()
    if train and rematerialize(ep.graph_module.graph):
        ep.graph_module.recompile()
    if isinstance(root, OutputWrapper) and root.left_out:
        warnings.warn(f"spmdc: model outputs {', '.join(root.left_out)} are not tensors and are left out of the "
                      "captured program", OutputLeftOutWarning, stacklevel=4)

    cleanup_graph(ep.graph_module)
    make_views_safe(ep.graph_module)
    flash_attention_as_cpu_kernels(ep.graph_module)
    retype_attention_bookkeeping(ep.graph_module)
    timings = dict(traced.timings)
    timings["decompose"] = timings.get("decompose", 0.0) + time.perf_counter() - t
    strip = True   # both wrappers hold the model as the submodule 'model'
    inputs, state = input_infos(ep, strip)
    info = ExportedProgramInfo(
        exported_program=ep,
        train=train,
        inputs=inputs,
        outputs=output_infos(ep, strip),
        nodes=node_infos(ep, strip),
        tied_parameters={strip_wrapper(k, strip): strip_wrapper(v, strip) for k, v in traced.tied.items()},
        unused_parameters=[strip_wrapper(u, strip) for u in traced.unused],
        state=state,
        timings=timings,
        metadata_complete=traced.metadata_complete,
        output_tree=root.tree[0] if isinstance(root, OutputWrapper) and root.tree else None,
    )
    if train:
        _check_gradients(info)
    return info
