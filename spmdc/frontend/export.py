"""Capture an ``nn.Module`` (forward only, or a whole training step) with torch.export.

Entry point: :func:`export_program`.

Route chosen for the joint forward+backward graph (torch 2.13)
--------------------------------------------------------------
1. The model and the loss are wrapped in a small :class:`_LossWrapper` module whose
   ``forward(*inputs)`` returns ``(loss,)`` (optionally ``(loss, *model_outputs)``).
   The model is registered as the submodule ``model``; the ``model.`` prefix is stripped
   from every FQN / module path recorded in :class:`ExportedProgramInfo`.
2. ``torch.export.export(wrapper, args, strict=False)`` gives a training-IR program.
3. Parameter aliases (tied weights, e.g. ``lm_head.weight is wte.weight``) are merged:
   torch.export lists every alias as its own PARAMETER input but routes all uses through
   one of them, so the others receive no gradient and AOTAutograd asserts
   ("Found a parameter that did not receive a gradient").  We keep the first FQN of the
   group (the one ``named_parameters()`` yields), reroute uses to it and drop the rest.
   Parameters that are not used at all are dropped for the same reason.
4. ``torch.export.exported_program._decompose_exported_program(..., joint_loss_index=0)``
   with our decomposition table.  This is exactly what the (private, "highly unstable")
   ``torch.export.experimental._export_forward_backward`` does, except that it hard-codes
   ``core_aten_decompositions()``; we call the underlying helper so we can pass the
   torch-mlir-friendly table, then apply the same post-processing (rename-preserving copy
   and removal of detach chains).  The result is an ExportedProgram whose graph returns
   ``[buffer mutations..., loss, (model outputs...), grad(param_0), grad(param_1), ...]``
   with ``OutputKind.LOSS_OUTPUT`` / ``OutputKind.GRADIENT_TO_PARAMETER`` specs.

Forward only: ``torch.export.export(model, args, strict=False).run_decompositions(table)``.

In both cases parameters, buffers (persistent or not) and lifted tensor constants stay
graph placeholders (never inlined), in the order of ``graph_signature.input_specs``:
parameters, buffers, constants, then user inputs.  That order is the order of the
arguments of the imported MLIR function (see ``torch_mlir_bridge``).

Joint-graph metadata: the joint decomposition re-traces the graph by calling generated
code, which drops ``nn_module_stack``/``stack_trace``; ``_joint_decompose`` interprets the
graphs under ``preserve_node_meta`` instead and copies forward module stacks onto
backward nodes (matched by autograd ``seq_nr``), so every node (forward or backward) has
a module path in :attr:`ExportedProgramInfo.nodes`.

Clean-ups after decomposition (all general, none model-specific): drop
``aten._assert_tensor_metadata`` and forward ``aten.alias`` to its input (no meaning for
value-semantics tensors); insert ``aten.clone`` before an ``aten.view`` whose FakeTensor
input cannot be viewed to the requested shape (keeps ``graph_module`` runnable eagerly;
a no-op in torch-mlir, where tensors have no strides).  ``addmm`` is decomposed without
the ``mul(x, 1)`` terms of the stock decomposition.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ConstantArgument,
    InputKind,
    OutputKind,
    TensorArgument,
)

__all__ = [
    "ExportedProgramInfo",
    "InputInfo",
    "OutputInfo",
    "NodeInfo",
    "ExportError",
    "default_decomposition_table",
    "export_program",
]

_WRAP_PREFIX = "model."

InputKindName = Literal["parameter", "buffer", "constant", "user_input"]
OutputKindName = Literal[
    "model_output", "loss", "gradient", "buffer_mutation", "user_input_mutation"
]


class ExportError(RuntimeError):
    """Raised when a model cannot be captured; the message names the stage."""


@dataclass(frozen=True)
class InputInfo:
    """One graph placeholder == one argument of the imported MLIR function."""

    index: int  # position among placeholders (== MLIR func argument index)
    name: str  # FX placeholder name, e.g. "p_blocks_0_attn_c_attn_weight"
    kind: InputKindName
    fqn: Optional[str]  # parameter/buffer/constant FQN ("blocks.0.attn.c_attn.weight")
    user_index: Optional[int]  # index into example_inputs for kind == "user_input"
    shape: Tuple[int, ...]
    dtype: torch.dtype
    persistent: Optional[bool] = None  # buffers only
    requires_grad: bool = False  # parameters that get a gradient output


@dataclass(frozen=True)
class OutputInfo:
    """One graph output == one result of the imported MLIR function."""

    index: int
    name: str  # FX name of the producing node
    kind: OutputKindName
    fqn: Optional[str] = None  # for "gradient" / "buffer_mutation": the target FQN
    user_index: Optional[int] = None  # for "model_output": index in flattened outputs
    shape: Tuple[int, ...] = ()
    dtype: Optional[torch.dtype] = None


@dataclass(frozen=True)
class NodeInfo:
    """Source information for one aten call in the exported graph."""

    name: str  # FX node name (also used as the MLIR location name)
    op: str  # e.g. "aten.mm.default"
    module_path: str  # e.g. "blocks.0.attn.c_attn" ("" for the root module)
    module_type: Optional[str]  # e.g. "torch.nn.modules.linear.Linear"
    is_backward: bool  # True when produced by autograd for the backward pass
    stack_trace: Optional[str] = None


@dataclass
class ExportedProgramInfo:
    exported_program: ExportedProgram
    train: bool
    inputs: List[InputInfo]
    outputs: List[OutputInfo]
    nodes: Dict[str, NodeInfo]
    # alias FQN -> canonical FQN for parameters/buffers that were the same tensor
    tied_parameters: Dict[str, str] = field(default_factory=dict)
    # trainable parameters not used by the graph (their gradient is zero)
    unused_parameters: List[str] = field(default_factory=list)
    # concrete values of every parameter/buffer/constant placeholder, keyed by FQN
    state: Dict[str, torch.Tensor] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)

    # ---- convenience -------------------------------------------------------------
    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.exported_program.graph_module

    def input_by_fqn(self, fqn: str) -> InputInfo:
        fqn = self.tied_parameters.get(fqn, fqn)
        for i in self.inputs:
            if i.fqn == fqn:
                return i
        raise KeyError(fqn)

    def gradient_outputs(self) -> Dict[str, OutputInfo]:
        return {o.fqn: o for o in self.outputs if o.kind == "gradient"}

    def loss_output(self) -> Optional[OutputInfo]:
        for o in self.outputs:
            if o.kind == "loss":
                return o
        return None

    def op_names(self) -> List[str]:
        return sorted({n.op for n in self.nodes.values()})

    def flat_args(
        self, *user_inputs: torch.Tensor, state: Optional[Mapping[str, torch.Tensor]] = None
    ) -> List[Any]:
        """Arguments in placeholder order (== MLIR function argument order)."""
        st = self.state if state is None else {**self.state, **state}
        args: List[Any] = []
        for inp in self.inputs:
            if inp.kind == "user_input":
                args.append(user_inputs[inp.user_index])
            else:
                args.append(st[inp.fqn])
        return args

    def run(
        self, *user_inputs: torch.Tensor, state: Optional[Mapping[str, torch.Tensor]] = None
    ) -> List[Any]:
        """Run the captured graph eagerly; returns outputs in ``self.outputs`` order."""
        with torch.no_grad():
            out = self.graph_module(*self.flat_args(*user_inputs, state=state))
        return list(out) if isinstance(out, (list, tuple)) else [out]


class _LossWrapper(nn.Module):
    def __init__(self, model: nn.Module, loss_fn: Optional[Callable], n_model_inputs: int,
                 return_outputs: bool):
        super().__init__()
        self.model = model
        self._loss_fn = loss_fn
        self._n = n_model_inputs
        self._return_outputs = return_outputs

    def forward(self, *args, **kwargs):
        model_args, loss_args = args[: self._n], args[self._n :]
        out = self.model(*model_args, **kwargs)
        if self._loss_fn is not None:
            loss = self._loss_fn(out, *loss_args)
            rest = out
        else:
            loss, rest = _extract_loss(out), None
        if self._return_outputs and rest is not None:
            flat, _ = torch.utils._pytree.tree_flatten(rest)
            return (loss, *[t for t in flat if isinstance(t, torch.Tensor)])
        return (loss,)


def _extract_loss(out: Any) -> torch.Tensor:
    loss = None
    if isinstance(out, torch.Tensor):
        loss = out
    elif isinstance(getattr(out, "loss", None), torch.Tensor):  # HuggingFace ModelOutput
        loss = out.loss
    elif isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        loss = out[0]
    if loss is None or loss.numel() != 1:
        raise ExportError(
            "train=True without loss_fn requires the model to return a scalar loss "
            "(a tensor, a tuple starting with it, or an object with .loss); got "
            f"{type(out).__name__}{tuple(loss.shape) if loss is not None else ''}"
        )
    return loss


def _addmm_decomp(self, mat1, mat2, *, beta=1, alpha=1):
    """``addmm`` -> ``mm`` (+ ``mul`` only when alpha/beta != 1) + ``add``.

    The stock decomposition always emits ``mul(x, 1)`` for both terms, which adds two
    useless elementwise ops per linear layer.
    """
    out = torch.ops.aten.mm.default(mat1, mat2)
    if alpha != 1:
        out = torch.ops.aten.mul.Tensor(out, alpha)
    if beta == 0:
        return out
    bias = self if beta == 1 else torch.ops.aten.mul.Tensor(self, beta)
    return torch.ops.aten.add.Tensor(out, bias)


def default_decomposition_table() -> Dict[Any, Callable]:
    """Core-ATen decompositions plus the extra overloads torch-mlir wants decomposed.

    torch-mlir's table = ``core_aten_decompositions()`` minus a few ops whose decomps it
    cannot lower (FFT, norm, ...) plus e.g. ``native_layer_norm``, ``addmm``,
    ``_log_softmax``, ``_to_copy``, ``full`` and SDPA, which keeps the op set small.
    """
    try:
        from torch_mlir.extras.fx_decomp_util import get_decomposition_table

        table = dict(get_decomposition_table())
    except Exception:  # pragma: no cover - torch-mlir missing
        from torch._decomp import core_aten_decompositions

        table = dict(core_aten_decompositions())
    table[torch.ops.aten.addmm.default] = _addmm_decomp
    return table


# ---------------------------------------------------------------------------------
# Graph surgery helpers
# ---------------------------------------------------------------------------------


def _merge_aliased_and_unused(
    ep: ExportedProgram, root: nn.Module, train: bool
) -> Tuple[ExportedProgram, Dict[str, str], List[str]]:
    """Merge placeholders of tied parameters/buffers and drop unused parameters."""
    named: Dict[str, torch.Tensor] = {}
    for n, p in root.named_parameters(remove_duplicate=False):
        named[n] = p
    for n, b in root.named_buffers(remove_duplicate=False):
        named.setdefault(n, b)

    sig = ep.graph_signature
    gm = ep.graph_module
    g = gm.graph
    placeholders = {n.name: n for n in g.nodes if n.op == "placeholder"}

    canonical_by_id: Dict[int, Tuple[str, torch.fx.Node]] = {}
    tied: Dict[str, str] = {}
    unused: List[str] = []
    drop_specs = set()
    for idx, spec in enumerate(sig.input_specs):
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER):
            continue
        t = named.get(spec.target)
        node = placeholders[spec.arg.name]
        if t is None:
            continue
        key = id(t)
        if key in canonical_by_id:
            cfqn, cnode = canonical_by_id[key]
            node.replace_all_uses_with(cnode)
            tied[spec.target] = cfqn
            drop_specs.add(idx)
        else:
            canonical_by_id[key] = (spec.target, node)
    if train:
        for idx, spec in enumerate(sig.input_specs):
            if idx in drop_specs or spec.kind != InputKind.PARAMETER:
                continue
            if not placeholders[spec.arg.name].users:
                unused.append(spec.target)
                drop_specs.add(idx)
    if not drop_specs:
        return ep, tied, unused

    new_specs = []
    state_dict = dict(ep.state_dict)
    for idx, spec in enumerate(sig.input_specs):
        if idx in drop_specs:
            node = placeholders[spec.arg.name]
            assert not node.users, node
            g.erase_node(node)
            if spec.target in tied:
                state_dict.pop(spec.target, None)
            continue
        new_specs.append(spec)
    g.lint()
    gm.recompile()
    new_sig = copy.copy(sig)
    new_sig = dataclasses.replace(sig, input_specs=new_specs)
    ep = ep._update(gm, new_sig, state_dict=state_dict)
    return ep, tied, unused


def _make_views_safe(gm: torch.fx.GraphModule) -> int:
    """Insert ``clone(contiguous)`` before ``aten.view`` nodes that cannot be views.

    Decompositions (notably in backward graphs) emit ``aten.view.default`` on tensors
    that are not contiguous in the traced FakeTensor layout.  Eagerly that raises
    "view size is not compatible with input tensor's size and stride"; we make the
    graph runnable and layout-agnostic.  Returns the number of rewritten nodes.
    """
    from torch._prims_common import is_contiguous  # noqa: F401

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
            ok = _viewable(val, node.args[1])
        except Exception:
            ok = False
        if ok:
            continue
        with g.inserting_before(node):
            c = g.call_function(
                torch.ops.aten.clone.default, (src,), {"memory_format": torch.contiguous_format}
            )
        c.meta = dict(src.meta)
        c.meta.update({k: v for k, v in node.meta.items() if k in ("nn_module_stack", "stack_trace", "source_fn_stack", "from_node")})
        c.meta["val"] = val.clone(memory_format=torch.contiguous_format)
        node.replace_input_with(src, c)
        count += 1
    if count:
        g.lint()
        gm.recompile()
    return count


_NO_OP_CHECKS = (torch.ops.aten._assert_tensor_metadata.default,)


def _cleanup_graph(gm: torch.fx.GraphModule) -> int:
    """Drop ops with no value semantics: metadata asserts and ``aten.alias``.

    ``_assert_tensor_metadata`` comes from ``Tensor.to`` in training IR and survives
    decomposition; ``alias`` comes from ``detach``/saved tensors in joint graphs.  Neither
    means anything for value-semantics tensors.  Aliases feeding the output node are kept
    so output names in the graph signature stay valid.
    """
    g = gm.graph
    count = 0
    output = g.output_node()
    for node in list(g.nodes):
        if node.op != "call_function":
            continue
        if node.target in _NO_OP_CHECKS and not node.users:
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


def _viewable(val: torch.Tensor, shape) -> bool:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    shape = [int(s) for s in shape]
    if val.is_contiguous():
        return True
    with unset_fake_temporarily():
        probe = torch.empty_strided(tuple(val.shape), tuple(val.stride()), device="meta",
                                    dtype=val.dtype)
        try:
            probe.view(shape)
            return True
        except RuntimeError:
            return False


def _copy_forward_module_stack_to_backward(graph: torch.fx.Graph) -> None:
    """Give backward nodes the ``nn_module_stack`` of the forward op they differentiate.

    In AOTAutograd's joint graph a backward node shares the autograd ``seq_nr`` of its
    forward op (same idea as ``copy_fwd_metadata_to_bw_nodes`` in the compile path).
    """
    fwd: Dict[int, Any] = {}
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


def _joint_decompose(ep: ExportedProgram, table: Dict[Any, Callable]) -> ExportedProgram:
    from torch.export.exported_program import _decompose_exported_program
    from torch.export.experimental import _copy_graph_module_and_signature, _remove_detach_pass

    import torch.fx.traceback as fx_traceback
    import torch._functorch.aot_autograd as aot_autograd

    # Metadata preservation.  The joint path (``aot_export_module(trace_joint=True)``)
    # traces twice: AOTAutograd first builds the joint ``fx_g`` (with node meta
    # preserved, backward nodes tagged ``partitioner_tag="is_backward"``), then
    # ``make_fx(flattened_joint)`` re-traces ``fx_g`` by calling its generated Python
    # code, which drops ``nn_module_stack``/``stack_trace``.  We (1) run the exported
    # graph module through an ``fx.Interpreter`` and (2) wrap the intermediate ``fx_g``
    # so it is also interpreted; under ``preserve_node_meta`` make_fx then copies each
    # source node's meta onto the nodes it produces.
    gm = ep.graph_module
    orig_export_fn = aot_autograd._aot_export_function

    def _interpreted(graph_module):
        def run(*args):
            return torch.fx.Interpreter(graph_module).run(*args)

        return run

    def _patched_export_fn(*args, **kwargs):
        fx_g, metadata, in_spec, out_spec = orig_export_fn(*args, **kwargs)
        if kwargs.get("trace_joint") and isinstance(fx_g, torch.fx.GraphModule):
            _copy_forward_module_stack_to_backward(fx_g.graph)
            return _interpreted(fx_g), metadata, in_spec, out_spec
        return fx_g, metadata, in_spec, out_spec

    gm.forward = _interpreted(gm)  # instance attribute shadows the class method
    aot_autograd._aot_export_function = _patched_export_fn
    try:
        with fx_traceback.preserve_node_meta():
            ep = _decompose_exported_program(
                ep,
                cia_to_decomp={},
                python_decomp_table=table,
                joint_loss_index=0,
                decompose_custom_triton_ops=False,
            )
    finally:
        aot_autograd._aot_export_function = orig_export_fn
        try:
            del gm.forward
        except AttributeError:
            pass
    gm, sig = _copy_graph_module_and_signature(ep)
    _remove_detach_pass(gm, sig)
    return ep._update(gm, sig)


def _strip(path: Optional[str], strip: bool) -> Optional[str]:
    if path is None or not strip:
        return path
    if path == "model":
        return ""
    if path.startswith(_WRAP_PREFIX):
        return path[len(_WRAP_PREFIX):]
    return path


def _node_infos(ep: ExportedProgram, strip: bool) -> Dict[str, NodeInfo]:
    infos: Dict[str, NodeInfo] = {}
    # Backward nodes carry the forward stack_trace but an empty nn_module_stack; they
    # share the autograd ``seq_nr`` of the forward op they differentiate.
    fwd_stack_by_seq: Dict[int, Any] = {}
    for node in ep.graph.nodes:
        st = node.meta.get("nn_module_stack")
        seq = node.meta.get("seq_nr")
        if st and seq is not None and node.meta.get("partitioner_tag") != "is_backward":
            fwd_stack_by_seq.setdefault(seq, st)
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            op = f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
        else:
            op = getattr(target, "__name__", str(target))
            mod = getattr(target, "__module__", "")
            if mod == "_operator":
                op = f"operator.{op}"
        stack = (
            node.meta.get("nn_module_stack")
            or node.meta.get("fwd_nn_module_stack")
            or fwd_stack_by_seq.get(node.meta.get("seq_nr"))
        )
        path, mtype = "", None
        if stack:
            path, mtype = list(stack.values())[-1]
            if isinstance(mtype, type):
                mtype = f"{mtype.__module__}.{mtype.__qualname__}"
        path = _strip(path, strip) or ""
        if strip and path == "" and mtype and "_LossWrapper" in str(mtype):
            mtype = None
        is_bwd = node.meta.get("partitioner_tag") == "is_backward" or bool(
            node.meta.get("autograd_backward")
        )
        infos[node.name] = NodeInfo(
            name=node.name,
            op=op,
            module_path=path,
            module_type=mtype,
            is_backward=bool(is_bwd),
            stack_trace=node.meta.get("stack_trace"),
        )
    return infos


def _shape_dtype(node: Optional[torch.fx.Node]) -> Tuple[Tuple[int, ...], Optional[torch.dtype]]:
    val = node.meta.get("val") if node is not None else None
    if isinstance(val, torch.Tensor):
        return tuple(int(s) for s in val.shape), val.dtype
    return (), None


# ---------------------------------------------------------------------------------
# Public entry point
# ---------------------------------------------------------------------------------


def export_program(
    model: nn.Module,
    example_inputs: Sequence[Any],
    *,
    train: bool = False,
    loss_fn: Optional[Callable[..., torch.Tensor]] = None,
    loss_inputs: Sequence[Any] = (),
    return_model_outputs: bool = False,
    decomposition_table: Optional[Dict[Any, Callable]] = None,
    example_kwargs: Optional[Mapping[str, Any]] = None,
) -> ExportedProgramInfo:
    """Export ``model`` with torch.export and decompose it to (near-)core ATen.

    Args:
      model: the module.  Not modified.
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

    User inputs are numbered (``InputInfo.user_index``) in the flattened order
    ``[*example_inputs, *loss_inputs, *example_kwargs.values()]``; pass them in that
    order to :meth:`ExportedProgramInfo.run` / ``flat_args``.

    Returns an :class:`ExportedProgramInfo`.
    """
    timings: Dict[str, float] = {}
    example_inputs = tuple(example_inputs)
    loss_inputs = tuple(loss_inputs)
    table = default_decomposition_table() if decomposition_table is None else dict(decomposition_table)
    was_training = model.training

    t0 = time.perf_counter()
    try:
        if train:
            root: nn.Module = _LossWrapper(model, loss_fn, len(example_inputs), return_model_outputs)
            args = example_inputs + loss_inputs
            kwargs: Dict[str, Any] = dict(example_kwargs or {})
        else:
            if loss_fn is not None or loss_inputs:
                raise ExportError("loss_fn / loss_inputs require train=True")
            root = model
            args, kwargs = example_inputs, dict(example_kwargs or {})
        strip = train
        try:
            ep = torch.export.export(root, args, kwargs, strict=False)
        except Exception as e:  # noqa: BLE001
            raise ExportError(f"torch.export.export failed: {type(e).__name__}: {e}") from e
        timings["export"] = time.perf_counter() - t0

        t1 = time.perf_counter()
        ep, tied, unused = _merge_aliased_and_unused(ep, root, train)
        try:
            if train:
                ep = _joint_decompose(ep, table)
            else:
                ep = ep.run_decompositions(table)
        except Exception as e:  # noqa: BLE001
            raise ExportError(
                f"decomposition ({'joint forward+backward' if train else 'forward'}) failed: "
                f"{type(e).__name__}: {e}"
            ) from e
        timings["decompose"] = time.perf_counter() - t1
    finally:
        model.train(was_training)

    _cleanup_graph(ep.graph_module)
    _make_views_safe(ep.graph_module)

    # ---- inputs --------------------------------------------------------------------
    sig = ep.graph_signature
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    by_name = {n.name: n for n in ep.graph.nodes}
    grad_targets = set()
    for spec in sig.output_specs:
        if spec.kind == OutputKind.GRADIENT_TO_PARAMETER:
            grad_targets.add(spec.target)
    user_flat_index = 0
    inputs: List[InputInfo] = []
    state: Dict[str, torch.Tensor] = {}
    if len(placeholders) != len(sig.input_specs):
        raise ExportError("placeholder count does not match the graph signature")
    for i, (ph, spec) in enumerate(zip(placeholders, sig.input_specs)):
        name = getattr(spec.arg, "name", ph.name)
        if name != ph.name:
            raise ExportError(f"placeholder order mismatch: {name} vs {ph.name}")
        shape, dtype = _shape_dtype(ph)
        if spec.kind == InputKind.USER_INPUT:
            kind: InputKindName = "user_input"
            fqn, uidx = None, user_flat_index
            user_flat_index += 1
            if isinstance(spec.arg, ConstantArgument):
                raise ExportError(
                    f"non-tensor user input {ph.name}={spec.arg.value!r} is not supported; "
                    "bind it in the model (e.g. functools.partial) instead"
                )
        elif spec.kind == InputKind.PARAMETER:
            kind, fqn, uidx = "parameter", _strip(spec.target, strip), None
            state[fqn] = ep.state_dict[spec.target]
        elif spec.kind == InputKind.BUFFER:
            kind, fqn, uidx = "buffer", _strip(spec.target, strip), None
            state[fqn] = (
                ep.state_dict[spec.target] if spec.persistent else ep.constants[spec.target]
            )
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            kind, fqn, uidx = "constant", _strip(spec.target, strip), None
            state[fqn] = ep.constants[spec.target]
        else:
            raise ExportError(f"unsupported input kind {spec.kind} for {ph.name}")
        inputs.append(
            InputInfo(
                index=len(inputs),
                name=ph.name,
                kind=kind,
                fqn=fqn,
                user_index=uidx,
                shape=shape,
                dtype=dtype,
                persistent=spec.persistent if spec.kind == InputKind.BUFFER else None,
                requires_grad=spec.kind == InputKind.PARAMETER and spec.target in grad_targets,
            )
        )
    # torch.export flattens user inputs; example_inputs are all tensors in our use.

    # ---- outputs -------------------------------------------------------------------
    outputs: List[OutputInfo] = []
    model_out_idx = 0
    for i, spec in enumerate(sig.output_specs):
        arg = spec.arg
        oname = getattr(arg, "name", None)
        node = by_name.get(oname) if oname else None
        shape, dtype = _shape_dtype(node)
        uidx = None
        fqn = None
        if spec.kind == OutputKind.LOSS_OUTPUT:
            kind: OutputKindName = "loss"
        elif spec.kind == OutputKind.USER_OUTPUT:
            kind, uidx = "model_output", model_out_idx
            model_out_idx += 1
        elif spec.kind == OutputKind.GRADIENT_TO_PARAMETER:
            kind, fqn = "gradient", _strip(spec.target, strip)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            kind, fqn = "buffer_mutation", _strip(spec.target, strip)
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            kind, fqn = "user_input_mutation", spec.target
        else:
            raise ExportError(f"unsupported output kind {spec.kind}")
        outputs.append(
            OutputInfo(index=i, name=oname or f"out{i}", kind=kind, fqn=fqn, user_index=uidx,
                       shape=shape, dtype=dtype)
        )

    tied_out = {_strip(k, strip): _strip(v, strip) for k, v in tied.items()}
    unused_out = [_strip(u, strip) for u in unused]
    info = ExportedProgramInfo(
        exported_program=ep,
        train=train,
        inputs=inputs,
        outputs=outputs,
        nodes=_node_infos(ep, strip),
        tied_parameters=tied_out,
        unused_parameters=unused_out,
        state=state,
        timings=timings,
    )
    if train:
        missing = [
            i.fqn for i in inputs if i.kind == "parameter" and i.fqn not in info.gradient_outputs()
            and state[i.fqn].requires_grad
        ]
        if missing:
            raise ExportError(f"joint graph lacks gradients for parameters: {missing}")
    return info
