"""``philox-rng``: switch a function's random ops to counter mode (Philox keyed by a per-run seed).

Eager-mode ``tensor.random`` ops reproduce single-device PyTorch by drawing every global
tensor on every rank. After this pass each rank draws only its piece: the function starts
with one ``tensor.rng_seed`` (one draw from torch's generator per run, equal on all ranks)
and every random op takes it as its key, with ``stream`` = its position among the
function's random ops (see :mod:`spmdc.dialects.tensor.random`).

Before::

    %m = tensor.random {distribution = "bernoulli", p = 0.9} : tensor<8x16xf32>
    %n = tensor.random {distribution = "normal", mean = 0.0, std = 1.0} : tensor<8xf32>

After::

    %seed = tensor.rng_seed : tensor<i64>
    %m = tensor.random %seed {distribution = "bernoulli", p = 0.9, stream = 0} : (tensor<i64>) -> tensor<8x16xf32>
    %n = tensor.random %seed {distribution = "normal", mean = 0.0, std = 1.0, stream = 1}
           : (tensor<i64>) -> tensor<8xf32>

Functions without random ops are left alone; running the pass twice changes nothing. Run it
before ``partition`` (it is part of the ``prepare`` stage with ``rng=philox``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spmdc.dialects.attrs import RANK_ATTR
from spmdc.dialects.func import FuncOp
from spmdc.dialects.tensor import RandomOp, RngSeedOp
from spmdc.ir.attributes import IntegerAttr
from spmdc.ir.core import Operation
from spmdc.ir.rewriter import Builder, Rewriter
from spmdc.passes.pass_base import ModulePass


def convert_function(func: FuncOp) -> int:
    """Give the eager-mode random ops of ``func`` a seed and streams; returns how many."""
    eager = [op for op in func.walk() if isinstance(op, RandomOp) and not op.is_counter_based]
    if not eager:
        return 0
    if RANK_ATTR in func.attributes:
        raise func.emit_error("philox-rng must run before partition (random ops already hold rank pieces)")
    streams = [op.attributes["stream"].value for op in func.walk()  # type: ignore[attr-defined]
               if isinstance(op, RandomOp) and op.is_counter_based]
    seeds = [op for op in func.body.ops if isinstance(op, RngSeedOp)]
    first = func.body.ops[0]
    if seeds:
        seed = seeds[0].result
    else:
        seed = Builder.before(first).create(RngSeedOp, [], location=func.location).result
        seed.name_hint = "seed"
    rewriter = Rewriter()
    next_stream = max(streams, default=-1) + 1
    for op in eager:
        attrs = dict(op.attributes)
        attrs["stream"] = IntegerAttr(next_stream)
        next_stream += 1
        new = Builder.before(op).create(RandomOp, [seed], attrs, [op.result.type], location=op.location)
        rewriter.replace_op(op, new.results)
    return len(eager)


@dataclass
class PhiloxRng(ModulePass):
    """Counter-based random numbers: each rank draws only its piece (not eager's numbers)."""

    name: ClassVar[str] = "philox-rng"

    def run(self, module: Operation) -> None:
        for op in module.body.ops:
            if isinstance(op, FuncOp):
                convert_function(op)


PASS = PhiloxRng
