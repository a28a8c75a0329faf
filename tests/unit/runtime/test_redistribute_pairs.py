"""Redistribution between every pair of {R, S(d), SS(d, k), RS(d, units), P(sum)} on 4 gloo ranks,
one launch.

Each case is a function whose argument arrives in one layout and is returned in another; the
compiler inserts the redistribution, ranks run it, and each rank's local piece must equal the
piece of the input cut independently here (``torch.chunk`` per part for ``SS``, the listed
units for ``RS``): exact, no tolerance. Sizes are uneven over 4 ranks (pieces 2, 2, 2, 0 and
1, 1, 1, 0; ragged 6, 0, 9, 3 and a whole matrix on rank 1: ranks holding nothing). Each move
issues at most one collective (``SS``/``RS`` <-> ``S`` gathers once and slices).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from spmdc.api.worker import run_steps
from spmdc.compiler.pass_pipeline import PipelineOptions, pipeline_text
from spmdc.compiler.program import CompiledStep
from spmdc.dialects.shard import Partial, RaggedShard, Replicate, Shard, StridedShard
from spmdc.ir.parser import parse_module
from spmdc.ir.printer import print_module
from spmdc.passes.manager import PassManager
from spmdc.passes.registry import parse_pipeline
from spmdc.runtime.launcher import launch
from spmdc.sharding.mesh import Mesh

SHAPE = (6, 18)   # dim 1 = 3 parts of 6 (pieces 2,2,2,0); dim 0 = 2 parts of 3 (1,1,1,0)
PLACEMENTS = {"R": Replicate(), "S(0)": Shard(0), "S(1)": Shard(1), "SS(1, 3)": StridedShard(1, 3),
              "SS(0, 2)": StridedShard(0, 2), "RS(1, [6, 0, 9, 3])": RaggedShard(1, (6, 0, 9, 3)),
              "RS(0, [0, 6, 0, 0])": RaggedShard(0, (0, 6, 0, 0)), "P(sum)": Partial("sum")}
TARGETS = [k for k in PLACEMENTS if k != "P(sum)"]
PAIRS = [(a, b) for a, b in itertools.product(PLACEMENTS, TARGETS) if a != b] + [("P(sum)", "P(sum)")]
MESH2 = Mesh({"dp": 2, "tp": 2})
PAIRS2 = [("[SS(1, 3), S(0)]", "[R, R]"), ("[S(0), R]", "[R, SS(1, 3)]"), ("[P(sum), SS(1, 3)]", "[S(0), R]"),
          ("[SS(1, 3), P(sum)]", "[S(0), SS(1, 3)]"), ("[R, SS(1, 3)]", "[SS(1, 3), R]"),
          ("[RS(0, [6, 0]), S(1)]", "[R, RS(0, [1, 5])]"), ("[P(sum), RS(1, [11, 7])]", "[RS(0, [2, 4]), R]")]


def _step(src: str, dst: str, mesh: Mesh, full: torch.Tensor) -> CompiledStep:
    axes = ", ".join(f'"{a}" = {n}' for a, n in mesh.axes)
    src, dst = (s if s.startswith("[") else f"[{s}]" for s in (src, dst))
    ty = "tensor<6x18xf32>"
    text = f"""shard.mesh @m = <[{axes}]>
func.func @main(%x: {ty} {{shard.sharding = #shard<@m, {src}>}}) -> ({ty} {{shard.sharding = #shard<@m, {dst}>}}) {{
  func.return %x : {ty}
}}"""
    module = parse_module(text, "<pair>")
    PassManager(parse_pipeline(pipeline_text(PipelineOptions(), per_rank=False))).run(module)
    return CompiledStep(print_module(module), mesh, f"{src}->{dst}", [full], ["input:x"], ["output"], [SHAPE], [SHAPE])


def _piece(full: torch.Tensor, layout, mesh: Mesh, rank: int) -> torch.Tensor:
    """The reference cut, written independently of spmdc.sharding.mesh: axes in order, S by
    torch.chunk, SS by torch.chunk of each part, P: the value on coordinate 0, zeros elsewhere."""
    coords = mesh.coords(rank)
    t = full
    for (axis, n), p in zip(mesh.axes, layout):
        c = coords[axis]
        if isinstance(p, Shard):
            pieces = list(t.chunk(n, p.dim))
            t = pieces[c] if c < len(pieces) else t.narrow(p.dim, 0, 0)
        elif isinstance(p, StridedShard):
            parts = t.chunk(p.parts, p.dim)
            chunks = [list(q.chunk(n, p.dim)) for q in parts]
            t = torch.cat([ch[c] if c < len(ch) else q.narrow(p.dim, 0, 0) for ch, q in zip(chunks, parts)], p.dim)
        elif isinstance(p, RaggedShard):
            t = t.narrow(p.dim, sum(p.units[:c]), p.units[c])
        elif isinstance(p, Partial) and c != 0:
            t = torch.zeros_like(t)
    return t


@pytest.fixture(scope="module")
def runs():
    full = torch.arange(float(SHAPE[0] * SHAPE[1])).reshape(SHAPE) - 40.0
    steps = [_step(a, b, Mesh({"tp": 4}), full) for a, b in PAIRS]
    steps += [_step(a, b, MESH2, full) for a, b in PAIRS2]
    return full, launch(run_steps, 4, (steps,))


@pytest.mark.parametrize("i", range(len(PAIRS)), ids=[f"{a}->{b}" for a, b in PAIRS])
def test_pair_on_one_axis(runs, i):
    full, results = runs
    src, dst = PAIRS[i]
    mesh = Mesh({"tp": 4})
    for rank in range(4):
        got = results[rank][i]
        want = _piece(full, (PLACEMENTS[dst],), mesh, rank)
        assert torch.equal(got["local"][0], want), f"rank {rank}: {src} -> {dst}"
        if dst != "P(sum)":
            assert torch.equal(got["outputs"][0], full)
        moved = {k: v for k, v in got["issued"].items() if k != "comm.all_slice"}
        assert sum(moved.values()) <= 1, f"{src} -> {dst} issued {got['issued']}"
        if src.startswith(("S", "P")) and dst != src:   # data must move (or be reduced) once
            assert sum(moved.values()) == 1, f"{src} -> {dst} issued {got['issued']}"


@pytest.mark.parametrize("i", range(len(PAIRS2)), ids=[f"{a}->{b}" for a, b in PAIRS2])
def test_pair_on_two_axes(runs, i):
    full, results = runs
    src, dst = PAIRS2[i]
    from spmdc.sharding.mesh import to_placements

    lay = to_placements(dst, MESH2)
    for rank in range(4):
        got = results[rank][len(PAIRS) + i]
        assert torch.equal(got["local"][0], _piece(full, lay, MESH2, rank)), f"rank {rank}: {src} -> {dst}"
        assert torch.equal(got["outputs"][0], full)
