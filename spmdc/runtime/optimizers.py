"""Optimizers over the compiled module's parameters (DTensors).

A gradient arrives in its parameter's storage layout, so an elementwise optimizer (SGD, Adam,
AdamW, ...: :data:`ELEMENTWISE`) updates each shard on its own and its state is sharded like the
parameter. Any other optimizer (Adafactor, Muon, LBFGS, a class of your own) needs whole
tensors: spmdc then stores every parameter whole on every rank (the programs still compute in
the plan's layouts), so the optimizer sees exactly the single-device tensors and its state is
whole too. Never a silently different update. A *per-tensor* optimizer (:data:`PER_TENSOR`:
Muon) that computes each tensor's update from that tensor alone runs locally when every rank
holds each parameter whole or not at all (``fsdp_shard="whole"``: RaggedShard storage), with
no gather. A spec is

* ``("sgd", {"lr": 0.1, "momentum": 0.9})`` or ``("adamw", {"lr": 1e-3, ...})`` (or just the
  name): any ``torch.optim`` class by its lower-case name (:data:`OPTIMIZERS`); ``"muon"`` is
  spmdc's :class:`~spmdc.runtime.muon.Muon` (Muon for matrices, AdamW for the rest: torch's
  own takes matrices only),
* :class:`Optimizer` (``Optimizer("adamw", lr=1e-3)``),
* a callable ``factory(params) -> torch.optim.Optimizer`` (any class, your own included; it is
  asked once over a dummy parameter which class it builds).

The named forms build torch's classes, so formulas and defaults are torch's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _torch_optimizers() -> dict[str, type]:
    import torch

    from spmdc.runtime.muon import Muon

    out = {n.lower(): c for n, c in vars(torch.optim).items()
           if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer
           and n.lower() not in ("lbfgs", "sparseadam")}   # these need a closure / sparse gradients
    out["muon"] = Muon   # torch.optim.Muon refuses every parameter that is not a matrix
    return out


OPTIMIZERS = tuple(sorted(_torch_optimizers()))


def _elementwise_classes() -> tuple[type, ...]:
    import torch

    names = ("SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Rprop", "Adagrad", "Adadelta", "ASGD")
    return tuple(getattr(torch.optim, n) for n in names if hasattr(torch.optim, n))


def optimizer_class(spec: Any) -> type | None:
    """The torch.optim class a spec builds (a factory is asked once, over a dummy parameter)."""
    import torch

    if spec is None:
        return None
    name = spec if isinstance(spec, str) else spec[0] if isinstance(spec, (tuple, list)) and spec else None
    name = spec.name if isinstance(spec, Optimizer) else name
    if isinstance(name, str) and name.lower() in _torch_optimizers():   # a name: no need to build one
        return _torch_optimizers()[name.lower()]
    probe = make_optimizer(spec, [torch.zeros(2, 2, requires_grad=True)])   # 2-D: matrix optimizers accept it
    return type(probe)


def class_name(cls: type) -> str:
    """An optimizer class's name as checkpoints record it (``torch.optim.adamw.AdamW``): another
    class is another optimizer, subclasses included (torch's AdamW is a subclass of Adam)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def pipeline_refusal(stages: Any, optimizer: Any) -> str | None:
    """Why a pipeline of ``stages`` (each with a ``mesh`` and a ``plan``) cannot train with
    ``optimizer``, or None: a pipeline runs elementwise optimizers, and per-tensor ones (Muon) on
    stages that keep each parameter whole or not at all (one rank, or plan ``dp``) -- the check
    :class:`~spmdc.api.compiled_module.CompiledModule` makes on the ranks, made before any starts."""
    cls = optimizer_class(optimizer) if optimizer is not None else None
    if cls is None or is_elementwise(cls):
        return None
    if not is_per_tensor(cls):
        return (f"{cls.__name__} is neither an elementwise nor a per-tensor optimizer; a pipeline does not "
                "store parameters whole for it yet (use an elementwise optimizer such as adamw, or muon)")
    for k, s in enumerate(stages):
        name = getattr(s.plan, "preset", None) or s.plan
        if s.mesh.size > 1 and not (is_per_tensor(cls) and name == "dp"):
            return (f"{cls.__name__} updates whole parameters and stage {k} stores them sharded (plan '{name}' on "
                    f"{s.mesh}); a pipeline does not store them whole for it yet (use an elementwise optimizer, "
                    "plan dp in the stages, or one rank per stage)")
    return None


def is_elementwise(cls: type | None) -> bool:
    """Whether an optimizer class updates every element from that element alone (exactly the
    classes spmdc knows to be: torch's SGD, Adam(W), Adamax, NAdam, RAdam, RMSprop, Rprop,
    Adagrad, Adadelta, ASGD; subclasses may change the update, so they do not count)."""
    return cls is not None and cls in _elementwise_classes()


def is_per_tensor(cls: type | None) -> bool:
    """Whether an optimizer class updates each tensor from that tensor alone and accepts an
    empty one (a rank's nothing of a matrix another rank holds): spmdc's Muon and
    torch.optim.Muon; elementwise classes too."""
    import torch

    from spmdc.runtime.muon import Muon

    per_tensor = (Muon,) + ((torch.optim.Muon,) if hasattr(torch.optim, "Muon") else ())
    return is_elementwise(cls) or (cls is not None and cls in per_tensor)


@dataclass
class Optimizer:
    """A named optimizer and its torch.optim options: ``Optimizer("sgd", lr=0.1, momentum=0.9)``."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, options: dict[str, Any] | None = None, **kwargs: Any):
        self.name = name.lower()
        self.options = {**(options or {}), **kwargs}
        if self.name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer '{name}' (choices: {', '.join(OPTIMIZERS)}, "
                             "or pass a factory(params) -> torch.optim.Optimizer)")

    def build(self, params: list[Any]) -> Any:

        return _torch_optimizers()[self.name](params, **self.options)


def make_optimizer(spec: Any, params: list[Any]) -> Any:
    """``spec`` (a name, ``(name, options)``, :class:`Optimizer` or factory) over ``params``."""
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = Optimizer(spec)
    elif isinstance(spec, (tuple, list)):
        if len(spec) != 2 or not isinstance(spec[0], str):
            raise TypeError(f"optimizer tuple must be (name, options), got {spec!r}")
        spec = Optimizer(spec[0], dict(spec[1] or {}))
    if isinstance(spec, Optimizer):
        return spec.build(params)
    if callable(spec):
        return spec(params)
    raise TypeError(f"optimizer must be a name, (name, options), spmdc Optimizer or a factory, got {spec!r}")
