"""The one place where spmdc names private torch / torch-mlir symbols.

Everything else in :mod:`spmdc.frontend` goes through the small functions below, so a
torch upgrade that moves a private name breaks one function here, with one message,
instead of a capture somewhere in the middle of a graph rewrite.

Rules kept by this module:

* At import it only checks ``torch.__version__`` (:func:`check_torch_version`); a wrong
  version raises :class:`UnsupportedTorchError`, one sentence naming found and needed
  versions.  The torch-mlir build is checked by :func:`check_torch_mlir_version`, which
  the torch-mlir bridge calls when it is imported.
* No private module, op or attribute is touched at import time: every function resolves
  what it needs when it is called, so a missing name fails that call only.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = [
    "SUPPORTED_TORCH",
    "TESTED_TORCH_MLIR",
    "UnsupportedTorchError",
    "check_torch_version",
    "check_torch_mlir_version",
    "tree_leaves",
    "core_aten_decompositions",
    "no_op_check_targets",
    "real_tensors",
    "op_overload_parts",
    "update_exported_program",
    "children_table",
    "hook_counts",
    "is_fake",
    "is_persistent_buffer",
    "decompose_joint",
    "wrapped_aot_export_function",
    "install_node_locations",
]

SUPPORTED_TORCH: tuple[int, int] = (2, 13)  # any 2.13.x (pyproject pins torch==2.13.0)
TESTED_TORCH_MLIR = "20261001"  # the torch-mlir wheel pinned in pyproject.toml


class UnsupportedTorchError(ImportError):
    """torch or torch-mlir is not the version the spmdc frontend was written against."""


# ---------------------------------------------------------------------------------
# Version checks
# ---------------------------------------------------------------------------------


def check_torch_version(found: str) -> None:
    """Raise :class:`UnsupportedTorchError` unless ``found`` is a torch 2.13.x version."""
    m = re.match(r"(\d+)\.(\d+)", str(found))
    if m and (int(m.group(1)), int(m.group(2))) == SUPPORTED_TORCH:
        return
    major, minor = SUPPORTED_TORCH
    raise UnsupportedTorchError(
        f"spmdc's frontend needs torch {major}.{minor}.x (it relies on private torch APIs "
        f"of that release) but found torch {found}; install torch=={major}.{minor}.0."
    )


def check_torch_mlir_version(found: str | None = None) -> None:
    """Raise :class:`UnsupportedTorchError` unless torch-mlir is the tested build.

    ``found`` defaults to the installed distribution's version; when no distribution
    metadata exists (e.g. a source build on ``PYTHONPATH``) nothing is checked.
    """
    if found is None:
        try:
            found = importlib.metadata.version("torch-mlir")
        except importlib.metadata.PackageNotFoundError:
            return
    if str(found).split("+")[0] == TESTED_TORCH_MLIR:
        return
    raise UnsupportedTorchError(
        f"spmdc's torch-mlir bridge needs torch-mlir {TESTED_TORCH_MLIR} (it sets private "
        f"FxImporter state) but found torch-mlir {found}; install "
        f"torch-mlir=={TESTED_TORCH_MLIR}."
    )


check_torch_version(torch.__version__)


# ---------------------------------------------------------------------------------
# Small wrappers
# ---------------------------------------------------------------------------------


def tree_leaves(tree: Any) -> list[Any]:
    """Leaves of a pytree (tuples, lists, dicts, HF ``ModelOutput``...), in order."""
    from torch.utils import _pytree

    return list(_pytree.tree_leaves(tree))


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    from torch.utils import _pytree

    return _pytree.tree_map(fn, tree)


def dispatch_mode_base() -> type:
    """``TorchDispatchMode``: the base class of a mode that sees every aten call."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def all_aten_overload_names() -> list[str]:
    """``aten.<op>.<overload>`` of every aten overload registered with the dispatcher (not only
    the packets ``torch.ops.aten`` has loaded so far)."""
    out = []
    for full in torch._C._dispatch_get_all_op_names():
        ns, _, rest = full.partition("::")
        if ns == "aten":
            name, _, ov = rest.partition(".")
            out.append(f"aten.{name}.{ov or 'default'}")
    return out


def below_autograd() -> Any:
    """A context that dispatches below autograd (composite-implicit ops reach modes whole)."""
    return torch._C._AutoDispatchBelowAutograd()


def fake_tensor_mode() -> Any:
    """A FakeTensorMode that accepts real inputs (shapes without memory, for capture)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def storage_key(t: torch.Tensor) -> int:
    """An id of ``t``'s storage, shared by every view and ``.data`` of it (meta tensors too)."""
    return t.untyped_storage()._cdata


def meta_noop_inits() -> dict[str, str]:
    """``torch.nn.init`` attributes that return early on a meta tensor → the init they do
    (spmdc.deferred_init records the call itself). ``trunc_normal_`` checks in its helper."""
    return {"_no_grad_trunc_normal_": "trunc_normal_", "orthogonal_": "orthogonal_", "dirac_": "dirac_",
            "sparse_": "sparse_"}


def core_aten_decompositions() -> dict[Any, Callable]:
    """torch's core-ATen decomposition table (used when torch-mlir is not installed)."""
    from torch._decomp import core_aten_decompositions as table

    return dict(table())


@contextlib.contextmanager
def checkpoint_implementations(non_reentrant: Callable, reentrant: Any) -> Iterator[None]:
    """Replace ``torch.utils.checkpoint``'s two implementations while a model is traced: the
    generator behind ``use_reentrant=False`` and the ``autograd.Function`` behind
    ``use_reentrant=True``. ``checkpoint()`` looks both up in its module at call time, so this
    reaches every caller, however it imported ``checkpoint``."""
    import torch.utils.checkpoint as ckpt

    saved = ckpt._checkpoint_without_reentrant_generator, ckpt.CheckpointFunction
    ckpt._checkpoint_without_reentrant_generator, ckpt.CheckpointFunction = non_reentrant, reentrant
    try:
        yield
    finally:
        ckpt._checkpoint_without_reentrant_generator, ckpt.CheckpointFunction = saved


_FUSED_ATTENTION = {
    "cuda_flash": "_scaled_dot_product_flash_attention",
    "cuda_flash_backward": "_scaled_dot_product_flash_attention_backward",
    "cpu_flash": "_scaled_dot_product_flash_attention_for_cpu",
    "cpu_flash_backward": "_scaled_dot_product_flash_attention_for_cpu_backward",
    "cuda_efficient": "_scaled_dot_product_efficient_attention",
}


def fused_attention_ops() -> dict[str, Any]:
    """ATen's fused attention kernels by role (``cuda_flash``, ``cpu_flash_backward``, ...): their
    ``.default`` overloads, None where this torch lacks one."""
    return {role: getattr(getattr(torch.ops.aten, name, None), "default", None)
            for role, name in _FUSED_ATTENTION.items()}


def registered_decomposition(op: Any) -> Callable | None:
    """torch's own Python decomposition of ``op`` (e.g. SDPA's math form), if it has one."""
    from torch._decomp import decomposition_table

    return decomposition_table.get(op)


def no_op_check_targets() -> tuple[Any, ...]:
    """Op overloads that only assert tensor metadata (``aten._assert_tensor_metadata``).

    Empty when this torch has no such op.
    """
    packet = getattr(torch.ops.aten, "_assert_tensor_metadata", None)
    overload = getattr(packet, "default", None) if packet is not None else None
    return (overload,) if overload is not None else ()


@contextlib.contextmanager
def quiet_fake_tensor_errors() -> Iterator[None]:
    """During torch.export, a failing op (a shape error in the user's model) is logged with a
    full traceback by the fake-tensor machinery before it is raised; the raised error is
    what spmdc reports, so that log is silenced."""
    import logging

    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def real_tensors() -> Iterator[None]:
    """Context in which new tensors are real (meta/CPU) even inside FakeTensor tracing."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        yield


def op_overload_parts(target: Any) -> tuple[str, str, str] | None:
    """``aten.add.Tensor`` -> ``("aten", "add", "Tensor")``; None if not an op overload."""
    from torch._ops import OpOverload

    if not isinstance(target, OpOverload):
        return None
    packet = target._schema.name.split("::")[-1]
    return target.namespace, packet, target._overloadname


def hook_counts(module: torch.nn.Module) -> tuple[int, int, int, int]:
    """How many forward, forward-pre, backward and backward-pre hooks ``module`` itself holds."""
    return (len(module._forward_hooks), len(module._forward_pre_hooks), len(module._backward_hooks),
            len(getattr(module, "_backward_pre_hooks", {})))


def is_persistent_buffer(module: torch.nn.Module, name: str) -> bool:
    """Whether ``module``'s own buffer ``name`` is in its state dict."""
    return name not in module._non_persistent_buffers_set


def children_table(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """``module``'s ordered name -> child table itself (editing it edits the module: what
    ``nn.ModuleList`` slicing and iteration read)."""
    return module._modules


def is_fake(t: Any) -> bool:
    """A FakeTensor (torch.export's tracing value, or spmdc's fake parameters)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def update_exported_program(ep: Any, graph_module: torch.fx.GraphModule, signature: Any,
                            state_dict: dict[str, Any] | None = None,
                            constants: dict[str, Any] | None = None) -> Any:
    """A copy of ``ep`` with a new graph module / signature (and optionally state and constants)."""
    return ep._update(graph_module, signature, state_dict=state_dict, constants=constants)


def decompose_joint(ep: Any, table: dict[Any, Callable]) -> Any:
    """Joint forward+backward decomposition of ``ep`` (whose output 0 is the loss).

    Same as torch's private ``_export_forward_backward`` but with our ``table``
    instead of ``core_aten_decompositions()``: decompose with ``joint_loss_index=0``,
    then a rename-preserving copy and removal of detach chains.
    """
    from torch.export.experimental import _copy_graph_module_and_signature, _remove_detach_pass
    from torch.export.exported_program import _decompose_exported_program

    ep = _decompose_exported_program(
        ep,
        cia_to_decomp={},
        python_decomp_table=table,
        joint_loss_index=0,
        decompose_custom_triton_ops=False,
    )
    gm, sig = _copy_graph_module_and_signature(ep)
    _remove_detach_pass(gm, sig)
    return update_exported_program(ep, gm, sig)


def plain_codegen(graph: Any) -> None:
    """Make ``graph`` generate a plain positional ``forward`` (an unlifted exported program's graph
    flattens its inputs with a pytree spec)."""
    import torch

    graph._codegen = torch.fx.graph.CodeGen()


@contextlib.contextmanager
def wrapped_aot_export_function(wrap: Callable[[Callable], Callable]) -> Iterator[None]:
    """Replace AOTAutograd's private ``_aot_export_function`` by ``wrap(original)``.

    The original is restored on exit, whatever happens.  Raises ``AttributeError`` /
    ``ImportError`` on entry when this torch no longer has the function.
    """
    import torch._functorch.aot_autograd as aot_autograd

    original = aot_autograd._aot_export_function
    aot_autograd._aot_export_function = wrap(original)
    try:
        yield
    finally:
        aot_autograd._aot_export_function = original


@functools.cache
def _hooked_context_cache() -> type:
    """torch-mlir ``ContextCache`` subclass whose node locations come from a callback."""
    from torch_mlir.extras.fx_importer import ContextCache

    class HookedContextCache(ContextCache):
        __slots__ = ["spmdc_locate"]

        def get_node_location(self, node):  # noqa: D401
            try:
                default = super().get_node_location(node)
            except Exception:  # pragma: no cover - keep importing without a location
                default = None
            return self.spmdc_locate(node, default)

    return HookedContextCache


def install_node_locations(importer: Any, locate: Callable[[Any, Any], Any]) -> None:
    """Make a torch-mlir ``FxImporter`` locate each FX node with ``locate(node, default)``.

    ``default`` is torch-mlir's own location for the node (a file:line callsite built
    from its stack trace, or None); ``locate`` returns the ``ir.Location`` to use.
    """
    cache = _hooked_context_cache()(importer.module.context,
                                    py_attr_tracker=importer._py_attr_tracker)
    cache.spmdc_locate = locate
    importer._cc = cache
