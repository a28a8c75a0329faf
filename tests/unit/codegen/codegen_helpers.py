"""Shared by the codegen tests: random inputs for a function, a fake collectives object,
and running a function both through the interpreter and through generated code."""

from __future__ import annotations

from typing import Any

import torch

from spmdc.codegen.cache import load_program
from spmdc.dialects.shard import chunk_sizes
from spmdc.dialects.tensor.base import torch_dtype
from spmdc.ir.symbols import lookup_symbol
from spmdc.runtime.collectives import STARTS, Collectives, CommStats, CountingComm, Pending
from spmdc.runtime.interpreter import interpret


def random_inputs(func: Any, seed: int = 0) -> list[torch.Tensor]:
    """Floats ~ N(0, 1); integers in [0, 2) so they index any dim of size >= 2; i1 random."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for a in func.args:
        t = a.type
        dt = torch_dtype(t.element_type)
        if t.element_type == "i1":
            out.append(torch.randint(0, 2, t.shape, generator=g).bool())
        elif t.is_float:
            out.append(torch.randn(t.shape, generator=g).to(dt))
        else:
            out.append(torch.randint(0, 2, t.shape, generator=g).to(dt))
    return out


class FakeCollectives(Collectives):
    """Shape-correct, deterministic stand-ins for the collectives; records every call."""

    def __init__(self, sizes: dict[str, int], coords: dict[str, int] | None = None):
        self.sizes = sizes
        self.coords = coords or {}
        self.stats = CommStats()
        self.calls: list[tuple] = []

    def size(self, axis: str) -> int:
        return self.sizes[axis]

    def coord(self, axis: str) -> int:
        return self.coords.get(axis, self.sizes[axis] - 1)

    def _piece(self, x, axis, dim):
        sizes = chunk_sizes(x.shape[dim], self.size(axis))
        i = self.coord(axis)
        return x.narrow(dim, sum(sizes[:i]), sizes[i]).contiguous()

    def _all_to_all_rows(self, packed, send, recv, axis, kind):
        """The expert all_to_all's exchange as if every rank sent what this one does."""
        self.calls.append((kind, tuple(packed.shape), axis, list(send), list(recv)))
        out = packed.new_zeros((sum(recv), packed.shape[1]))
        n = min(out.shape[0], packed.shape[0])
        out[:n] = packed[:n]
        return out

    def all_reduce(self, x, axes, op):
        self.calls.append(("all_reduce", tuple(x.shape), list(axes), op))
        return x * (1 + len(axes))

    def all_slice(self, x, axis, dim):
        self.calls.append(("all_slice", tuple(x.shape), axis, dim))
        return self._piece(x, axis, dim)

    def all_gather(self, x, axis, dim, out_shape):
        self.calls.append(("all_gather", tuple(x.shape), axis, dim, tuple(out_shape)))
        out = x.new_zeros(tuple(out_shape))
        out.narrow(dim, 0, x.shape[dim]).copy_(x)
        return out

    def reduce_scatter(self, x, axis, dim, op):
        self.calls.append(("reduce_scatter", tuple(x.shape), axis, dim, op))
        return self._piece(x, axis, dim) * 2

    def all_gather_bucket(self, xs, axis, dims, out_shapes):
        self.calls.append(("all_gather_bucket", [tuple(x.shape) for x in xs], axis, list(dims)))
        return [self.all_gather(x, axis, d, s) for x, d, s in zip(xs, dims, out_shapes)]

    def reduce_scatter_bucket(self, xs, axis, dims, op):
        self.calls.append(("reduce_scatter_bucket", [tuple(x.shape) for x in xs], axis, list(dims), op))
        return [self.reduce_scatter(x, axis, d, op) for x, d in zip(xs, dims)]

    def all_reduce_bucket(self, xs, axes, op):
        self.calls.append(("all_reduce_bucket", [tuple(x.shape) for x in xs], list(axes), op))
        return [x * (1 + len(axes)) for x in xs]

    def split_all_reduce(self, xs, seq, op):
        self.calls.append(("split_all_reduce", [tuple(x.shape) for x in xs], seq, op))
        return [x * 2 for x in xs]

    def bsr(self, x, seq):   # the samples move a value between same-shaped pieces
        self.calls.append(("bsr", tuple(x.shape), seq))
        return x * 3

    def all_to_all(self, x, axis, split_dim, concat_dim, out_shape):
        self.calls.append(("all_to_all", tuple(x.shape), axis, split_dim, concat_dim, tuple(out_shape)))
        return torch.full(tuple(out_shape), float(x.sum()), dtype=x.dtype)


def _started(kind: str):
    """``kind_start``: the fake ``kind`` run at once (recorded at the start), redeemed by ``wait``."""
    def start(self, *args):
        value = getattr(self, kind)(*args)
        return Pending([], lambda: value)
    return start


for _name in STARTS:
    setattr(FakeCollectives, _name, _started(_name.removesuffix("_start")))


def run_both(module: Any, func_name: str, args: list[Any], sizes: dict[str, int] | None = None,
             coords: dict[str, int] | None = None):
    """(interpreter results, generated-code results, interpreter comm, codegen comm); both runs
    start from the same generator state (random ops draw the same numbers)."""
    ci, cg = FakeCollectives(sizes or {}, coords), FakeCollectives(sizes or {}, coords)
    fn, _ = load_program(module, func_name)
    sus = next((op for op in lookup_symbol(module, func_name).body.ops if op.name == "func.suspend"), None)
    if sus is not None:   # a function that pauses (func.suspend): both halves, resumed with the same values
        from spmdc.runtime.interpreter import Interpreter
        from spmdc.runtime.suspended import Paused

        torch.manual_seed(1)
        values = [torch.randn(r.type.shape, dtype=torch_dtype(r.type.element_type)) for r in sus.results]
        idx = [a.value for a in sus.attributes["results"]]
        runs = []
        for gen in (lambda: Interpreter(CountingComm(ci)).steps(module, func_name, [a.clone() for a in args]),
                    lambda: fn([a.clone() for a in args], CountingComm(cg))):
            torch.manual_seed(0)
            paused = Paused.start(gen(), idx)
            runs.append([paused.early[i] for i in idx] + paused.resume([v.clone() for v in values]))
        return runs[0], runs[1], ci, cg
    torch.manual_seed(0)
    want = interpret(module, [a.clone() for a in args], func=func_name, comm=CountingComm(ci))
    torch.manual_seed(0)
    got = fn([a.clone() for a in args], CountingComm(cg))
    return want, got, ci, cg


def assert_same(want: list[Any], got: list[Any]) -> None:
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, equal_nan=True)
