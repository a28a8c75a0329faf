"""How spmdc compiles and runs a model: the one options object every entry point carries.

    opts = CompileOptions(mixed_precision="bf16", clip_grad_norm=1.0, checkpoint="blocks")
    cm = spmdc.compile(model, (x,), mesh="dp=2,tp=2", plan="fsdp+tp", train=True, options=opts)
    cm = spmdc.compile(model, (x,), mesh="dp=2,tp=2", plan="fsdp+tp", train=True, clip_grad_norm=1.0)  # the same
    opts.passes(rank=3, target="torch")        # the pass pipeline's options for rank 3's program

Every option is declared here once — its default, its validation, its help text and its
``spmdc run`` flag (:meth:`CompileOptions.add_arguments`) — and every layout kind reads it from
here: one mesh, device groups, pipeline stages, eager execution, run-time switching. Keyword
options given to :func:`spmdc.compile`, :func:`spmdc.eager` or
:func:`~spmdc.compiler.driver.compile_global` go through :meth:`CompileOptions.of`, which
refuses an unknown name with its near match:

    >>> CompileOptions.of(clip_grad_nrom=1.0)
    ValueError: spmdc.compile: unknown option 'clip_grad_nrom' (did you mean 'clip_grad_norm'?)

The object is frozen (a compiled module's options never change behind its programs) and
picklable (it travels to the ranks of ``spmdc run`` and with each broadcast program).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from spmdc.compiler.pass_pipeline import RNG_MODES, TARGETS, PipelineOptions
from spmdc.dialects.attrs import checkpoint_every

EXECUTIONS = ("compiled", "eager")
INPUT_MODES = ("global", "local")
OUTPUT_MODES = ("dtensor", "full", "local")
ACTIVATION_MODES = ("saved", "recompute")
SCHEDULES = ("gpipe", "1f1b", "interleaved1f1b", "interleaved")   # (Interleaved1F1B: any case; interleaved: its alias)


def positive(kind: type) -> Any:
    """An argparse type: a number of ``kind`` greater than zero (the option's name comes with the error)."""
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got '{text}'") from None
        if value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text}")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    convert.__name__ = f"positive {kind.__name__}"
    return convert


def checkpoint_mode(text: str) -> str:
    """An argparse type: an activation checkpointing mode, ``blocks`` or ``blocks/K``."""
    try:
        checkpoint_every(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def byte_size(text: str) -> int:
    """An argparse type: bytes, as ``1073741824``, ``512MiB``, ``2GB``, ``64k`` (0: no cap)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 512MiB, 2GB or 1048576, got '{text}'")
    value, unit, suffix = float(m.group(1)), m.group(2).upper(), m.group(3) or ""
    base = 1024 if suffix.lower() == "ib" or (unit and not suffix) else 1000
    return int(value * base ** " KMGT".index(unit or " "))


byte_size.__name__ = "size"


def _opt(default: Any, help: str, flag: str | None = None, **cli: Any) -> Any:
    """A field with its ``spmdc run`` flag (None: Python only) and argparse settings."""
    return field(default=default, metadata={"help": help, "flag": flag, "cli": cli})


class OptionError(ValueError):
    """An option that is unknown or has a value spmdc cannot run."""


@dataclass(frozen=True)
class CompileOptions:
    """How to compile and run (see the module doc). Every field is checked when the object is made."""

    target: str | None = _opt(
        None, "codegen target: aten calls, or fused Triton kernels (default: triton on GPUs, torch on CPUs; on CPU "
        "triton runs in the Triton interpreter)", "--target", choices=TARGETS)
    bucket: bool = _opt(
        True, "one all-gather / reduce-scatter / all-reduce per model block instead of per parameter "
        "(bucket-collectives; --no-bucket: one collective per parameter, for debugging a plan)", "--bucket")
    overlap: bool = _opt(
        True, "issue collectives asynchronously, the next block's all-gather prefetched while this one computes "
        "(schedule-collectives; --no-overlap: each collective synchronously where it is needed)", "--overlap")
    memory_cap: int = _opt(
        0, "per-rank cap on the step's estimated peak memory for prefetching, e.g. 512MiB (default 0: no cap)",
        "--memory-cap", type=byte_size, metavar="SIZE")
    fuse_collectives: bool = _opt(
        True, "per-rank rewrites that defer and merge reductions (fuse-collectives)", "--fuse-collectives")
    in_place: bool = _opt(
        True, "elementwise ops write their result into an operand that dies at them (in-place): a lower peak",
        "--in-place")
    remat: bool = _opt(
        True, "recompute elementwise values that are alive at the step's peak where the backward reads them again "
        "(remat; bitwise the same results, a lower peak for one more elementwise op each)", "--remat")
    mixed_precision: Any = _opt(
        None, "cast each parameter's shard to bf16/fp16 before it is gathered and compute in it; gradients reduced "
        "and parameters, optimizer state kept in float32 (FSDP2's MixedPrecisionPolicy; default none)",
        "--mixed-precision", choices=("bf16", "fp16", "none"))
    rng: str = _opt(
        "eager", "random numbers: 'eager' draws what single-device PyTorch draws (each rank draws whole tensors), "
        "'philox' draws only each rank's piece, the same on any number of ranks but not eager's numbers",
        "--rng", choices=RNG_MODES)
    checkpoint: str | None = _opt(
        None, "activation checkpointing: recompute every repeated block (layers.N) in the backward "
        "(torch.utils.checkpoint calls in the model are kept either way); blocks/K: every K-th block (0, K, 2K, ...)",
        "--checkpoint", type=checkpoint_mode, metavar="blocks|blocks/K")
    clip_grad_norm: float | None = _opt(
        None, "clip gradients to global 2-norm X inside the step (as torch.nn.utils.clip_grad_norm_)",
        "--clip-grad-norm", type=positive(float), metavar="X")
    grad_accum: int = _opt(
        1, "split each batch into N micro-batches; gradients are reduced once per step", "--grad-accum",
        type=positive(int), metavar="N")
    inputs: str = _opt(
        "global", "'global': every rank passes the whole batch; 'local': each rank its own piece, laid out as the "
        "plan's inputs (a DistributedSampler's, num_replicas and rank from spmdc.sampler_args)")
    outputs: str | None = _opt(
        None, "what cm(x) returns: 'dtensor' (global values as DTensors; the default with inputs='global'), "
        "'full' (whole tensors on every rank), 'local' (this rank's batch piece as a plain tensor, its loss its own "
        "and gradients averaged over the pieces as DDP and FSDP2 do; the default with inputs='local')")
    autograd_activations: str = _opt(
        "saved", "cm(x) under autograd: 'saved' runs the forward half of the vjp program and keeps what its backward "
        "reads until loss.backward() (as eager PyTorch and FSDP2 do), 'recompute' runs the forward program and the "
        "whole vjp program in the backward (one more forward; nothing held between forward and backward)")
    vjp_pause: tuple[int, int] | None = _opt(
        None, "set by cm(x) for its vjp program under autograd_activations='saved': (first, count) of the inputs "
        "that are the output gradients; the capture returns the model outputs and each rank's program suspends "
        "before its backward (spmdc.passes.suspend_for_backward)")
    check_inputs: bool = _opt(
        True, "check on each program's first call that the ranks were given consistent batches (one checksum "
        "all-gather; --no-input-check skips it)", "--input-check")
    compile_cache: bool = _opt(
        True, "keep each job's global program and every rank's program on disk under $SPMDC_CACHE_DIR/steps and "
        "load them when the same job compiles again: a second run skips capture and every pass (--no-compile-cache: "
        "always compile)",
        "--compile-cache")
    verify_each: bool = _opt(
        True, "verify the IR after every pass (--no-verify-each: once after each compiler stage; spmdc plan's "
        "default, where verifying a 16k-op program 40 times is a sixth of the dry run)", "--verify-each")
    share_programs: bool = _opt(
        True, "ranks whose per-rank programs are the same (a role: docs/roles.md) share one: its lowest rank "
        "compiles it and sends it to the others (--no-share-programs: every rank compiles its own)",
        "--share-programs")
    execution: str = _opt("compiled", "'compiled' programs, or 'eager': the global program op by op")
    eager_hints: bool = _opt(True, "eager: results take the layouts sharding propagation chose")
    eager_trace: bool = _opt(False, "eager: record each op's layouts and collectives")
    pp_schedule: str | None = _opt(
        None, "pipeline schedule (default: the plan's, else 1f1b); interleaved1f1b (interleaved): the plan's "
        "virtual stages per rank group, 2 by default", "--pp-schedule", choices=SCHEDULES, type=str.lower)
    moe_capacity_factor: float | None = _opt(
        None, "expert parallelism: each rank's expert slot holds F times its even share of the routed tokens; "
        "tokens past it are DROPPED (their expert output is zero), which CHANGES the results against one device "
        "(default: none, dropless: a slot holds every token)", "--moe-capacity-factor", type=positive(float),
        metavar="F")
    microbatches: int | None = _opt(
        None, "micro-batches per step of a pipeline (default: the plan's)", "--microbatches", type=positive(int),
        metavar="N")

    def __post_init__(self) -> None:
        from spmdc.frontend.mixed_precision import MixedPrecision

        def bad(name: str, why: str) -> OptionError:
            return OptionError(f"option {name}={getattr(self, name)!r}: {why}")

        for name in ("bucket", "overlap", "fuse_collectives", "in_place", "remat", "check_inputs", "compile_cache",
                     "eager_hints", "eager_trace", "verify_each", "share_programs"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "expected True or False")
        if isinstance(self.pp_schedule, str):   # (one name: interleaved, Interleaved1F1B -> interleaved1f1b)
            from spmdc.sharding.pipeline_plan import schedule_name

            object.__setattr__(self, "pp_schedule", schedule_name(self.pp_schedule))
        try:
            checkpoint_every(self.checkpoint)
        except ValueError as e:
            raise bad("checkpoint", str(e)) from None
        for name, choices in (("target", TARGETS), ("rng", RNG_MODES),
                              ("inputs", INPUT_MODES), ("execution", EXECUTIONS), ("pp_schedule", SCHEDULES),
                              ("outputs", OUTPUT_MODES), ("autograd_activations", ACTIVATION_MODES)):
            value = getattr(self, name)
            if (value is not None or name in ("rng", "inputs", "execution", "autograd_activations")) \
                    and value not in choices:
                raise bad(name, f"expected one of {', '.join(map(repr, choices))}")
        for name, least in (("memory_cap", 0), ("grad_accum", 1), ("microbatches", 1)):
            value = getattr(self, name)
            if value is None and name == "microbatches":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise bad(name, f"expected an integer >= {least}" + (" (0: no cap)" if name == "memory_cap" else ""))
        pause = self.vjp_pause
        if pause is not None:
            if not (isinstance(pause, (tuple, list)) and len(pause) == 2
                    and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pause)):
                raise bad("vjp_pause", "expected (first, count): two integers >= 0")
            object.__setattr__(self, "vjp_pause", (int(pause[0]), int(pause[1])))
        clip = self.clip_grad_norm
        number = isinstance(clip, (int, float)) and not isinstance(clip, bool)
        if clip is not None and not (number and 0 < clip < float("inf")):
            raise bad("clip_grad_norm", "expected a finite positive number")
        if clip is not None:
            object.__setattr__(self, "clip_grad_norm", float(clip))
        cf = self.moe_capacity_factor
        if cf is not None and not (isinstance(cf, (int, float)) and not isinstance(cf, bool) and 0 < cf < float("inf")):
            raise bad("moe_capacity_factor", "expected a finite positive number (tokens past F times a slot's even "
                      "share are dropped)")
        object.__setattr__(self, "mixed_precision", MixedPrecision.parse(self.mixed_precision))

    # -- making ---------------------------------------------------------------------------------------
    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def of(cls, base: CompileOptions | None = None, where: str = "spmdc.compile", **kw: Any) -> CompileOptions:
        """``base`` (default: the defaults) with the keyword options ``kw`` replaced; an unknown
        name is refused with its near match."""
        names = cls.names()
        for key in kw:
            if key not in names:
                near = difflib.get_close_matches(key, names, n=1)
                raise TypeError(f"{where}: unknown option '{key}'" + (f" (did you mean '{near[0]}'?)" if near else
                                                                      f"; options: {', '.join(names)}"))
        if base is not None and not isinstance(base, CompileOptions):
            raise TypeError(f"{where}: options= takes a spmdc.CompileOptions, got {type(base).__name__}")
        return dataclasses.replace(base, **kw) if base is not None else cls(**kw)

    def replace(self, **kw: Any) -> CompileOptions:
        return CompileOptions.of(self, "CompileOptions.replace", **kw)

    # -- derived --------------------------------------------------------------------------------------
    def resolved_outputs(self) -> str:
        """``outputs``, or the default: this rank's pieces when it passes pieces, else DTensors."""
        return self.outputs or ("local" if self.inputs == "local" else "dtensor")

    def resolved_target(self) -> str:
        """``target``, or the default: Triton on GPUs, aten on CPUs."""
        if self.target is not None:
            return self.target
        import torch

        return "triton" if torch.cuda.is_available() else "torch"

    def passes(self, rank: int, target: str | None = None) -> PipelineOptions:
        """The pass pipeline's options for rank ``rank``'s program (:mod:`spmdc.compiler.pass_pipeline`)."""
        return PipelineOptions(rank=rank, bucket=self.bucket, overlap=self.overlap, memory_cap=self.memory_cap,
                               target=target or self.resolved_target(), rng=self.rng, fuse=self.fuse_collectives,
                               suspend=self.vjp_pause or (), capacity_factor=float(self.moe_capacity_factor or 0.0),
                               in_place=self.in_place, remat=self.remat)

    def changed(self) -> dict[str, Any]:
        """The options that differ from the defaults (for reports and dumps)."""
        default = CompileOptions()
        return {n: getattr(self, n) for n in self.names() if getattr(self, n) != getattr(default, n)}

    def describe(self) -> str:
        ch = self.changed()
        mp = ch.get("mixed_precision")
        if mp is not None:
            ch["mixed_precision"] = mp.name
        return ", ".join(f"{k}={v}" for k, v in ch.items()) or "defaults"

    # -- the command line -----------------------------------------------------------------------------
    @classmethod
    def add_arguments(cls, ap: Any) -> None:
        """``spmdc run``'s flag for every option that has one (bool options: ``--x`` / ``--no-x``)."""
        for f in dataclasses.fields(cls):
            flag = f.metadata["flag"]
            if flag is None:
                continue
            dest = f"opt_{f.name}"
            if isinstance(f.default, bool):   # --x / --no-x
                ap.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=f.default,
                                help=f.metadata["help"] + f" (default {'on' if f.default else 'off'})")
            else:
                default = "none" if f.name == "mixed_precision" else f.default
                ap.add_argument(flag, dest=dest, default=default, help=f.metadata["help"], **f.metadata["cli"])

    @classmethod
    def from_arguments(cls, args: Any, **kw: Any) -> CompileOptions:
        """The options of a parsed command line (``kw``: options the tool sets itself)."""
        values = {}
        for f in dataclasses.fields(cls):
            if f.metadata["flag"] is not None and hasattr(args, f"opt_{f.name}"):
                v = getattr(args, f"opt_{f.name}")
                values[f.name] = None if f.name == "mixed_precision" and v == "none" else v
        return cls(**{**values, **kw})
