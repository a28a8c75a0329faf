"""The wrappers exported instead of the model, and loss extraction.

A training capture exports :class:`LossWrapper` (model + loss): its ``forward(*inputs)``
returns ``(loss,)`` or ``(loss, *model_outputs)``, which is what the joint decomposition
needs (output 0 is the loss). A forward capture exports :class:`OutputWrapper`: the
model's tensor outputs, flattened, whatever container holds them (a HuggingFace
``ModelOutput``, dicts, tuples); objects that are not tensors (a ``DynamicCache`` with
``use_cache`` on) are left out with one note. The model is registered as the submodule
``model``; :data:`WRAP_PREFIX` is stripped from every recorded FQN and module path
(:func:`strip_wrapper`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from spmdc.frontend import torch_compat
from spmdc.frontend.mixed_precision import MixedPrecision, call_model
from spmdc.frontend.program import ExportError

__all__ = ["WRAP_PREFIX", "LossWrapper", "OutputWrapper", "OutputLeftOutWarning", "extract_loss", "strip_wrapper"]

WRAP_PREFIX = "model."


class LossWrapper(nn.Module):
    """``forward(*model_inputs, *loss_inputs, **model_kwargs) -> (loss, [outputs...])``.

    ``loss_fn(model_output, *loss_inputs)`` gives the loss; without ``loss_fn`` the model
    must return it (see :func:`extract_loss`).  ``return_outputs`` also returns the
    model's tensor outputs (flattened) after the loss, when ``loss_fn`` is given.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable | None, n_model_inputs: int,
                 return_outputs: bool, policy: MixedPrecision | None = None):
        super().__init__()
        self.model = model
        self.policy = policy
        self.loss_fn = loss_fn
        self.n_model_inputs = n_model_inputs
        self.return_outputs = return_outputs

    def forward(self, *args: Any, **kwargs: Any) -> tuple:
        model_args, loss_args = args[: self.n_model_inputs], args[self.n_model_inputs:]
        out = call_model(self.model, model_args, kwargs, self.policy)
        if self.loss_fn is not None:
            loss, rest = self.loss_fn(out, *loss_args), out
        else:
            loss, rest = extract_loss(out), None
        if self.return_outputs and rest is not None:
            leaves = torch_compat.tree_leaves(rest)
            # (detached: the joint graph differentiates the loss only; the values are the forward's)
            return (loss, *[t.detach() for t in leaves if isinstance(t, torch.Tensor)])
        return (loss,)


class OutputLeftOutWarning(UserWarning):
    """A model output that is not a tensor (a cache object) is not part of the captured program."""


class _Notes(list):
    """A list that copies of its module share (export may copy the module it traces)."""

    def __copy__(self) -> _Notes:
        return self

    def __deepcopy__(self, memo: dict) -> _Notes:
        return self


class OutputWrapper(nn.Module):
    """``forward(*inputs, **kwargs) -> tuple of the model's tensor outputs`` (flattened in order)."""

    def __init__(self, model: nn.Module, policy: MixedPrecision | None = None):
        super().__init__()
        self.model = model
        self.policy = policy
        self.left_out: list[str] = _Notes()
        self.tree: list[Any] = _Notes()   # [the output's structure] (:func:`output_tree`)

    def forward(self, *args: Any, **kwargs: Any) -> tuple:
        out = call_model(self.model, args, kwargs, self.policy)
        tensors: list[torch.Tensor] = []
        found: list[str] = []
        _tensor_leaves(out, "output", tensors, found)
        self.left_out[:] = found   # in place: the list is shared with copies of this module
        self.tree[:] = [output_tree(out)]
        return tuple(tensors)


def output_tree(x: Any, counter: list[int] | None = None) -> Any:
    """The structure of a model's output, its tensors numbered in :func:`_tensor_leaves` order —
    what :func:`rebuild_output` puts the program's results back into. Picklable (it travels with
    the compiled program): containers are named by module and qualified name.

    >>> output_tree((t0, {"a": t1, "b": None}))
    ('tuple', 'builtins', 'tuple', [('t', 0), ('dict', 'builtins', 'dict', ['a', 'b'], [('t', 1), None])])
    """
    counter = counter if counter is not None else [0]
    if isinstance(x, torch.Tensor):
        counter[0] += 1
        return ("t", counter[0] - 1)
    if x is None:
        return None
    cls = type(x)
    name = (cls.__module__, cls.__qualname__)
    if isinstance(x, dict) or hasattr(x, "keys") and hasattr(x, "__getitem__") and not isinstance(x, type):
        keys = list(x.keys())
        return ("dict", *name, keys, [output_tree(x[k], counter) for k in keys])
    if isinstance(x, (tuple, list)):
        return ("tuple" if isinstance(x, tuple) else "list", *name, [output_tree(i, counter) for i in x])
    return None   # an object that is not a tensor (left out of the program): None in its place


def rebuild_output(tree: Any, leaves: list[Any]) -> Any:
    """The model's output structure (:func:`output_tree`) around ``leaves``: a HuggingFace
    ``ModelOutput``, a named tuple, dicts, lists; a container class that cannot be imported here
    comes back as a plain dict / tuple."""
    if tree is None:
        return None
    if tree[0] == "t":
        return leaves[tree[1]]
    kind, module, qualname = tree[:3]
    cls = _importable(module, qualname)
    if kind == "dict":
        items = {k: rebuild_output(t, leaves) for k, t in zip(tree[3], tree[4])}
        if cls is None or cls is dict:
            return items
        try:
            return cls(**items)
        except Exception:   # (a mapping type that is not built from keywords)
            return items
    items_ = [rebuild_output(t, leaves) for t in tree[3]]
    if kind == "list":
        return items_
    if cls is not None and cls is not tuple and hasattr(cls, "_fields"):   # a named tuple
        return cls(*items_)
    return tuple(items_)


def _importable(module: str, qualname: str) -> Any:
    import importlib

    if "<locals>" in qualname:
        return None
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    except Exception:
        return None


def _tensor_leaves(x: Any, name: str, tensors: list[torch.Tensor], left_out: list[str]) -> None:
    if isinstance(x, torch.Tensor):
        tensors.append(x)
    elif x is None:
        return
    elif isinstance(x, dict) or hasattr(x, "keys") and hasattr(x, "__getitem__") and not isinstance(x, type):
        for k in list(x.keys()):
            _tensor_leaves(x[k], str(k), tensors, left_out)
    elif isinstance(x, (tuple, list)):
        for i, item in enumerate(x):
            _tensor_leaves(item, f"{name}[{i}]", tensors, left_out)
    else:
        left_out.append(f"'{name}' ({type(x).__name__})")


def extract_loss(out: Any) -> torch.Tensor:
    """The scalar loss a model returned: a tensor, a tuple starting with it, or ``.loss``."""
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


def strip_wrapper(path: str | None, strip: bool) -> str | None:
    """Remove the wrapper's ``model.`` prefix from an FQN / module path (when ``strip``)."""
    if path is None or not strip:
        return path
    if path == "model":
        return ""
    if path.startswith(WRAP_PREFIX):
        return path[len(WRAP_PREFIX):]
    return path
