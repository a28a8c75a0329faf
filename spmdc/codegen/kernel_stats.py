"""Kernels launched per step versus aten ops before fusion (for run summaries and ``spmdc show``).

    stats = kernel_stats(fused_module, before=unfused_module)
    stats.kernels, stats.aten_ops             # e.g. 61, 137

* ``aten_ops``: the ``tensor`` ops of the program as the torch target would call them one by
  one — ops outside regions plus the ops inside each ``kernel.fused`` region (the splat
  constants cloned into regions are literals, not ops).
* ``kernels``: launches per execution: one per ``kernel.fused`` region, plus every ``tensor``
  op left outside that launches a kernel in aten. Ops with the ``View`` trait launch
  nothing (``permute``, ``broadcast``, ``slice``: ``StridedView``s always; a ``reshape`` unless
  its operand is a strided view, then it copies and counts).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from spmdc.ir.core import Operation


@dataclass
class KernelStats:
    aten_ops: int
    kernels: int
    fused_regions: int
    by_kind: dict[str, int] = field(default_factory=dict)   # regions per kind, plus "aten" launches

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        return f"{self.kernels} kernels launched per step for {self.aten_ops} aten ops before fusion ({kinds})"


def launches(op: Operation) -> bool:
    """Whether a ``tensor`` op outside any region launches a kernel under aten."""
    if not op.has_trait("View"):
        return True
    if op.has_trait("StridedView"):
        return False
    src = op.operand(0).defining_op()   # a reshape: a copy when its operand is a strided view
    while src is not None and src.has_trait("View") and not src.has_trait("StridedView"):
        src = src.operand(0).defining_op()
    return src is not None and src.has_trait("StridedView")


def kernel_stats(module: Operation, func_name: str | None = None, before: Operation | None = None) -> KernelStats:
    """Counts over ``@func_name`` (default: every function of ``module``).

    ``before``: the same program before ``fuse-kernels``; its op count is then ``aten_ops``
    exactly (constants the pass cloned into regions included once)."""
    aten = kernels = regions = 0
    kinds: Counter[str] = Counter()
    for f in module.body.ops:
        if f.name != "func.func" or (func_name is not None and getattr(f, "sym_name", None) != func_name):
            continue
        for op in f.body.ops:
            if op.name == "kernel.fused":
                regions += 1
                kernels += 1
                kinds[str(op.attr_value("kind", "elementwise"))] += 1
                aten += sum(1 for o in op.body.ops if o.name.startswith("tensor.") and o.name != "tensor.constant")
            elif op.name.startswith("tensor."):
                aten += 1
                if launches(op):
                    kernels += 1
                    kinds["aten"] += 1
    if before is not None:
        aten = kernel_stats(before, func_name).aten_ops
    return KernelStats(aten, kernels, regions, dict(kinds))
