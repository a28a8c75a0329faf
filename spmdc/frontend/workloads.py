"""Name a workload: a built-in (``mlp``, ``gpt2-tiny``, ``llama-tiny``; ``llama3-1b``, ``llama3-8b``,
``llama3-70b`` at real size on the meta device), ``path/to/file.py:factory`` or ``package.module:factory``.

A factory takes no required arguments and returns ``(model, example_inputs, loss_fn)``:

* ``example_inputs`` — the model's positional inputs as a tuple (or one tensor), or a pair
  ``((model inputs...), (loss inputs...))`` when ``loss_fn`` takes targets, or a dict of
  keyword inputs (``{"input_ids": ids, "labels": ids}`` for a HuggingFace model that
  computes its loss);
* ``loss_fn(model_output, *loss_inputs) -> scalar`` — optional (``None``, or a 2-tuple
  without it); needed for a training capture unless the model returns its loss.

    w = load_workload("gpt2-tiny")
    module = spmdc.capture(w.model, w.inputs, train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

BUILTINS: dict[str, str] = {
    "mlp": "spmdc.examples.mlp:factory",
    "gpt2-tiny": "spmdc.examples.gpt2_tiny:factory",
    "llama-tiny": "spmdc.examples.llama_tiny:factory",
    "llama3-1b": "spmdc.examples.llama3:llama3_1b",     # HF LlamaForCausalLM at Llama-3 shapes, on meta
    "llama3-8b": "spmdc.examples.llama3:llama3_8b",
    "llama3-70b": "spmdc.examples.llama3:llama3_70b",
}


class WorkloadError(ValueError):
    """A workload spec that cannot be resolved, or a factory with the wrong return value."""


@dataclass
class Workload:
    name: str
    model: Any
    inputs: tuple
    loss_fn: Callable | None = None
    loss_inputs: tuple = ()
    kwargs: dict = field(default_factory=dict)   # keyword model inputs, after the positional ones

    def capture(self, train: bool = False):
        """:func:`spmdc.frontend.capture.capture_program` of this workload."""
        from spmdc.frontend.capture import capture_program

        return capture_program(self.model, self.inputs, train=train, loss_fn=self.loss_fn if train else None,
                               loss_inputs=self.loss_inputs if train else (), example_kwargs=self.kwargs)

    def call_model(self) -> Any:
        """The model on the example inputs, eagerly (what spmdc's program computes)."""
        return self.model(*self.inputs, **self.kwargs)


def _help() -> str:
    return (f"built-in workloads: {', '.join(BUILTINS)}; or give 'path/to/file.py:factory' or "
            "'package.module:factory'")


def _load_file(path: str) -> Any:
    if not os.path.isfile(path):
        raise WorkloadError(f"workload file '{path}' does not exist ({_help()})")
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:10]
    name = f"spmdc_workload_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"cannot import '{path}' as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise WorkloadError(f"importing '{path}' failed: {type(e).__name__}: {e}") from e
    return module


def resolve_factory(spec: str) -> Callable[..., Any]:
    """The factory function a spec names (without calling it)."""
    target = BUILTINS.get(spec, spec)
    if ":" not in target:
        raise WorkloadError(f"unknown workload '{spec}' ({_help()})")
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise WorkloadError(f"malformed workload '{spec}': expected 'file.py:factory' or 'module:factory'")
    if where.endswith(".py") or os.sep in where or "/" in where:
        module = _load_file(where)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise WorkloadError(f"cannot import module '{where}' for workload '{spec}': {e} ({_help()})") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise WorkloadError(f"'{where}' has no callable '{attr}' (workload '{spec}')")
    return fn


def user_frame(exc: BaseException) -> str | None:
    """``file:line in function`` of the innermost frame of ``exc`` outside spmdc, torch and
    the standard library: where in the user's code it happened."""
    import traceback

    spmdc_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename
        if path.startswith(spmdc_dir) or "/site-packages/" in path or "/lib/python3" in path or path.startswith("<"):
            continue
        return f"{path}:{frame.lineno} in {frame.name}"
    return None


def load_workload(spec: str, **overrides: Any) -> Workload:
    """Resolve ``spec``, call its factory (with ``overrides`` as keyword arguments), normalise."""
    fn = resolve_factory(spec)
    try:
        out = fn(**overrides)
    except Exception as e:
        where = user_frame(e)
        raise WorkloadError(f"the factory of workload '{spec}' raised {type(e).__name__}: {e}"
                            + (f" (at {where})" if where else "")) from e
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise WorkloadError(f"factory of '{spec}' must return (model, example_inputs, loss_fn), "
                            f"got {type(out).__name__}")
    model, inputs = out[0], out[1]
    loss_fn = out[2] if len(out) == 3 else None
    if not callable(model):
        raise WorkloadError(f"factory of '{spec}' returned a model of type {type(model).__name__}")
    kwargs: dict = {}
    if isinstance(inputs, dict):
        kwargs, inputs = dict(inputs), ()
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    loss_inputs: tuple = ()
    if len(inputs) == 2 and all(isinstance(p, (tuple, list)) for p in inputs):
        inputs, loss_inputs = tuple(inputs[0]), tuple(inputs[1])
    import torch

    for what, values in (("input", inputs), ("loss input", loss_inputs), ("keyword input", list(kwargs.values()))):
        for i, x in enumerate(values):
            if not isinstance(x, torch.Tensor):
                raise WorkloadError(f"{what} #{i} of workload '{spec}' is a {type(x).__name__}, not a tensor "
                                    "(example inputs must be tensors with the shapes to compile for)")
    if loss_fn is not None and not callable(loss_fn):
        raise WorkloadError(f"the loss function of workload '{spec}' is a {type(loss_fn).__name__}, not callable")
    return Workload(spec, model, tuple(inputs), loss_fn, tuple(loss_inputs), kwargs)
