"""Automatic plans: every candidate layout for N ranks, priced by the dry run, ranked.

    ranked = search(w.model, w.inputs, nproc=4, device=device_profile("local"), train=True,
                    loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, optimizer="adamw")
    best = ranked[0]                    # fits the memory cap, lowest predicted step time
    best.candidate.mesh_text, best.candidate.plan()     # "dp=2,tp=2", the plan to compile
    best.candidate.plan_file()          # the same as a plan file (YAML) to read, edit and re-run

The candidates (:func:`candidates`): each factorization of N over the mesh axes ``pp`` (pipeline
stages, at most one per repeated block), ``rep`` × ``dp`` (hsdp), ``dp``, ``tp`` (at most
``node_size``) and, for a model with experts, ``ep``; on each mesh the presets for its axes
(``dp`` / ``fsdp`` on dp, ``megatron`` on tp, ``fsdp+tp`` on both, ``hsdp`` on rep × dp, the ``ep``
presets on ep; a pipeline's stages run the preset of its other axes), an fsdp plan once resharding
after the forward and once keeping the gathered parameters, a pipeline with as many micro-batches
as stages and with twice as many. Each candidate is compiled for its whole world without a rank
(:func:`spmdc.api.dry_run.dry_run`: the same programs a run compiles; the model is captured once
per setting, :func:`~spmdc.frontend.capture.reusing_captures`) and priced by its
predictions: the slowest role's step time (roofline per op + launches + collectives, each call as
a calibrated profile measured it or else α-β over the links, with overlap + the optimizer's update
+ a pipeline's bubble) and the largest role's peak memory per rank. A candidate over the memory
cap (its predicted peak plus :data:`MARGIN`) is tried again with every repeated block recomputed
in the backward (``checkpoint: blocks``); a candidate the compiler refuses (a batch that does not divide, heads that
do not split over tp) is kept with its reason. Ranked: those that fit by predicted step time, then
the rest by peak memory.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MARGIN", "Candidate", "Scored", "candidates", "fits_cap", "search"]

MARGIN = 0.05
"""A candidate fits the cap when its predicted peak plus this share does (the dry run's peak is
within a few percent of the measured one: bench/plan_accuracy.py, bench/auto_plan.py)."""


def fits_cap(peak_bytes: float, cap: float) -> bool:
    return peak_bytes * (1 + MARGIN) <= cap

FSDP_PRESETS = ("fsdp", "hsdp", "fsdp+tp", "fsdp+ep", "fsdp+tp+ep")


@dataclass(frozen=True)
class Candidate:
    """One layout: a mesh, a preset, and the plan's choices."""

    mesh: tuple[tuple[str, int], ...]     # (axis, size), as written: ("pp", 2), ("dp", 2)
    preset: str
    reshard_after_forward: bool = True    # fsdp presets: re-gather in the backward (False: keep)
    checkpoint: bool = False              # recompute every repeated block in the backward
    microbatches: int = 0                 # pipelines: micro-batches per step

    @property
    def mesh_text(self) -> str:
        return ",".join(f"{a}={k}" for a, k in self.mesh)

    @property
    def pipeline(self) -> bool:
        return any(a == "pp" for a, _ in self.mesh)

    def label(self) -> str:
        """``fsdp+tp on dp=2,tp=2, keep gathered, checkpoint blocks``."""
        return self.plan_label.replace(self.preset, f"{self.preset} on {self.mesh_text}", 1)

    @property
    def plan_label(self) -> str:
        """The plan without its mesh: ``fsdp+tp, keep gathered, checkpoint blocks``."""
        parts = [self.preset]
        if self.preset in FSDP_PRESETS and not self.reshard_after_forward:
            parts.append("keep gathered")
        if self.microbatches:
            parts.append(f"{self.microbatches} micro-batches")
        if self.checkpoint:
            parts.append("checkpoint blocks")
        return ", ".join(parts)

    def _stage_plan(self) -> Any:
        from spmdc.sharding.plan import Plan

        if self.checkpoint or (self.preset in FSDP_PRESETS and not self.reshard_after_forward):
            return Plan(name=self.preset, preset=self.preset, checkpoint="blocks" if self.checkpoint else None,
                        reshard_after_forward=self.reshard_after_forward if self.preset in FSDP_PRESETS else True)
        return self.preset

    def plan(self) -> tuple[Any, Any]:
        """``(mesh, plan)`` as :func:`~spmdc.api.dry_run.dry_run` and ``spmdc.compile`` take them
        (a pipeline: mesh None and a :class:`~spmdc.sharding.pipeline_plan.PipelinePlan`)."""
        from spmdc.sharding.mesh import Mesh
        from spmdc.sharding.pipeline_plan import PipelinePlan

        mesh = Mesh(list(self.mesh))
        if self.pipeline:
            return None, PipelinePlan.from_mesh(mesh, self._stage_plan(), microbatches=self.microbatches or None)
        return mesh, self._stage_plan()

    def plan_file(self, header: str = "") -> str:
        """The plan as a file ``spmdc run --plan FILE`` takes (YAML): a plan with its ``mesh``, or a
        pipeline plan with its stages."""
        lines = [f"# {line}" for line in header.splitlines()] if header else []
        stage = {"preset": self.preset}
        if self.preset in FSDP_PRESETS:
            stage["reshard_after_forward"] = "true" if self.reshard_after_forward else "false"
        if self.checkpoint:
            stage["checkpoint"] = "blocks"
        if not self.pipeline:
            lines.append(f"name: auto {self.label()}")
            lines.append(f"mesh: {self.mesh_text}")
            lines += [f"{k}: {v}" for k, v in stage.items()]
            return "\n".join(lines) + "\n"
        mesh, plan = self.plan()
        lines += [f"name: auto {self.label()}", f"schedule: {plan.schedule}", f"microbatches: {plan.microbatches}",
                  "stages:"]
        for s in plan.stages:
            lines.append(f"  - ranks: [{', '.join(map(str, s.ranks))}]")
            lines.append(f"    mesh: {','.join(f'{a}={k}' for a, k in s.mesh.axes)}")
            lines.append("    plan: {" + ", ".join(f"{k}: {v}" for k, v in stage.items()) + "}")
        return "\n".join(lines) + "\n"


@dataclass
class Scored:
    """A candidate and its predictions (or why it was refused)."""

    candidate: Candidate
    step_seconds: float = float("inf")
    peak_bytes: int = 0                   # the largest role's predicted peak per rank
    fits: bool = False                    # peak within the cap
    refused: str = ""                     # the compiler's reason, when it refused the candidate
    collectives: int = 0                  # per step, on the busiest role (all_slice, a local slice, aside)
    compile_seconds: float = 0.0
    roles: int = 0

    @property
    def ok(self) -> bool:
        return not self.refused


def _factorizations(n: int, k: int) -> Iterator[tuple[int, ...]]:
    """Every ``k``-tuple of positive integers whose product is ``n``."""
    if k == 1:
        yield (n,)
        return
    for d in range(1, n + 1):
        if n % d == 0:
            for rest in _factorizations(n // d, k - 1):
                yield (d,) + rest


def _presets(axes: Sequence[str]) -> list[str]:
    """The presets for a mesh of ``axes`` (``pp`` aside)."""
    key = tuple(a for a in axes if a != "pp")
    return {(): ["dp"], ("dp",): ["dp", "fsdp"], ("tp",): ["megatron"], ("dp", "tp"): ["fsdp+tp"],
            ("rep", "dp"): ["hsdp"], ("ep",): ["ep"], ("dp", "ep"): ["fsdp+ep"],
            ("dp", "tp", "ep"): ["fsdp+tp+ep"]}.get(key, [])


def candidates(nproc: int, *, blocks: int = 0, experts: bool = False, max_tp: int = 8,
               microbatch_options: Sequence[int] = (1, 2)) -> list[Candidate]:
    """Every candidate for ``nproc`` ranks (see the module doc): ``blocks``, the model's repeated
    blocks (at most one pipeline stage each; 0: no pipelines); ``experts``: the ep meshes too;
    ``max_tp``: the largest tp (one node); ``microbatch_options``: micro-batches per stage count."""
    out: list[Candidate] = []
    shapes: list[tuple[tuple[str, int], ...]] = []
    axes_sets = [("pp", "dp", "tp"), ("pp", "rep", "dp")] + ([("pp", "dp", "tp", "ep")] if experts else [])
    for names in axes_sets:
        for sizes in _factorizations(nproc, len(names)):
            mesh = tuple((a, k) for a, k in zip(names, sizes) if k > 1)
            if not mesh:
                mesh = (("dp", 1),)
            d = dict(mesh)
            if d.get("tp", 1) > max_tp or (d.get("pp", 1) > 1 and d["pp"] > max(blocks, 1)) \
                    or (d.get("pp", 1) > 1 and not blocks) or ("rep" in d) != ("rep" in d and "dp" in d) \
                    or mesh in shapes:
                continue
            shapes.append(mesh)
    for mesh in shapes:
        axes = [a for a, _ in mesh]
        pp = dict(mesh).get("pp", 1)
        for name in _presets(axes):
            keeps = (True, False) if name in FSDP_PRESETS and pp == 1 else (True,)   # (a stage's F and B
            #                                                     are two programs: nothing is kept between)
            mbs = [pp * m for m in microbatch_options] if pp > 1 else [0]
            for keep in keeps:
                for mb in mbs:
                    out.append(Candidate(mesh, name, reshard_after_forward=keep, microbatches=mb))
    return out


def _score(c: Candidate, model: Any, inputs: Sequence[Any], device: Any, cap: float, kw: Mapping[str, Any]) -> Scored:
    from spmdc.api.dry_run import dry_run
    from spmdc.runtime.optimizers import pipeline_refusal

    t = time.perf_counter()
    try:
        mesh, plan = c.plan()
        why = pipeline_refusal(plan.stages, kw.get("optimizer")) if mesh is None else None
        if why:
            raise ValueError(why)
        report = dry_run(model, inputs, mesh=mesh, plan=plan, device=device, **kw)
    except Exception as e:   # the compiler's refusal of this layout (a batch, heads, a shape): its reason
        return Scored(c, refused=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                      compile_seconds=time.perf_counter() - t)
    step = max(r.prediction.step_seconds for r in report.roles)
    peak = max(r.prediction.memory.total for r in report.roles)
    colls = max(sum(c.count for c in r.prediction.comm if c.kind != "comm.all_slice") for r in report.roles)
    return Scored(c, step, peak, fits_cap(peak, cap), collectives=colls, compile_seconds=time.perf_counter() - t,
                  roles=len(report.roles))


def search(model: Any, inputs: Sequence[Any], *, nproc: int, device: Any, memory_cap: float | None = None,
           train: bool = True, loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
           kwargs: Mapping[str, Any] | None = None, optimizer: str | None = None, options: Any = None,
           only: Callable[[Candidate], bool] | None = None,
           progress: Callable[[Scored, int, int], None] | None = None) -> list[Scored]:
    """Every candidate for ``nproc`` ranks priced and ranked (see the module doc); ``memory_cap``:
    bytes per rank (default the device's memory); ``only``: a filter on the candidates;
    ``progress(scored, i, n)`` after each."""
    from spmdc.frontend.checkpoint import block_modules
    from spmdc.sharding.plan import is_expert_weight

    cap = memory_cap if memory_cap else device.memory_gib * 2 ** 30
    params = dict(model.named_parameters())
    experts = any(is_expert_weight(n, tuple(p.shape)) for n, p in params.items())
    by_parent: dict[str, int] = {}
    for path in block_modules(model):
        parent = path.rpartition(".")[0]
        by_parent[parent] = by_parent.get(parent, 0) + 1
    blocks = max(by_parent.values(), default=0)   # (the longest list of repeated blocks: pipeline cuts)
    todo = [c for c in candidates(nproc, blocks=blocks, experts=experts, max_tp=device.node_size)
            if only is None or only(c)]
    kw = dict(train=train, loss_fn=loss_fn, loss_inputs=loss_inputs, kwargs=kwargs,
              optimizer=optimizer if train else None, options=options)
    out: list[Scored] = []
    from spmdc.frontend.capture import reusing_captures

    with reusing_captures():   # (one capture of the model per setting, whatever the plan)
        for i, c in enumerate(todo):
            s = _score(c, model, inputs, device, cap, kw)
            if s.ok and not s.fits and blocks and not c.checkpoint:   # over the cap: recompute the blocks
                s = _score(dataclasses.replace(c, checkpoint=True), model, inputs, device, cap, kw)
            out.append(s)
            if progress is not None:
                progress(s, i + 1, len(todo))
    return rank(out)


def rank(scored: list[Scored]) -> list[Scored]:
    """Fitting candidates by predicted step time, then the others by peak memory, refused last."""
    return sorted(scored, key=lambda s: (not s.ok, not s.fits, s.step_seconds if s.fits else s.peak_bytes,
                                         s.candidate.label()))

