"""The one pipeline of spmdc: every stage in order, shared by the driver and ``spmdc-opt``.

    prepare    canonicalize,cse(,philox-rng)                 tidy the captured graph; rng=philox:
                                                             counter-based random numbers
    (plan)     spmdc.sharding.apply.apply_plan               the user's layouts as attributes
    global     expert-dispatch,sharding-propagation,         MoE token permutations as expert
               insert-redistribution,lower-redistribution    dispatch (all_to_all under ep);
                                                             every value gets a layout; each
                                                             change becomes collectives
    rank       partition{rank=r},fuse-collectives,           one rank's program: local shapes,
               cse,dce,canonicalize(,fuse-bias-add)          fewer collectives; (target=torch)
                                                             bf16 linear layers as torch.addmm
    bucketing  bucket-collectives                            (bucket=True) one AG/RS per block
    remat      remat                                         (remat=True) elementwise values alive
                                                             at the peak recomputed where reread
    schedule   schedule-collectives{memory-cap=N}(,remat)    (overlap=True) async start/wait,
                                                             prefetch under a memory cap; remat
                                                             again at the peak it moved
    suspend    suspend-for-backward{first=F count=N}         (cm(x)'s vjp program, saved activations)
                                                             pause before the backward
    kernels    fuse-kernels,dce                              (target=triton) Triton regions
    inplace    in-place                                      (in_place=True) elementwise ops
                                                             write into an operand dying at them

The first stages run once on the global program; the rest on each rank's copy. The plan
is not a pass (it takes a Python :class:`~spmdc.sharding.plan.Plan`); in an IR file it is
already in the attributes. ``spmdc-opt -p 'spmd-pipeline{rank=1 bucket target=triton}'``
runs exactly these stages on such a file.
"""

from __future__ import annotations

from dataclasses import dataclass

from spmdc.passes.registry import NamedPipeline, PipelineError

TARGETS = ("torch", "triton")
RNG_MODES = ("eager", "philox")


@dataclass(frozen=True)
class PipelineOptions:
    """``rank``: whose program; ``bucket``: SimpleFSDP bucketing; ``target``: ``torch`` or ``triton``;
    ``overlap``: async collectives reordered for overlap (``schedule-collectives``) under
    ``memory_cap`` bytes per rank (0: no cap); ``rng``: ``eager`` (random numbers bitwise equal
    to single-device PyTorch) or ``philox`` (counter-based: each rank draws only its piece);
    ``fuse``: ``fuse-collectives`` (deferred and merged reductions) on each rank's program;
    ``suspend``: ``(first, count)`` of the inputs that resume a vjp program after its forward half
    (``spmd-pipeline{suspend=[1,1]}``; empty: none); ``capacity_factor``: expert slots of that many
    times their even share of the routed rows, the rest dropped (0: dropless); ``in_place``: elementwise
    ops write into an operand that dies at them (``in-place``); ``remat``: elementwise values alive at
    the peak unread are recomputed where they are read again (``remat``)."""

    rank: int = 0
    bucket: bool = False
    overlap: bool = False
    memory_cap: int = 0
    target: str = "torch"
    rng: str = "eager"
    fuse: bool = True
    suspend: tuple[int, ...] = ()
    capacity_factor: float = 0.0
    in_place: bool = True
    remat: bool = True

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise PipelineError(f"unknown codegen target '{self.target}' (choices: {', '.join(TARGETS)})")
        if self.rng not in RNG_MODES:
            raise PipelineError(f"unknown random-number mode '{self.rng}' (choices: {', '.join(RNG_MODES)})")
        if self.memory_cap < 0:
            raise PipelineError(f"memory-cap must be >= 0 bytes (0: no cap), got {self.memory_cap}")
        if self.capacity_factor < 0:
            raise PipelineError(f"capacity-factor must be >= 0 (0: dropless), got {self.capacity_factor}")
        if len(self.suspend) not in (0, 2):
            raise PipelineError(f"suspend takes two numbers, first,count (the output gradients' inputs), got "
                                f"{list(self.suspend)}")
        object.__setattr__(self, "suspend", tuple(self.suspend))


@dataclass(frozen=True)
class Stage:
    name: str
    passes: str
    per_rank: bool


def stages(options: PipelineOptions = PipelineOptions()) -> list[Stage]:
    """The whole compiler, in order."""
    out = [
        Stage("prepare", "canonicalize,cse" + (",philox-rng" if options.rng == "philox" else ""), per_rank=False),
        Stage("global", ("expert-dispatch" + (f"{{capacity-factor={options.capacity_factor}}}"
                                              if options.capacity_factor else "")
                         + ",sharding-propagation,insert-redistribution,lower-redistribution"), per_rank=False),
        Stage("rank", f"partition{{rank={options.rank}}}," + ("fuse-collectives," if options.fuse else "")
              + "cse,dce,canonicalize" + (",fuse-bias-add" if options.target == "torch" else ""), per_rank=True),
    ]
    if options.bucket:
        out.append(Stage("bucketing", "bucket-collectives", per_rank=True))
    if options.remat:   # (before scheduling: prefetches are kept under the lowered peak)
        out.append(Stage("remat", "remat", per_rank=True))
    if options.overlap:
        keep = "" if options.memory_cap else " keep-peak=true"
        again = ",remat" if options.remat else ""   # (the schedule moves the peak: its values too)
        out.append(Stage("schedule", f"schedule-collectives{{memory-cap={options.memory_cap}{keep}}}{again}",
                         per_rank=True))
    if options.suspend:   # (before fuse-kernels: no region spans the suspension, a barrier to it)
        first, count = options.suspend
        out.append(Stage("suspend", f"suspend-for-backward{{first={first} count={count}}}", per_rank=True))
    if options.target == "triton":
        out.append(Stage("kernels", "fuse-kernels,dce", per_rank=True))
    if options.in_place:
        out.append(Stage("inplace", "in-place", per_rank=True))
    return out


def pipeline_text(options: PipelineOptions, per_rank: bool | None = None) -> str:
    """The passes of every stage (or only the global / per-rank ones) as one pipeline string."""
    return ",".join(s.passes for s in stages(options) if per_rank is None or s.per_rank == per_rank)


SPMD_PIPELINE = NamedPipeline(
    "spmd-pipeline",
    "the whole compiler on a planned module: prepare, global, rank, bucketing, remat, schedule, suspend, "
    "kernels, inplace",
    PipelineOptions, pipeline_text)


def named_pipelines() -> dict[str, NamedPipeline]:
    """Named pipelines for ``spmdc-opt -p``."""
    return {SPMD_PIPELINE.name: SPMD_PIPELINE}
