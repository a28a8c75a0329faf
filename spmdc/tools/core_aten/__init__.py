"""PyTorch's Core ATen opset, as spmdc covers it: every overload's status and a sample call;
:mod:`.check` runs the samples, :mod:`.table` renders the tables, ``python -m spmdc.tools.core_aten
[--check]`` writes (or compares) them.

Every overload tagged ``core`` in ``torch.ops.aten`` is in exactly one state:

* ``translated`` — an aten handler (:mod:`spmdc.frontend.aten`) turns it into ``tensor`` ops,
  each with an interpreter implementation, a sharding rule, Python codegen and, where it
  fuses, a Triton form (``tests/unit/dialects/test_op_definitions.py``);
* ``decomposed`` — spmdc's decomposition table (:mod:`spmdc.frontend.decompositions`)
  rewrites it into translated ops before import (it wins over a handler: it runs first);
* ``refused`` — :data:`REFUSED` names why spmdc cannot run it exactly (complex numbers,
  shapes known only at run time, symbolic-size ops that static shapes never produce); capture
  stops on it with that reason.

Each translated or decomposed overload has at least one :class:`Sample` (one module per family:
``samples_*.py``): a small call that ``tests/unit/frontend/test_core_aten.py`` captures (forward,
and the training step where the op is differentiable), interprets and compares with eager
PyTorch. ``python -m spmdc.tools.core_aten`` regenerates ``docs/core_aten.md`` (op -> state ->
``tensor`` ops -> rule) and ``tests/lit/rules/core_aten_rules.txt`` (every sampled ``tensor`` op's
sharding rule as text); the test fails when either is stale.

    >>> from spmdc.tools.core_aten import coverage
    >>> coverage()["aten.mm.default"].state
    'translated'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

# why spmdc refuses a Core ATen overload (capture stops on it with this reason)
REFUSED: dict[str, str] = {
    "aten._fft_r2c.default": "produces complex numbers; spmdc's element types are real",
    "aten._fft_c2r.default": "reads complex numbers; spmdc's element types are real",
    "aten._local_scalar_dense.default": ("turns a tensor into a Python number (.item()): the value steers the "
                                         "program, which a compiled SPMD program cannot follow"),
    "aten.nonzero.default": "its result's shape is the number of non-zero elements, known only at run time",
    "aten.masked_scatter.default": ("reads as many source elements as the mask has true ones, a count known "
                                    "only at run time"),
    "aten.sym_numel.default": "a symbolic-size op; spmdc captures static shapes, where sizes are constants",
    "aten.sym_storage_offset.default": "a symbolic-size op; spmdc captures static shapes, where sizes are constants",
    "aten.atan2.out": "an out= variant; functional graphs (torch.export) call aten.atan2.default instead",
    "aten.resize_.default": ("resizes a tensor's storage in place; spmdc's tensors have fixed shapes and functional "
                             "graphs (torch.export) never contain it"),
    "aten.sym_size.int": "a symbolic-size op; spmdc captures static shapes, where sizes are constants",
    "aten.sym_stride.int": "a symbolic-size op; spmdc captures static shapes, where sizes are constants",
    "aten.sym_is_contiguous.default": "a symbolic-size op; spmdc captures static shapes, where sizes are constants",
}


@dataclass(frozen=True)
class Sample:
    """One call of a core overload: ``fn(*make())`` must reach ``op`` in the exported graph.

    ``train``: also capture the training step (loss = sum of the float outputs, gradients of
    the float arguments, which become parameters) and compare with autograd. ``tol``:
    (rtol, atol) of the comparison.
    """

    op: str
    fn: Callable[..., Any]
    make: Callable[[], Sequence[Any]]
    train: bool = True
    tol: tuple[float, float] = (1e-5, 1e-6)
    note: str = ""


@dataclass
class Coverage:
    """One core overload: its state and, for translated/decomposed ones, where it is tested."""

    op: str
    state: str                       # translated | decomposed | refused | missing
    reason: str = ""
    samples: list[Sample] = field(default_factory=list)


def core_overloads() -> list[str]:
    """``aten.<op>.<overload>`` of every overload tagged ``torch.Tag.core``, sorted (from the
    dispatcher's full registry: ``dir(torch.ops.aten)`` lists only the packets loaded so far)."""
    import torch

    from spmdc.frontend.torch_compat import all_aten_overload_names

    out = []
    for name in all_aten_overload_names():
        try:
            op = overload(name)
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in op.tags:
            out.append(name)
    return sorted(set(out))


def overload(name: str) -> Any:
    """``"aten.add.Tensor"`` -> ``torch.ops.aten.add.Tensor``."""
    import torch

    ns, packet, ov = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), ov)


def _families() -> list[Any]:
    from spmdc.tools.core_aten import samples_elementwise, samples_nn, samples_reduction, samples_shape

    return [samples_elementwise, samples_reduction, samples_shape, samples_nn]


def all_samples() -> list[Sample]:
    return [s for fam in _families() for s in fam.SAMPLES]


def refused() -> dict[str, str]:
    """:data:`REFUSED` and each family module's ``REFUSED`` (overload -> reason)."""
    out = dict(REFUSED)
    for fam in _families():
        out.update(getattr(fam, "REFUSED", {}))
    return out


@cache
def coverage() -> dict[str, Coverage]:
    """Every core overload -> :class:`Coverage` (``missing`` marks a gap the test reports)."""
    from spmdc.frontend.aten import handler_table
    from spmdc.frontend.decompositions import default_decomposition_table
    from spmdc.frontend.translate import fx_op_name

    handlers = handler_table()
    decomposed = {str(k) for k in default_decomposition_table()}
    by_op: dict[str, list[Sample]] = {}
    for s in all_samples():
        by_op.setdefault(s.op, []).append(s)
    out = {}
    why = refused()
    for name in core_overloads():
        if name in why:
            c = Coverage(name, "refused", why[name])
        elif name in decomposed:   # decompositions run before translation
            c = Coverage(name, "decomposed")
        elif fx_op_name(overload(name)) in handlers:
            c = Coverage(name, "translated")
        else:
            c = Coverage(name, "missing")
        c.samples = by_op.get(name, [])
        out[name] = c
    return out
