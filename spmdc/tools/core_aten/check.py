"""Run :class:`~spmdc.tools.core_aten.Sample` calls through capture, the interpreter and the
generated code, against eager PyTorch; collect the ``tensor`` ops each aten op became.

Samples run in groups (one export per group: a module whose forward calls every sample)::

    report = check_samples(samples, train=False)
    assert report.failures == {}

A failing group is rerun one sample at a time, so a failure names its op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from spmdc.dialects.attrs import GRAD_OF_ATTR
from spmdc.frontend.torch_compat import below_autograd
from spmdc.tools.core_aten import Sample, overload


@dataclass
class Report:
    """What a run of samples found."""

    failures: dict[str, str] = field(default_factory=dict)       # op -> message
    emitted: dict[str, set[str]] = field(default_factory=dict)  # aten label -> tensor op names
    rules: set[str] = field(default_factory=set)                 # "tensor.x <types> : <rule>" lines
    kinds: dict[str, set[str]] = field(default_factory=dict)     # tensor op name -> rule kinds seen


def reached_ops(sample: Sample) -> set[str]:
    """The aten overloads eager PyTorch dispatches for one sample call."""
    from spmdc.frontend.torch_compat import dispatch_mode_base

    TorchDispatchMode = dispatch_mode_base()   # noqa: N806
    seen: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(f"aten.{func._schema.name.split('::')[-1]}.{func._overloadname}")
            return func(*args, **(kwargs or {}))

    with Record():
        sample.fn(*sample.make())
    # below autograd too: composite-implicit ops (avg_pool1d, upsample_*.vec, var.dim) reach the mode whole
    with below_autograd(), Record():
        sample.fn(*sample.make())
    return seen


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _flat(o)]


def _is_grad_leaf(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() > 0


class _Group(nn.Module):
    """Calls every sample; with ``train`` the float arguments are parameters."""

    def __init__(self, samples: Sequence[Sample], args: list[Sequence[Any]], train: bool):
        super().__init__()
        self.samples = list(samples)
        self.slots: list[list[tuple[str, Any]]] = []     # per sample arg: ("param", name) / ("input", k) / ("const", v)
        self.inputs: list[torch.Tensor] = []
        for i, sargs in enumerate(args):
            slots = []
            for j, a in enumerate(sargs):
                if train and _is_grad_leaf(a):
                    name = f"s{i}_a{j}"
                    self.register_parameter(name, nn.Parameter(a.clone()))
                    slots.append(("param", name))
                elif isinstance(a, torch.Tensor):
                    slots.append(("input", len(self.inputs)))
                    self.inputs.append(a)
                else:
                    slots.append(("const", a))
            self.slots.append(slots)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        for s, slots in zip(self.samples, self.slots):
            call = [getattr(self, v) if k == "param" else inputs[v] if k == "input" else v for k, v in slots]
            outs += _flat(s.fn(*call))
        return tuple(outs)


def _loss(outs: tuple[torch.Tensor, ...], *weights: torch.Tensor) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float32)
    for o, w in zip(outs, weights):
        if o.is_floating_point():
            total = total + (o.float() * w).sum()
    return total


def _run_group(samples: Sequence[Sample], train: bool, report: Report) -> None:
    from spmdc.codegen.cache import load_program
    from spmdc.frontend.capture import capture_program
    from spmdc.runtime.collectives import CountingComm
    from spmdc.runtime.interpreter import interpret

    torch.manual_seed(0)
    args = [s.make() for s in samples]
    model = _Group(samples, args, train)
    torch.manual_seed(7)   # every run of the group draws from the same generator state
    with torch.no_grad():
        ref = model(*model.inputs)
    rtol = max(s.tol[0] for s in samples)
    atol = max(s.tol[1] for s in samples)
    if not train:
        cap = capture_program(model, tuple(model.inputs))
        user = list(model.inputs)
        torch.manual_seed(7)
        got = interpret(cap.module, cap.arguments(*user))
        fn, _ = load_program(cap.module, "main")
        torch.manual_seed(7)
        gen = fn(cap.arguments(*user), CountingComm(None))
        for o_ref, o_int, o_gen in zip(ref, got, gen):
            torch.testing.assert_close(o_int, o_ref, rtol=rtol, atol=atol, equal_nan=True)
            torch.testing.assert_close(o_gen, o_ref, rtol=rtol, atol=atol, equal_nan=True)
        assert len(got) == len(ref)
        _collect(cap.module, report)
        return
    g = torch.Generator().manual_seed(1)
    weights = tuple(torch.randn(o.shape, generator=g) if o.is_floating_point() else torch.zeros(()) for o in ref)
    cap = capture_program(model, tuple(model.inputs), train=True, loss_fn=_loss, loss_inputs=weights)
    torch.manual_seed(7)
    got = interpret(cap.module, cap.arguments(*model.inputs, *weights))
    model.zero_grad()
    torch.manual_seed(7)
    loss = _loss(model(*model.inputs), *weights)
    loss.backward()
    func = next(op for op in cap.module.body.ops if op.name == "func.func")
    roles = [func.res_attrs(i) for i in range(len(func.function_type.results))]
    torch.testing.assert_close(got[0], loss.detach(), rtol=max(rtol, 1e-4), atol=max(atol, 1e-5))
    grads = {a[GRAD_OF_ATTR].value: got[i] for i, a in enumerate(roles) if GRAD_OF_ATTR in a}
    for name, p in model.named_parameters():
        want = p.grad if p.grad is not None else torch.zeros_like(p)
        have = grads.get(name, torch.zeros_like(p))
        torch.testing.assert_close(have, want, rtol=max(rtol, 1e-4), atol=max(atol, 1e-5),
                                   msg=lambda m, n=name: f"gradient of {n}: {m}")
    _collect(cap.module, report)


def _as_op_name(label: str) -> str:
    """A location's aten label (``aten.acos``, ``aten.add.Tensor``) as ``aten.<op>.<overload>``."""
    parts = label.split(".")
    return label + ".default" if len(parts) == 2 else label


def rule_kind(rule: Any) -> str:
    """``pointwise`` (every factor may be sharded, nothing pending), ``reduction`` (a factor
    contracts: sharding it leaves a Partial), ``blocked`` (some factor needs replication),
    ``replicated`` (nothing may be sharded)."""
    used = {f for dims in (*rule.operands, *rule.results) for f in dims if f is not None}
    if not used or used <= set(rule.blocked):
        return "replicated"
    if rule.blocked:
        return "blocked"
    return "reduction" if rule.reductions else "pointwise"


def _collect(module: Any, report: Report) -> None:
    from spmdc.dialects.tensor import TensorOp

    for op in module.walk():
        if not isinstance(op, TensorOp) or op.name == "tensor.constant":
            continue
        label = getattr(op.location, "name", "").rsplit("/", 1)[-1]
        if label.startswith(("aten.", "prims.")):
            report.emitted.setdefault(_as_op_name(label), set()).add(op.name)
        rule = op.sharding_rule()
        types = ", ".join(str(v.type) for v in op.operands)
        res = ", ".join(str(r.type) for r in op.results)
        report.rules.add(f"{op.name} ({types}) -> ({res}) : {rule}")
        report.kinds.setdefault(op.name, set()).add(rule_kind(rule))


def check_samples(samples: Sequence[Sample], *, train: bool, group: int = 24) -> Report:
    """Capture and compare ``samples`` (forward, or the training step with ``train``) in groups
    of ``group``; a failing group is rerun sample by sample to name the failing ops."""
    report = Report()
    todo = [s for s in samples if s.train or not train]
    for k in range(0, len(todo), group):
        chunk = todo[k:k + group]
        try:
            _run_group(chunk, train, report)
        except Exception:   # noqa: BLE001 - find which sample of the group fails
            for s in chunk:
                try:
                    _run_group([s], train, report)
                except Exception as e:   # noqa: BLE001
                    key = s.op if s.op not in report.failures else f"{s.op} #{len(report.failures)}"
                    report.failures[key] = f"{type(e).__name__}: {e}"[:2000]
    return report


def check_reached(samples: Sequence[Sample]) -> dict[str, set[str]]:
    """Samples whose call never dispatches their op: op -> what it dispatched instead."""
    bad = {}
    for s in samples:
        overload(s.op)   # the name must exist
        seen = reached_ops(s)
        if s.op not in seen:
            bad[s.op] = seen
    return bad
