"""``spmdc run``: compile a workload for a mesh and plan, run it on ranks, report.

    spmdc run                                   # gpt2-tiny training, 4 ranks, dp=2,tp=2, fsdp+tp
    spmdc run mlp --plan megatron --mesh tp=2 --nproc 2 --steps 3 --check
    torchrun --nproc-per-node 4 -m spmdc.tools.cli run ...    # multi-node: torchrun starts the ranks

Ranks are started with torch's elastic launcher (what torchrun uses), or, when this
process already is a rank (RANK/WORLD_SIZE set by torchrun), it runs as that rank.
Everything that can be checked without ranks (workload, mesh, plan, dump directories) is
checked first; a failing rank ends every rank with its message (see docs/cli.md).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from typing import Any

from spmdc.compiler.options import CompileOptions, byte_size, positive  # noqa: F401
from spmdc.runtime.optimizers import OPTIMIZERS
from spmdc.tools.errors import UserError
from spmdc.tools.search_cmd import add_budget_argument

DEFAULT_WORKLOAD = "gpt2-tiny"


@dataclass
class RunConfig:
    workload: str = DEFAULT_WORKLOAD
    nproc: int = 4
    mesh: str | None = None   # None: not given ("" is given, and refused)
    plan: str = ""
    steps: int = 3
    train: bool = True
    check: bool = False
    optimizer: str = "sgd"
    lr: float = 0.05
    dump_ir: str | None = None
    dump_codegen: str | None = None
    timeout: float = 300.0
    force: bool = False
    verbose: bool = False
    seed: int = 0
    save: str | None = None
    load: str | None = None
    rtol: float | None = None
    atol: float | None = None
    fsdp_shard: str = "even"
    eager_trace: str | None = None
    batch: int | None = None
    switch: list[str] = field(default_factory=list)
    peak_flops: float | None = None   # --peak-flops: FLOP/s per device, for MFU
    device_peak: str | None = None    # --device-peak NAME: the peak of a known device
    extra: dict[str, Any] = field(default_factory=dict)
    search_budget: float | None = None   # --plan auto: seconds for the search (None: spmdc.tools.search_cmd's)
    options: CompileOptions = field(default_factory=CompileOptions)   # how to compile and run (--bucket, ...)

    @property
    def eager(self) -> bool:
        return self.options.execution == "eager"

    @property
    def mixed_precision(self) -> str | None:
        """The policy's short name (bf16, fp16), as --mixed-precision gives it."""
        mp = self.options.mixed_precision
        return None if mp is None else {"bfloat16": "bf16", "float16": "fp16"}.get(mp.name, mp.name)

    @property
    def tolerances(self) -> tuple[float, float]:
        """--check's (rtol, atol): 1e-4 / 1e-5, or 2e-2 / 1e-3 under --mixed-precision (the
        reference computes in the same low precision, but in another order)."""
        return self.tolerances_for(self.mixed_precision is not None)

    def tolerances_for(self, low: bool) -> tuple[float, float]:
        """--check's (rtol, atol) for a run trained in low precision (``low``: this run's policy, or a
        resumed run's history trained under one) or not; the user's --rtol/--atol win."""
        return (self.rtol if self.rtol is not None else (2e-2 if low else 1e-4),
                self.atol if self.atol is not None else (1e-3 if low else 1e-5))

    @property
    def settings(self) -> Any:
        from spmdc.tools.reference import TrainSettings

        o = self.options
        return TrainSettings(self.optimizer, self.lr, o.clip_grad_norm, o.grad_accum, self.mixed_precision,
                             self.batch)




def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("workload", nargs="?", default=DEFAULT_WORKLOAD,
                    help="mlp | gpt2-tiny | llama-tiny | path/to/file.py:factory | module:factory")
    ap.add_argument("--nproc", type=positive(int), default=None, help="ranks to start (default: the mesh size, or 4)")
    ap.add_argument("--mesh", default=None, help="mesh axes, e.g. dp=2,tp=2 (default: dp=2,tp=2 for 4 ranks, "
                                               "else dp=N)")
    ap.add_argument("--plan", default="", help="preset (dp, fsdp, hsdp, megatron, sp, fsdp+tp, ep, fsdp+ep, "
                                               "fsdp+tp+ep), a .json/.yaml plan, or 'auto': search the layouts "
                                               "for --nproc ranks (--mesh: that mesh's) and run the best")
    add_budget_argument(ap)
    ap.add_argument("--fsdp-shard", choices=("even", "whole"), default="even",
                    help="how fsdp/hsdp cut parameters over dp: 'even' S(0) rows (FSDP2), or 'whole': each "
                         "parameter whole on one dp rank, balanced by bytes per block (RaggedShard; a per-matrix "
                         "optimizer such as --optimizer muon then runs without gathering; default even)")
    ap.add_argument("--steps", type=positive(int), default=3, help="training steps (default 3)")
    ap.add_argument("--batch", type=positive(int), default=None,
                    help="build the workload with this batch size (its factory's 'batch' argument; default: the "
                         "factory's, or a heterogeneous plan's 'batch')")
    ap.add_argument("--switch", action="append", default=[], metavar="STEP:PLAN[:MESH]",
                    help="after STEP steps, move the training state to PLAN (a preset or plan file) on MESH with one "
                         "batched send/recv and go on; a smaller MESH drops the last ranks (repeatable)")
    ap.add_argument("--train", dest="train", action="store_true", default=True,
                    help="run training steps (forward, backward, optimizer) — the default")
    ap.add_argument("--forward", dest="train", action="store_false", help="run the forward only")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd", metavar="NAME",
                    help=f"a torch.optim class by name: {', '.join(OPTIMIZERS)} (default sgd)")
    ap.add_argument("--lr", type=positive(float), default=0.05)
    ap.add_argument("--save", default=None, metavar="DIR",
                    help="after the steps, save parameters, optimizer state and step (torch.distributed.checkpoint)")
    ap.add_argument("--load", default=None, metavar="DIR",
                    help="resume from a checkpoint of --save, saved under any plan, mesh or rank count")
    ap.add_argument("--rtol", type=positive(float), default=None,
                    help="--check's relative tolerance (default 1e-4; 2e-2 with --mixed-precision)")
    ap.add_argument("--atol", type=positive(float), default=None,
                    help="--check's absolute tolerance (default 1e-5; 1e-3 with --mixed-precision)")
    ap.add_argument("--check", action="store_true",
                    help="also run one device in eager PyTorch and compare; exit 1 when over tolerance")
    ap.add_argument("--dump-ir", default=None, metavar="DIR",
                    help="write the IR after every pass, as compiled and run: "
                         "DIR/<train|forward>/global/, .../rank<r>/")
    ap.add_argument("--dump-codegen", default=None, metavar="DIR",
                    help="write the module each rank loaded (Python; Triton kernels with --target triton): "
                         "DIR/<train|forward>/rank<r>.py")
    ap.add_argument("--force", action="store_true", help="let --dump-ir/--dump-codegen write into a non-empty DIR")
    ap.add_argument("--timeout", type=positive(float), default=300.0,
                    help="seconds before a stuck collective or rendezvous fails the run (default 300)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of torch's generator before the first step, on every rank and in --check's "
                         "eager run (dropout masks, random ops; default 0)")
    ap.add_argument("--eager", action="store_true",
                    help="run the sharded global program op by op, each op dispatched at run time (spmdc.eager: "
                         "for stepping through a plan; bitwise equal to the compiled program without bucketing, "
                         "overlap and fused reductions)")
    ap.add_argument("--eager-trace", default=None, metavar="FILE",
                    help="with --eager: write rank 0's last step to FILE, one line per op: layouts in -> out and "
                         "the collectives it issued")
    ap.add_argument("--peak-flops", type=positive(float), default=None, metavar="FLOPS",
                    help="peak FLOP/s of one device (e.g. 989e12), for the MFU column (default: $SPMDC_PEAK_FLOPS, "
                         "else the GPU's entry in spmdc.api.metrics.DEVICE_PEAKS; none on a CPU)")
    ap.add_argument("--device-peak", default=None, metavar="NAME",
                    help="the MFU column against a known device's bf16 dense peak: h100 (SXM), h100-pcie, h100-nvl, "
                         "h200, a100 (80GB), a100-40gb, l4, mi300x, cpu (a rough guess)")
    CompileOptions.add_arguments(ap)   # every compile option's flag, declared with the option
    ap.add_argument("--verbose", action="store_true",
                    help="show every rank's stderr and Python tracebacks (else a failed run writes them to a log)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    eager = {"execution": "eager", "eager_trace": bool(args.eager_trace), "bucket": False, "overlap": False,
             "fuse_collectives": False} if args.eager else {}
    return RunConfig(args.workload, args.nproc or 0, args.mesh, args.plan, args.steps, args.train, args.check,
                     args.optimizer, args.lr, args.dump_ir, args.dump_codegen, args.timeout,
                     force=args.force, verbose=args.verbose, seed=args.seed, save=args.save, load=args.load,
                     rtol=args.rtol, atol=args.atol, fsdp_shard=args.fsdp_shard, eager_trace=args.eager_trace,
                     batch=args.batch, switch=list(args.switch), peak_flops=args.peak_flops,
                     device_peak=args.device_peak, search_budget=args.search_budget,
                     options=CompileOptions.from_arguments(args, **eager))


def resolve_mesh_and_plan(cfg: RunConfig) -> tuple[Any, Any]:
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.mesh import Mesh
    from spmdc.sharding.pipeline_plan import PipelinePlan
    from spmdc.sharding.plan import Plan

    if cfg.search_budget is not None and cfg.plan != "auto":
        raise UserError("--search-budget is for --plan auto / --search (the layout search)")
    if cfg.plan == "auto":   # the layout search (spmdc.tools.search_cmd), then as if it had been given
        from spmdc.tools.search_cmd import search_for_run
        from spmdc.tools.show import plain_console

        chosen = search_for_run(cfg, plain_console())
        mesh, plan = chosen.plan()
        cfg.mesh, cfg.nproc = chosen.mesh_text, (plan.mesh if mesh is None else mesh).size
        cfg.plan = chosen.label()
        return resolve_pipeline(cfg, plan) if mesh is None else (mesh, plan)
    loaded = Plan.load(cfg.plan) if cfg.plan.endswith((".json", ".yaml", ".yml")) else None
    if isinstance(loaded, Plan) and loaded.mesh is not None:   # the plan file's own mesh
        try:
            given = str(Mesh.parse(cfg.mesh)) if cfg.mesh is not None else None
        except ValueError as e:
            raise UserError(f"--mesh: {e}") from None
        if given is not None and given != loaded.mesh:
            raise UserError(f"--mesh {cfg.mesh}: plan '{cfg.plan}' is for mesh {loaded.mesh} (its 'mesh' key); "
                            "drop --mesh or edit the file")
        cfg.mesh = loaded.mesh
    pp_mesh = _pp_mesh(cfg)
    if pp_mesh is not None:
        return resolve_pp_mesh(cfg, pp_mesh, loaded)
    if isinstance(loaded, PipelinePlan):
        return resolve_pipeline(cfg, loaded)
    if cfg.options.pp_schedule or cfg.options.microbatches:
        option = "--pp-schedule" if cfg.options.pp_schedule else "--microbatches"
        raise UserError(f"{option} is for a pipeline plan (a plan file with 'stages', or --mesh with a 'pp' axis; "
                        "see docs/plans.md); "
                        f"plan '{cfg.plan or 'default'}' has none" + ("" if cfg.options.pp_schedule else
                                                                     " (micro-batches of one plan: --grad-accum)"))
    if isinstance(loaded, HeteroPlan):
        return resolve_hetero(cfg, loaded)
    try:
        if cfg.mesh is not None:
            mesh = Mesh.parse(cfg.mesh)
        else:
            n = cfg.nproc or 4
            mesh = Mesh({"dp": 2, "tp": n // 2}) if n % 2 == 0 and n >= 4 else Mesh({"dp": n})
    except ValueError as e:
        raise UserError(f"--mesh: {e}") from None
    if not cfg.nproc:
        cfg.nproc = mesh.size
    if mesh.size != cfg.nproc:
        raise UserError(f"mesh {mesh} has {mesh.size} devices but --nproc is {cfg.nproc}")
    plan: Any = cfg.plan or _default_plan(mesh)
    if isinstance(plan, str) and plan.endswith((".json", ".yaml", ".yml")):
        plan = Plan.load(plan)
    if cfg.fsdp_shard != "even":
        from spmdc.sharding.plan import PlanError, check_fsdp_shard

        base = plan.preset if isinstance(plan, Plan) else plan
        try:
            check_fsdp_shard(cfg.fsdp_shard, base)
        except PlanError as e:
            raise UserError(f"--fsdp-shard {cfg.fsdp_shard}: {e}") from None
        if isinstance(plan, Plan):
            plan.fsdp_shard = cfg.fsdp_shard
        else:
            plan = Plan(name=plan, preset=plan, fsdp_shard=cfg.fsdp_shard, reshard_after_forward="blocks")
    return mesh, plan


def _default_plan(mesh: Any) -> str:
    """The preset for a mesh without --plan, by its axes other than ``pp``: fsdp+tp on dp × tp, hsdp
    on rep × dp, megatron on tp, dp when only ``pp`` is left (each stage one rank), else fsdp."""
    names = tuple(a for a in mesh.axis_names if a != "pp")
    if set(names) == {"dp", "tp"}:
        return "fsdp+tp"
    if set(names) == {"rep", "dp"}:
        return "hsdp"
    return "megatron" if names == ("tp",) else "dp" if not names else "fsdp"


def _pp_mesh(cfg: RunConfig) -> Any:
    """``--mesh`` when it has a ``pp`` axis of size 2 or more (pipeline stages), else None."""
    from spmdc.sharding.mesh import Mesh
    from spmdc.sharding.pipeline_plan import PP_AXIS

    if cfg.mesh is None:
        return None
    try:
        mesh = Mesh.parse(cfg.mesh)
    except ValueError as e:
        raise UserError(f"--mesh: {e}") from None
    return mesh if PP_AXIS in mesh.axis_names and mesh.axis_size(PP_AXIS) > 1 else None


def resolve_pp_mesh(cfg: RunConfig, mesh: Any, loaded: Any) -> tuple[Any, Any]:
    """``--mesh`` with a ``pp`` axis: pipeline stages, stage k the ranks whose pp coordinate is k, each
    running ``--plan`` (default: by the other axes) on the other axes; the ranks are the mesh's."""
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.pipeline_plan import PipelinePlan
    from spmdc.sharding.plan import PlanError

    if isinstance(loaded, (PipelinePlan, HeteroPlan)):
        what = "pipeline stages" if isinstance(loaded, PipelinePlan) else "device groups"
        raise UserError(f"--mesh {cfg.mesh} has a 'pp' axis, which cuts the job into pipeline stages, but plan "
                        f"'{cfg.plan}' has {what} with their own meshes; give a one-mesh preset with the pp axis, "
                        "or drop --mesh")
    if cfg.nproc and cfg.nproc != mesh.size:
        raise UserError(f"mesh {mesh} has {mesh.size} devices but --nproc is {cfg.nproc}")
    cfg.nproc = mesh.size
    try:
        built = PipelinePlan.from_mesh(mesh, loaded if loaded is not None else cfg.plan or _default_plan(mesh))
    except PlanError as e:
        raise UserError(str(e)) from None
    return resolve_pipeline(cfg, built)


def _own_meshes(cfg: RunConfig, plan: Any, what: str, parts: str) -> None:
    """A plan whose groups or stages have their own meshes: no --mesh, --nproc is theirs."""
    if cfg.mesh is not None and getattr(plan, "mesh", None) is None:   # not cut from --mesh's pp axis
        raise UserError(f"--mesh {cfg.mesh}: plan '{cfg.plan}' has {what} with their own meshes "
                        f"({plan.describe()}); drop --mesh")
    if cfg.nproc and cfg.nproc != plan.world:
        raise UserError(f"--nproc {cfg.nproc}: plan '{cfg.plan}' has {plan.world} ranks in its {parts}")
    cfg.nproc = plan.world


def resolve_hetero(cfg: RunConfig, plan: Any) -> tuple[Any, Any]:
    """A plan with device groups: the ranks are its groups', each group's mesh its own."""
    _own_meshes(cfg, plan, "device groups", "groups")
    for option, bad in (("--eager", cfg.eager), ("--fsdp-shard", cfg.fsdp_shard != "even"),
                        ("--forward (device groups train)", not cfg.train)):
        if bad:
            raise UserError(f"{option} is not supported with a heterogeneous plan (device groups) yet")
    return None, _presets_checked(cfg, plan)


def _presets_checked(cfg: RunConfig, plan: Any) -> Any:
    """Each group's or stage's preset fits its mesh; the plan's ``batch`` unless ``--batch``."""
    from spmdc.sharding.plan import PlanError

    try:
        plan.check_presets()
    except PlanError as e:
        raise UserError(f"plan '{cfg.plan}': {e}") from None
    if cfg.batch is None and plan.batch is not None:
        cfg.batch = plan.batch
    return plan


def resolve_pipeline(cfg: RunConfig, plan: Any) -> tuple[Any, Any]:
    """A plan with pipeline stages: the ranks are its stages', ``--pp-schedule``/``--microbatches``
    override the plan's."""
    from spmdc.sharding.plan import PlanError

    _own_meshes(cfg, plan, "pipeline stages", "stages")
    for option, bad in (("--eager", cfg.eager), ("--fsdp-shard", cfg.fsdp_shard != "even"),
                        ("--rng philox", cfg.options.rng != "eager"),
                        ("--forward (a pipeline trains)", not cfg.train)):
        if bad:
            raise UserError(f"{option} is not supported with a pipeline plan yet")
    try:
        plan = plan.with_schedule(cfg.options.pp_schedule, cfg.options.microbatches)
    except PlanError as e:
        raise UserError(f"plan '{cfg.plan}': {e}") from None
    return None, _presets_checked(cfg, plan)


def reference_settings(cfg: RunConfig, plan: Any) -> Any:
    """What ``--check``'s single-device run replays: the run's settings; for a pipeline plan over
    the pipeline's micro-batches (``--grad-accum`` rounds x the plan's micro-batches, each loss
    divided by their number: the whole batch's loss for a mean loss, and under --mixed-precision
    the same low-precision rounding per micro-batch)."""
    import dataclasses

    from spmdc.sharding.pipeline_plan import PipelinePlan

    if not isinstance(plan, PipelinePlan):
        return cfg.settings
    return dataclasses.replace(cfg.settings, grad_accum=cfg.options.grad_accum * plan.microbatches)


def check_pipeline(cfg: RunConfig, plan: Any) -> None:
    """A pipeline plan's modules name modules of the model and its micro-batches divide the batch."""
    from spmdc.frontend.stages import StageError, expand_pattern
    from spmdc.frontend.workloads import load_workload
    from spmdc.runtime.optimizers import pipeline_refusal

    why = pipeline_refusal(plan.stages, cfg.optimizer) if cfg.train else None
    if why:
        raise UserError(f"--optimizer {cfg.optimizer} with pipeline plan '{plan.name}': {why}")
    w = load_workload(cfg.workload, **workload_args(cfg))
    names = [n for n, _ in w.model.named_modules() if n]
    for k, s in enumerate(plan.stages):
        for pat in s.modules or ():
            try:
                found = expand_pattern(pat, names)
            except StageError as e:
                raise UserError(f"plan '{cfg.plan}', stage {k} ({s.name}): {e}") from None
            if not found:
                import difflib

                near = difflib.get_close_matches(pat, names, n=3)
                raise UserError(f"plan '{cfg.plan}', stage {k} ({s.name}): workload '{cfg.workload}' has no module "
                                f"'{pat}'" + (f" (did you mean {', '.join(repr(x) for x in near)}?)" if near else ""))
    n = plan.microbatches * cfg.options.grad_accum   # --grad-accum rounds of the schedule, each over its micro-batches
    for i, t in enumerate((*w.inputs, *w.loss_inputs, *w.kwargs.values())):
        if getattr(t, "dim", lambda: 0)() == 0 or t.shape[0] % n:
            raise UserError(f"{plan.microbatches} micro-batches" + (f" x {cfg.options.grad_accum} rounds (--grad-accum)"
                                                                    if cfg.options.grad_accum > 1 else "")
                            + f" split every input along dim 0, but input #{i} of workload '{cfg.workload}' has "
                            f"shape {tuple(t.shape)} (--microbatches, or --batch)")
    from spmdc.sharding.plan import PlanError

    try:   # (each round of --grad-accum takes its share of the batch)
        plan.check_batch([(t.shape[0] // cfg.options.grad_accum, *t.shape[1:])
                          for t in (*w.inputs, *w.loss_inputs, *w.kwargs.values())])
    except PlanError as e:
        raise UserError(f"workload '{cfg.workload}': {e} (--batch, --microbatches)") from None


def parse_switches(cfg: RunConfig, mesh: Any, plan: Any) -> list[dict[str, Any]]:
    """``--switch STEP:PLAN[:MESH]`` options, checked before ranks start."""
    from spmdc.sharding.device_groups import HeteroPlan
    from spmdc.sharding.mesh import Mesh
    from spmdc.sharding.pipeline_plan import PipelinePlan
    from spmdc.sharding.plan import Plan, PlanError, preset

    out: list[dict[str, Any]] = []
    if cfg.switch and not cfg.train:   # (with --eager the run stays eager: the new plan op by op too)
        raise UserError("--switch moves training state: drop --forward")
    size = mesh.size if mesh is not None else plan.world if isinstance(plan, (HeteroPlan, PipelinePlan)) else 0
    last = 0
    for text in cfg.switch:
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[0].strip().isdigit():
            raise UserError(f"--switch '{text}': expected STEP:PLAN[:MESH], e.g. 2:megatron:tp=4")
        step, name = int(parts[0]), parts[1].strip()
        if not 1 <= step < cfg.steps or step <= last:
            raise UserError(f"--switch '{text}': STEP must be after the previous switch and in 1..{cfg.steps - 1} "
                            f"(the run has --steps {cfg.steps})")
        last = step
        try:
            new_plan: Any = Plan.load(name) if name.endswith((".json", ".yaml", ".yml")) else name
        except PlanError as e:
            raise UserError(f"--switch '{text}': {e}") from None
        if cfg.eager and isinstance(new_plan, (PipelinePlan, HeteroPlan)):
            raise UserError(f"--switch '{text}': --eager runs one mesh's global program op by op; pipeline stages "
                            "and device groups have no eager mode: switch to a one-mesh plan")
        new_mesh = None
        if isinstance(new_plan, PipelinePlan):
            if len(parts) == 3:
                raise UserError(f"--switch '{text}': pipeline plan '{name}' has its own stage meshes; drop ':MESH'")
            if new_plan.world != size:
                raise UserError(f"--switch '{text}': pipeline plan '{name}' has {new_plan.world} ranks, the run {size}")
            new_plan = new_plan.with_schedule(cfg.options.pp_schedule, cfg.options.microbatches)
            check_pipeline(cfg, new_plan)
        elif isinstance(new_plan, HeteroPlan):
            if len(parts) == 3:
                raise UserError(f"--switch '{text}': plan '{name}' has device groups with their own meshes; "
                                "drop ':MESH'")
            if new_plan.world != size:
                raise UserError(f"--switch '{text}': plan '{name}' has {new_plan.world} ranks in its groups, the run "
                                f"{size}")
            try:
                new_plan.check_presets()
            except PlanError as e:
                raise UserError(f"--switch '{text}': {e}") from None
        else:
            if len(parts) == 2 and mesh is None:
                raise UserError(f"--switch '{text}': this run's plan has device groups or stages; give the new mesh "
                                f"(STEP:PLAN:MESH, e.g. {step}:fsdp:dp={size})")
            try:
                new_mesh = Mesh.parse(parts[2]) if len(parts) == 3 else Mesh.parse(str(mesh))
            except ValueError as e:
                raise UserError(f"--switch '{text}': mesh: {e}") from None
            if new_mesh.size > size:
                raise UserError(f"--switch '{text}': mesh {new_mesh} has {new_mesh.size} devices but the job has "
                                f"{size} ranks (a switch can drop ranks, not add them)")
            base = new_plan if isinstance(new_plan, str) else new_plan.preset
            try:
                if base:
                    preset(base, new_mesh, {})
                _check_axes_of(new_mesh, new_plan, name, *_shapes(cfg))   # no rank of the new mesh repeats another
            except PlanError as e:
                raise UserError(f"--switch '{text}': {e}") from None
        out.append({"step": step, "plan": new_plan, "mesh": new_mesh, "text": name + (f" on {new_mesh}"
                                                                                        if new_mesh else "")})
    return out


def workload_args(cfg: RunConfig) -> dict[str, Any]:
    """Keyword arguments for the workload's factory (``--batch``)."""
    return {"batch": cfg.batch} if cfg.batch is not None else {}


def check_dump_dir(path: str | None, option: str, force: bool) -> None:
    """A dump directory must be a directory (created if missing) and empty unless ``--force``."""
    if path is None:
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{option} '{path}' exists and is not a directory")
    if os.path.isdir(path) and os.listdir(path) and not force:
        raise UserError(f"{option} '{path}' is not empty; spmdc would overwrite what is there "
                        "(give an empty or new directory, or --force)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UserError(f"{option} '{path}': cannot create it: {e.strerror or e}") from None


def check_writable(path: str, option: str) -> None:
    """``path`` (an existing directory) and the directory holding it take new files (a save is
    written beside ``path``, then renamed into place): probed by creating one in each, since
    permission bits do not tell (root ignores them; a read-only mount does not)."""
    import tempfile

    parent = os.path.dirname(os.path.abspath(path))
    for where in (path, parent):
        try:
            fd, probe = tempfile.mkstemp(prefix=".spmdc-write-probe-", dir=where)
        except OSError as e:
            what = f"'{path}'" if where == path else f"'{path}': its directory '{parent}'"
            raise UserError(f"{option} {what} is not writable: {e.strerror or e} (the save comes after the "
                            "steps; give a directory you can write)") from None
        os.close(fd)
        os.remove(probe)


def check_layouts_up_front(cfg: RunConfig, mesh: Any, plan: Any) -> None:
    """Before ranks start: a custom plan's parameter patterns match parameters of the workload, and
    every mesh axis is used by some layout of the plan, else its ranks would repeat each other's
    work (compiling checks the same on the planned program). Pipeline stages hold parts of the
    model: they are checked when each stage compiles, except stages cut by --mesh's ``pp`` axis (the
    axis the stages use), which all run one plan on the other axes: that is checked here, once; device
    groups are not checked yet."""
    from spmdc.sharding.pipeline_plan import PipelinePlan
    from spmdc.sharding.plan import Plan, PlanError

    where = ""
    if isinstance(plan, PipelinePlan) and plan.mesh is not None:
        where = f"each pipeline stage of mesh {plan.mesh} (on {plan.stages[0].mesh}): "
        mesh, plan = plan.stages[0].mesh, plan.stages[0].plan
    if mesh is None or not isinstance(plan, (str, Plan)):
        return
    if all(n == 1 for n in mesh.shape) and not isinstance(plan, Plan):
        return
    try:
        _check_axes_of(mesh, plan, plan if isinstance(plan, str) else plan.name, *_shapes(cfg))
    except PlanError as e:
        raise UserError(where + str(e)) from None


def _shapes(cfg: RunConfig) -> tuple[dict[str, tuple[int, ...]], list[int]]:
    """The workload's parameter shapes and its inputs' ranks (for checking a plan without ranks)."""
    from spmdc.frontend.workloads import load_workload

    w = load_workload(cfg.workload, **workload_args(cfg))
    params = {n: tuple(p.shape) for n, p in w.model.named_parameters()}
    return params, [t.dim() for t in (*w.inputs, *w.loss_inputs, *w.kwargs.values()) if hasattr(t, "dim")]


def _check_axes_of(mesh: Any, plan: Any, name: str, params: dict[str, tuple[int, ...]], ranks: list[int]) -> None:
    from spmdc.sharding.plan import axes_sharded_by, check_axes_used, check_patterns, preset, written_layouts

    base = plan if isinstance(plan, str) else plan.preset
    if base is None:
        check_patterns(plan, list(params))
        layouts = written_layouts(plan, mesh)
    else:
        layouts = written_layouts(preset(base, mesh, params, ranks, fsdp_shard=getattr(plan, "fsdp_shard", "even")),
                                  mesh)
    if layouts is not None:   # None: a layout does not parse, which compiling reports with its place
        check_axes_used(mesh, axes_sharded_by(layouts, mesh), name)


def check_micro_batches(cfg: RunConfig) -> None:
    """``--grad-accum N`` splits every input along dim 0: N must divide the batch."""
    from spmdc.frontend.workloads import load_workload

    w = load_workload(cfg.workload, **workload_args(cfg))
    for t in (*w.inputs, *w.loss_inputs, *w.kwargs.values()):
        if getattr(t, "dim", lambda: 0)() == 0 or t.shape[0] % cfg.options.grad_accum:
            raise UserError(f"--grad-accum {cfg.options.grad_accum} splits every input along dim 0, but workload "
                            f"'{cfg.workload}' has an input of shape {tuple(t.shape)}")


def check_checkpoint(path: str, cfg: RunConfig) -> None:
    """``--load DIR`` must be a checkpoint written by ``--save`` (DCP's ``.metadata`` file) of
    this workload with this optimizer (its state is what resumes), whole (no file missing or cut short)."""
    from spmdc.runtime.checkpointing import CheckpointError, located, read_meta

    where = located(path)   # a save stopped between its two renames left the previous checkpoint aside
    if not os.path.isdir(where):
        raise UserError(f"--load '{path}': no such directory")
    if not os.path.isfile(os.path.join(where, ".metadata")):
        raise UserError(f"--load '{path}' is not a checkpoint (no .metadata file; write one with --save)")
    try:
        extra = read_meta(path).get("extra", {})
    except CheckpointError as e:   # damaged: the file and what is wrong with it
        raise UserError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - a checkpoint of something else
        raise UserError(f"--load '{path}' is not a checkpoint of spmdc run --save ({type(e).__name__}: {e})") from None
    if extra.get("workload", cfg.workload) != cfg.workload:
        raise UserError(f"--load '{path}' holds a checkpoint of workload '{extra['workload']}', not '{cfg.workload}'")
    was = extra.get("settings", {}).get("optimizer", cfg.optimizer)
    if was != cfg.optimizer:
        raise UserError(f"--load '{path}' was saved with --optimizer {was}; its state cannot resume "
                        f"--optimizer {cfg.optimizer} (pass --optimizer {was})")


def validate(cfg: RunConfig, mesh: Any, plan: Any) -> None:
    """Check the workload spec, a preset's name and mesh axes and the dump directories without ranks."""
    from spmdc.frontend.workloads import resolve_factory
    from spmdc.sharding.plan import preset

    factory = resolve_factory(cfg.workload)
    if cfg.batch is not None:
        import inspect

        try:
            params = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            params = {}
        if "batch" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            raise UserError(f"--batch {cfg.batch}: the factory of workload '{cfg.workload}' takes no 'batch' "
                            f"argument (its parameters: {', '.join(params) or 'none'})")
    from spmdc.sharding.pipeline_plan import PipelinePlan

    if isinstance(plan, PipelinePlan):
        check_pipeline(cfg, plan)
    elif mesh is None:   # a heterogeneous plan: its batch split is checked here, before ranks start
        from spmdc.frontend.workloads import load_workload
        from spmdc.sharding.plan import PlanError

        w = load_workload(cfg.workload, **workload_args(cfg))
        try:
            for i, t in enumerate((*w.inputs, *w.loss_inputs, *w.kwargs.values())):
                if getattr(t, "dim", lambda: 0)() >= 1:
                    plan.split_sizes(t.shape[0], f"input #{i} of workload '{cfg.workload}'")
        except PlanError as e:
            raise UserError(str(e)) from None
    elif isinstance(plan, str):
        preset(plan, mesh, {})
    elif getattr(plan, "preset", None):
        preset(plan.preset, mesh, {})
    check_layouts_up_front(cfg, mesh, plan)
    if getattr(plan, "buckets", None):   # bucket globs name parameters: check them before ranks start
        from spmdc.frontend.workloads import load_workload

        plan.bucket_of(n for n, _ in load_workload(cfg.workload, **workload_args(cfg)).model.named_parameters())
    if cfg.check and cfg.options.rng == "philox":
        raise UserError("--check compares with eager PyTorch, whose random numbers --rng philox does not "
                        "reproduce by design; use --rng eager (the default) with --check")
    if cfg.peak_flops is not None and cfg.device_peak is not None:
        raise UserError("--peak-flops and --device-peak both give the peak for MFU: give one")
    if cfg.peak_flops is None:   # a device name, or $SPMDC_PEAK_FLOPS: checked here, read again by the ranks
        from spmdc.api.metrics import ENV_PEAK, resolve_peak

        try:
            resolve_peak(cfg.device_peak, "cpu")
        except ValueError as e:
            raise UserError(f"{'--device-peak' if cfg.device_peak is not None else '$' + ENV_PEAK}: {e}") from None
    if cfg.eager_trace and not cfg.eager:
        raise UserError("--eager-trace writes the op-by-op run of --eager; add --eager")
    if cfg.eager and (cfg.options.target == "triton" or cfg.dump_codegen):
        raise UserError(f"--eager runs each op by its torch implementation, not generated code: drop "
                        f"{'--target triton' if cfg.options.target == 'triton' else '--dump-codegen'}")
    if cfg.eager_trace:
        parent = os.path.dirname(os.path.abspath(cfg.eager_trace))
        if not os.path.isdir(parent):
            raise UserError(f"--eager-trace '{cfg.eager_trace}': no directory '{parent}'")
    if cfg.check and cfg.options.moe_capacity_factor:
        raise UserError("--check compares with one device, which drops no token; --moe-capacity-factor drops what "
                        "overflows an expert slot (it changes results): drop one of them")
    if not cfg.train and (cfg.save or cfg.load or cfg.options.clip_grad_norm or cfg.options.grad_accum > 1):
        raise UserError("--save, --load, --clip-grad-norm and --grad-accum are for training; drop --forward")
    if cfg.options.grad_accum > 1:
        check_micro_batches(cfg)
    if cfg.load is not None:
        check_checkpoint(cfg.load, cfg)
    if cfg.save is not None:
        if cfg.load and os.path.abspath(cfg.save) == os.path.abspath(cfg.load):
            cfg.force = True   # resuming into the same directory overwrites it, as intended
        check_dump_dir(cfg.save, "--save", cfg.force)
        from spmdc.runtime.checkpointing import unreplaceable

        if unreplaceable(cfg.save):   # --force replaces a checkpoint, never other files
            raise UserError(f"--save: {unreplaceable(cfg.save)}")
        check_writable(cfg.save, "--save")
    check_dump_dir(cfg.dump_ir, "--dump-ir", cfg.force)
    check_dump_dir(cfg.dump_codegen, "--dump-codegen", cfg.force)
    from spmdc.codegen.cache import cache_dir

    try:
        cache_dir()
    except NotADirectoryError as e:
        raise UserError(str(e)) from None


def run_main(cfg: RunConfig) -> int:
    """``spmdc run``: resolve and check everything before any rank starts, launch the ranks (or be
    one, under torchrun), print what they measured, and with ``--check`` compare with one device."""
    from spmdc.tools.run_report import batch_pieces, check_against_one_device, report, report_switches
    from spmdc.tools.show import plain_console
    from spmdc.tools.step_replay import StateTrail

    console = plain_console()
    # torch's own deprecation notices (pytree, export) would bury the summary; ranks inherit this
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::UserWarning")
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    mesh, plan = resolve_mesh_and_plan(cfg)
    validate(cfg, mesh, plan)
    if cfg.options.target == "triton":
        # Without a GPU, Triton must interpret kernels; the variable has to be set before
        # anything imports triton (torch does so lazily), so set it here for every rank.
        from spmdc.codegen.cache import prepare_triton

        prepare_triton()
    job = make_job(cfg, mesh, plan)
    # under low precision (this run's, or a resumed history's) --check may replay the steps one by one
    trail = StateTrail.create() if cfg.check and cfg.train and (cfg.mixed_precision or cfg.load) else None
    job["state_trail"] = trail
    try:
        print_header(console, cfg, mesh, plan)
        results = run_ranks(console, cfg, job)
        if results is None:   # a rank of torchrun other than 0: rank 0 reports
            return 0
        results = report_switches(console, results)
        report(console, cfg, job, plan, results)
        if not cfg.check:
            return 0
        pieces = batch_pieces(cfg, mesh, plan) if cfg.train else 1
        return 0 if check_against_one_device(console, cfg, plan, results[min(results)], pieces, trail) else 1
    finally:
        if trail is not None and os.environ.get("RANK", "0") == "0":   # (under torchrun rank 0 judges)
            trail.remove()


def make_job(cfg: RunConfig, mesh: Any, plan: Any) -> dict[str, Any]:
    """What every rank runs (picklable): the workload, layout, steps, options and files."""
    return {"workload": cfg.workload, "mesh": mesh, "plan": plan, "steps": cfg.steps, "train": cfg.train,
            "check": cfg.check, "optimizer": cfg.optimizer, "lr": cfg.lr, "timeout": cfg.timeout,
            "dump_ir": cfg.dump_ir, "dump_codegen": cfg.dump_codegen, "options": cfg.options,
            "seed": cfg.seed, "save": cfg.save, "load": cfg.load,
            "settings": reference_settings(cfg, plan).as_dict(),   # what a checkpoint's steps replay (--check)
            "eager_trace": cfg.eager_trace, "workload_args": workload_args(cfg),
            "switch": parse_switches(cfg, mesh, plan),
            "peak": cfg.peak_flops if cfg.peak_flops is not None else cfg.device_peak}   # None: env or the GPU's


def print_header(console: Any, cfg: RunConfig, mesh: Any, plan: Any) -> None:
    """The run in one line: workload, ranks, mesh, plan, steps, precision, execution."""
    from rich.text import Text

    plan_name = plan if isinstance(plan, str) else plan.name
    if mesh is None:
        mesh = (f"{plan.mesh}, stages over pp ({plan.describe()})" if getattr(plan, "mesh", None) is not None
                else f"per group ({plan.describe()})")
    if cfg.batch is not None:
        plan_name += f", batch {cfg.batch}"
    console.print(Text("spmdc run", style="bold"), f"{cfg.workload}: {'training' if cfg.train else 'forward'}, "
                  f"{cfg.nproc} ranks, mesh {mesh}, plan {plan_name}, {cfg.steps} steps"
                  + (f", {cfg.mixed_precision} mixed precision" if cfg.mixed_precision else "")
                  + (", eager (op by op)" if cfg.eager else ""))
    if cfg.options.moe_capacity_factor:
        cf = cfg.options.moe_capacity_factor
        console.print(Text(f"--moe-capacity-factor {cf:g}: each expert slot holds {cf:g}x its even share of the "
                           "routed tokens and DROPS the rest (their expert output is zero): training differs from "
                           "one device wherever a slot overflows; the load table counts what was dropped",
                           style="yellow"))


def run_ranks(console: Any, cfg: RunConfig, job: dict[str, Any]) -> dict[int, Any] | None:
    """Every rank's report: launched here (torch's elastic launcher, as torchrun), or under
    torchrun this rank's own (None on ranks other than 0, which print nothing)."""
    from spmdc.runtime.launcher import launch
    from spmdc.tools.run_rank import run_rank

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # already a rank (torchrun)
        results = {int(os.environ["RANK"]): run_rank(job)}
        return results if int(os.environ["RANK"]) == 0 else None
    start = time.perf_counter()
    results = launch(run_rank, cfg.nproc, (job,), timeout_s=cfg.timeout, verbose=cfg.verbose)
    console.print(f"ranks finished in {time.perf_counter() - start:.1f} s")
    return results
