"""What the compiler hands to ranks: the global program, and one rank's program.

    step = compile_global(model, (x,), mesh=Mesh({"tp": 4}), plan="megatron")   # CompiledStep
    prog = compile_rank(step, rank=1, target="triton")                          # RankProgram
    prog.module        # the IR that runs on rank 1 (after partition ... fuse-kernels)
    prog.source        # the Python/Triton module generated from it, as loaded
    prog.fn(args, comm)

A :class:`CompiledStep` holds the global program as text (ranks parse their own copy, so
it travels between processes as a small picklable object) and the per-argument facts a
rank needs: kinds (``param:<fqn>`` / ``input:<name>``), global shapes, buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spmdc.compiler.options import CompileOptions
from spmdc.dialects.shard import Placement
from spmdc.ir.core import Operation
from spmdc.sharding.mesh import Mesh

Layout = tuple[Placement, ...]


@dataclass
class CompiledStep:
    """A captured program laid out over a mesh, after the global stages."""

    global_ir: str
    mesh: Mesh
    plan_name: str
    arguments: list[Any]             # single-device argument values of @main, in order
    arg_kinds: list[str]             # "param:<fqn>" or "input:<name>"
    result_kinds: list[str]          # "loss" | "grad:<fqn>" | "output"
    arg_shapes: list[tuple[int, ...]] = field(default_factory=list)   # global shapes
    res_shapes: list[tuple[int, ...]] = field(default_factory=list)
    buffers: set[int] = field(default_factory=set)                   # arguments that are buffers
    timings: dict[str, float] = field(default_factory=dict)
    options: CompileOptions = field(default_factory=CompileOptions)   # what it was compiled with; the per-rank
    #                                  stages read theirs from it (bucketing, overlap, memory cap, fused reductions)
    propagated_ir: str = ""          # the program after sharding-propagation (eager=True): what spmdc.eager runs
    name: str = "forward"            # "forward" or "train": names the dumps
    output_tree: Any = None          # a forward program: the model output's structure (its results are the leaves)

    def rank_module(self, rank: int, target: str = "torch") -> Operation:
        """Rank ``rank``'s program as IR (the per-rank stages, no code generation)."""
        from spmdc.compiler.driver import rank_module

        return rank_module(self, rank, target)


@dataclass
class RankProgram:
    """One rank's program: its IR, the code generated from it and how to call it."""

    step: CompiledStep
    rank: int
    target: str
    module: Operation
    source: str
    source_path: Path
    fn: Callable[[list[Any], Any], list[Any]]
    arg_layouts: list[Layout]
    res_layouts: list[Layout]
    kernel_stats: Any = None          # spmdc.codegen.kernel_stats.KernelStats for target "triton"

    @property
    def peak_bytes(self) -> int:
        """Peak bytes the program allocates beyond its arguments (static liveness estimate,
        :mod:`spmdc.passes.memory`): what activation checkpointing lowers."""
        from spmdc.passes.memory import peak_bytes

        return peak_bytes(self.module)

    @property
    def step_peak_bytes(self) -> int:
        """:attr:`peak_bytes` with the collectives' staging buffers while they run (packed buckets,
        receive and transfer buffers: :func:`spmdc.passes.memory.step_peak_bytes`): the estimate a
        measured peak is compared with."""
        from spmdc.passes.memory import step_peak_bytes

        return step_peak_bytes(self.module)

    @property
    def comm_ops(self) -> dict[str, int]:
        """Collective ops in the program, by name (what one call issues; a ``comm.*_start`` counts
        as its collective, ``comm.wait`` not at all)."""
        from spmdc.dialects.comm import collective_kind

        counts: dict[str, int] = {}
        for op in self.module.walk():
            kind = collective_kind(op)
            if kind is not None:
                counts[kind] = counts.get(kind, 0) + 1
        return counts
