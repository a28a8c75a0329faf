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
cap (its predicted peak plus :data:`MARGIN`) is tried again with every 2nd repeated block recomputed
in the backward (``checkpoint: blocks/2``), then every block (``checkpoint: blocks``); a candidate
the compiler refuses (a batch that does not divide, heads that do not split over tp) is kept with
its reason. Ranked: those that fit by predicted step time, then
the rest by peak memory. The best candidate priced from its programs, when an fsdp layout, is then
priced once more with its parameters' gathers bucketed by the cost model instead of per block
(``buckets: auto``, :func:`_rebucketed`), and ranked with the others.

At real size (Llama-3-70B on 4096 ranks: ~180 candidates) two things keep the search within its
budget (``search(budget_s=...)``, ``--search-budget``):

* a deep model is compiled cut to 4, 5 and 6 blocks per stage and each figure extended block by
  block to its depth (:func:`_price_deep`; the same figures as the whole model's, checked on a
  straight line over the three depths, else a deeper window, else the whole model); each cut is
  built from one template of the model's blocks, not traced again
  (:func:`~spmdc.frontend.repeated.reusing_templates`);
* when pricing every candidate would outlast the budget, they are sketched from one profile of the
  model (:mod:`spmdc.api.plan_sketch`) and priced from their programs in the sketch's order while
  it lasts; the rest keep their sketch (``Scored.sketched``) and rank after the priced ones.

    ranked = search(model, inputs, nproc=4096, device=device_profile("h100"), budget_s=20, ...)
    [(s.candidate.label(), s.sketched) for s in ranked[:3]]   # the best priced from its programs first
"""

from __future__ import annotations

import dataclasses
import math
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
RECOMPUTE_EVERY = (2, 1)
"""A candidate over the memory cap is tried again recomputing every 2nd repeated block in the backward
(``checkpoint: blocks/2``: half the recomputation), then every block (``checkpoint: blocks``)."""


@dataclass(frozen=True)
class Candidate:
    """One layout: a mesh, a preset, and the plan's choices."""

    mesh: tuple[tuple[str, int], ...]     # (axis, size), as written: ("pp", 2), ("dp", 2)
    preset: str
    reshard_after_forward: bool = True    # fsdp presets: re-gather in the backward (False: keep)
    checkpoint: int = 0                   # recompute repeated blocks in the backward: 1 every one, K every K-th
    microbatches: int = 0                 # pipelines: micro-batches per step
    buckets: str | None = None            # fsdp presets: "auto" (gathers bucketed by the cost model); None: per block

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
        if self.buckets:
            parts.append(f"buckets {self.buckets}")
        if self.checkpoint:
            parts.append(f"checkpoint {self.checkpoint_mode}")
        return ", ".join(parts)

    @property
    def checkpoint_mode(self) -> str | None:
        """The plan's ``checkpoint``: ``blocks``, ``blocks/K``, or None."""
        if not self.checkpoint:
            return None
        return "blocks" if int(self.checkpoint) == 1 else f"blocks/{int(self.checkpoint)}"

    def _stage_plan(self) -> Any:
        from spmdc.sharding.plan import Plan

        if self.checkpoint or self.buckets or (self.preset in FSDP_PRESETS and not self.reshard_after_forward):
            return Plan(name=self.preset, preset=self.preset, checkpoint=self.checkpoint_mode,
                        buckets=self.buckets or [],
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
            stage["checkpoint"] = self.checkpoint_mode
        if self.buckets:
            stage["buckets"] = self.buckets
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
    sketched: bool = False                # priced by the sketch only (the search's budget ran out)
    parts: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    """The slowest role's step in parts: compute, collectives, optimizer update, pipeline bubble (seconds)."""

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


def _price(c: Candidate, model: Any, inputs: Sequence[Any], device: Any, kw: Mapping[str, Any]) -> tuple:
    """Each role's prediction for ``c``, from its programs, by (device group, ranks)."""
    from spmdc.api.dry_run import dry_run
    from spmdc.runtime.optimizers import pipeline_refusal

    mesh, plan = c.plan()
    why = pipeline_refusal(plan.stages, kw.get("optimizer")) if mesh is None else None
    if why:
        raise ValueError(why)
    report = dry_run(model, inputs, mesh=mesh, plan=plan, device=device, **kw)
    return {(r.group, tuple(r.ranks)): r.prediction for r in report.roles}


DEPTHS = (4, 5, 6)
"""Blocks per stage a deep model is compiled with first for :func:`_price_deep`: the first blocks
and the last of a stage can differ from the others (the second is prefetched while the first
runs; the last stage's last block feeds the head), so each further block is a middle one from a
few blocks on (measured: a pipeline stage's peak memory grows in a straight line from 3 blocks
on, not from 2; the last stage's compute and Llama-3-70B's on 4096 ranks from 4 on); the third
depth checks the line, and when it is not one the window moves a block deeper."""


MOVES = 6
"""How often :func:`_price_deep`'s window of depths moves a block deeper before the model is priced
whole (a HuggingFace Llama-3-70B under fsdp+tp keeping its gathered parameters: four times, to 8, 9
and 10 blocks; each further depth costs its compile, its capture being built from the template)."""


def _price_deep(c: Candidate, model: Any, inputs: Sequence[Any], device: Any, kw: Mapping[str, Any],
                stack: Any) -> dict:
    """:func:`_price` of a deep model from its programs at three successive depths (blocks per
    stage, from :data:`DEPTHS`), each figure extended in a straight line to ``⌈L / pp⌉`` blocks per
    stage (what each further block adds: compute, collectives, optimizer update, a pipeline's
    slowest micro-batch, each part of the peak memory, calls), role by role, each role's step then
    combined from them as a prediction does (overlap hides collectives up to the compute). When the
    three do not lie on one line (the peak moved elsewhere; its ranks' roles changed), the window
    moves a block deeper (at most :data:`MOVES` times); the model is priced whole when those
    compiles would hold half its blocks or more."""
    from spmdc.frontend.repeated import keep_blocks

    pp = dict(c.mesh).get("pp", 1)
    if stack is None:
        return _price(c, model, inputs, device, kw)
    per_stage = math.ceil(stack.count / pp)
    got: dict[int, dict] = {}
    k = max(1, int(c.checkpoint))   # (every K-th block recomputed: depths in steps of K, each stage alike)
    first = -(-DEPTHS[0] // k) * k
    window = [first + i * k for i in range(len(DEPTHS))]
    while 2 * window[-1] <= per_stage and window[0] <= first + MOVES * k:
        for d in window:
            if d not in got:
                with keep_blocks(model, stack, list(range(pp * d))):
                    got[d] = _price(c, model, inputs, device, kw)
        three = [got[d] for d in window]
        if len({frozenset(g) for g in three}) == 1 and all(
                _straight(*xs) for xs in zip(*([_slowest(g, pp)] + [x for key in sorted(g, key=str)
                                                                    for x in _figures(g[key])] for g in three))):
            return _extend(three[-2], three[-1], (per_stage - window[-1]) / (window[-1] - window[-2]), pp, device)
        window = [d + k for d in window]
    return _price(c, model, inputs, device, kw)


def _slowest(preds: Mapping[Any, Any], pp: int) -> float:
    """A pipeline's slowest stage micro-batch (0 without a pipeline)."""
    return max(p.stage_seconds for p in preds.values()) if pp > 1 else 0.0


def _extend(a: Mapping[Any, Any], b: Mapping[Any, Any], more: float, pp: int, device: Any) -> dict:
    """Each role's prediction ``more`` steps of ``b - a`` beyond ``b``."""
    def line(x: float, y: float) -> float:
        return y + more * (y - x)

    out = {}
    for key, now in b.items():
        was = a[key]
        out[key] = dataclasses.replace(
            now, compute_seconds=line(was.compute_seconds, now.compute_seconds),
            comm_seconds=line(was.comm_seconds, now.comm_seconds),
            update_seconds=line(was.update_seconds, now.update_seconds), bubble_seconds=0.0,
            memory=dataclasses.replace(now.memory, **{f: round(line(getattr(was.memory, f), getattr(now.memory, f)))
                                                      for f in _MEMORY}),
            comm=[dataclasses.replace(r, count=round(line(_count(was.comm, r), r.count))) for r in now.comm],
            sync_points=round(line(was.sync_points, now.sync_points)))
    if pp > 1:   # every rank's step: the busiest role's and the fill and drain (predict.pipeline_step)
        from spmdc.api.predict import pipeline_step

        stage = line(_slowest(a, pp), _slowest(b, pp))
        total = pipeline_step(max(p.step_seconds for p in out.values()), stage, pp, device)
        for p in out.values():
            p.bubble_seconds, p.stage_seconds = total - p.step_seconds, stage
    return out


def _figures(p: Any) -> list[float]:
    return [p.compute_seconds, p.comm_seconds, p.update_seconds, *(getattr(p.memory, f) for f in _MEMORY),
            *(r.count for r in p.comm)]


def _straight(a: float, b: float, c: float) -> bool:
    """Three figures at evenly spaced depths on one line (and not falling: a block adds)."""
    return abs((c - b) - (b - a)) <= 1e-6 * max(abs(a), abs(b), abs(c)) + 1e-12 and c >= b - 1e-12


_MEMORY = ("parameters", "optimizer", "gradients", "activations", "comm_buffers", "optimizer_step", "whole_gradients")


def _count(rows: Sequence[Any], like: Any) -> int:
    return sum(r.count for r in rows if (r.axes, r.kind) == (like.axes, like.kind))


def _score(c: Candidate, model: Any, inputs: Sequence[Any], device: Any, cap: float, kw: Mapping[str, Any],
           stack: Any = None) -> Scored:
    t = time.perf_counter()
    try:
        roles = _price_deep(c, model, inputs, device, kw, stack)
    except Exception as e:   # the compiler's refusal of this layout (a batch, heads, a shape): its reason
        return Scored(c, refused=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                      compile_seconds=time.perf_counter() - t)
    preds = list(roles.values())
    slowest = max(preds, key=lambda p: p.step_seconds)
    peak = max(p.memory.total for p in preds)
    colls = max(sum(r.count for r in p.comm if r.kind != "comm.all_slice") for p in preds)
    return Scored(c, slowest.step_seconds, peak, fits_cap(peak, cap), collectives=colls,
                  compile_seconds=time.perf_counter() - t, roles=len(preds),
                  parts=(slowest.compute_seconds, slowest.comm_seconds, slowest.update_seconds,
                         slowest.bubble_seconds))


def search(model: Any, inputs: Sequence[Any], *, nproc: int, device: Any, memory_cap: float | None = None,
           train: bool = True, loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
           kwargs: Mapping[str, Any] | None = None, optimizer: str | None = None, options: Any = None,
           only: Callable[[Candidate], bool] | None = None, budget_s: float | None = None,
           progress: Callable[[Scored, int, int], None] | None = None) -> list[Scored]:
    """Every candidate for ``nproc`` ranks priced and ranked (see the module doc); ``memory_cap``:
    bytes per rank (default the device's memory); ``only``: a filter on the candidates;
    ``budget_s``: seconds for the whole search: once pricing every candidate from its programs
    would take longer (as long as those priced took), the rest are sketched
    (:mod:`spmdc.api.plan_sketch`) and priced in the sketch's order while the budget lasts, the
    others ranked by their sketch (``Scored.sketched``); a model without repeated blocks is priced
    whole; once the budget is spent with every candidate so far refused (a model spmdc cannot
    capture), the rest are refused unpriced; None: every candidate priced; ``progress(scored, i,
    n)`` after each priced."""
    from spmdc.frontend.capture import reusing_captures
    from spmdc.frontend.checkpoint import block_modules
    from spmdc.frontend.repeated import find_block_stack
    from spmdc.sharding.plan import is_expert_weight

    start = time.perf_counter()
    cap = memory_cap if memory_cap else device.memory_gib * 2 ** 30
    params = dict(model.named_parameters())
    experts = any(is_expert_weight(n, tuple(p.shape)) for n, p in params.items())
    by_parent: dict[str, int] = {}
    for path in block_modules(model):
        parent = path.rpartition(".")[0]
        by_parent[parent] = by_parent.get(parent, 0) + 1
    blocks = max(by_parent.values(), default=0)   # (the longest list of repeated blocks: pipeline cuts)
    # (no pipelines for a forward alone: a pipeline plan runs training steps)
    todo = [c for c in candidates(nproc, blocks=blocks if train else 0, experts=experts, max_tp=device.node_size)
            if only is None or only(c)]
    kw = dict(train=train, loss_fn=loss_fn, loss_inputs=loss_inputs, kwargs=kwargs,
              optimizer=optimizer if train else None, options=options)
    stack = find_block_stack(model)[0] if blocks else None
    out: list[Scored] = []
    with reusing_captures():   # (one capture of the model per setting, whatever the plan)
        sketches: dict[Candidate, Scored] | None = None   # (made once the budget would not price them all;
        #                                                   up front for a model priced from cut compiles)
        if budget_s is not None and stack is not None and stack.count > 2 * DEPTHS[-1]:
            ranked = _sketched(todo, model, inputs, device, cap, kw)
            sketches = {s.candidate: s for s in ranked}
            if ranked:
                todo = [s.candidate for s in ranked]
                first = next((c for c in todo if not c.pipeline), todo[0])   # (priced surely: the best without
                todo = [first] + [c for c in todo if c != first]             #  a pipeline, the cheapest to price)
        took: dict[bool, list[float]] = {}   # (seconds each pricing took, per stage for pipelines)
        captured: set[int] = {0}             # (the checkpoint settings captured so far)
        i = 0
        while i < len(todo):
            c = todo[i]
            left = budget_s - (time.perf_counter() - start) if budget_s is not None else float("inf")
            if out and sketches is None and stack is not None and stack.count >= 2 \
                    and sum(_expected(x, took) for x in todo[i:]) > left:   # the rest, in the sketch's order
                ranked = _sketched(todo[i:], model, inputs, device, cap, kw)
                sketches = {s.candidate: s for s in ranked}
                if ranked:
                    todo = todo[:i] + [s.candidate for s in ranked]
                continue
            i += 1
            if out and sketches and c in sketches and _expected(c, took, captured) > left:   # (it would outlast
                #                                                                               the budget)
                out.append(sketches[c])
                continue
            if out and left <= 0 and not any(x.ok for x in out):   # (a model refused under every layout so far:
                #                                                     the rest would be too, one capture each)
                tried = sum(1 for x in out if not x.refused.startswith(UNPRICED))
                out.append(Scored(c, refused=f"{UNPRICED}: the search's budget ({budget_s:g} s) is spent and every "
                                             f"candidate priced before it ({tried}) was refused"))
                continue
            s = _score(c, model, inputs, device, cap, kw, stack)
            if s.ok and not s.fits and blocks and not c.checkpoint:   # over the cap: recompute blocks
                for every in RECOMPUTE_EVERY if blocks >= 2 else (1,):   # (half of them first, then all)
                    s = _score(dataclasses.replace(c, checkpoint=every), model, inputs, device, cap, kw, stack)
                    if s.fits or not s.ok:
                        break
            took.setdefault(c.pipeline, []).append(s.compile_seconds / dict(c.mesh).get("pp", 1))
            captured.add(s.candidate.checkpoint)
            out.append(s)
            if progress is not None:
                progress(s, i, len(todo))
        deep = stack is not None and stack.count > 2 * DEPTHS[-1]   # (priced from cut models: auto buckets may
        #                                                               span blocks, off the per-block line)
        refined = None if deep else _rebucketed(rank(out), budget_s, start, took, captured)
        if refined is not None and (only is None or only(refined)):   # (the best fsdp layout, bucketed by cost)
            s = _score(refined, model, inputs, device, cap, kw, stack)
            out.append(s)
            if progress is not None:
                progress(s, len(todo) + 1, len(todo) + 1)
    return rank(out)


def _rebucketed(ranked: list[Scored], budget_s: float | None, start: float, took: Mapping[bool, list[float]],
                captured: set[int]) -> Candidate | None:
    """The best candidate priced from its programs, when it is an fsdp layout bucketed per block,
    with its parameters' gathers bucketed by the cost model instead (``buckets: auto``: the blocks'
    small gathers merged where their communication would not hide), if the budget leaves time to
    price it; None otherwise. Priced like any candidate, it is chosen only when its predicted step is
    lower (a model priced from cut compiles is not refined: merged buckets may span blocks)::

        fsdp on dp=4, keep gathered                -> fsdp on dp=4, keep gathered, buckets auto
    """
    best = next((s for s in ranked if s.ok and s.fits and not s.sketched), None)
    if best is None or best.candidate.preset not in FSDP_PRESETS or best.candidate.buckets:
        return None
    c = dataclasses.replace(best.candidate, buckets="auto")
    if budget_s is not None and _expected(c, took, captured) > budget_s - (time.perf_counter() - start):
        return None
    return c


UNPRICED = "not priced"
"""How a candidate the search did not price starts its reason (see :func:`search`)."""


PIPELINE_STAGE_COST = 3.0
"""A pipeline's pricing per stage over a candidate's without one, until a pipeline was priced (a
stage compiles a forward and a training program and captures its own piece of the model: Llama-3
shapes, about 3x)."""


NEW_CAPTURE_COST = 3.0
"""A candidate's pricing over the average when the model was not yet captured with its checkpoint
setting (its blocks' template traced again: Llama-3-70B on 4096 ranks, 10.3 s against 3.5 s)."""


def _expected(c: Candidate, took: Mapping[bool, list[float]], captured: set[int] | None = None) -> float:
    """Seconds pricing ``c`` should take: as long as those priced before it took on average (times
    :data:`NEW_CAPTURE_COST` when its checkpoint setting is not in ``captured``)."""
    if captured is not None and c.checkpoint not in captured:
        return NEW_CAPTURE_COST * _expected(c, took)

    def mean(kind: bool) -> float | None:
        return sum(took[kind]) / len(took[kind]) if took.get(kind) else None

    pp = dict(c.mesh).get("pp", 1)
    alone = mean(False)
    if pp == 1:
        return alone if alone is not None else 0.0
    stage = mean(True)
    return pp * (stage if stage is not None else PIPELINE_STAGE_COST * (alone or 0.0))


def _sketched(todo: list[Candidate], model: Any, inputs: Sequence[Any], device: Any, cap: float,
              kw: Mapping[str, Any]) -> list[Scored]:
    """The candidates sketched (:func:`~spmdc.api.plan_sketch.sketch`), best first (a candidate
    over the cap with its blocks recomputed); none when the model cannot be profiled (then every
    candidate is priced from its programs, whatever the budget)."""
    import warnings

    from spmdc.api.plan_sketch import model_profile, sketch

    try:
        profile = model_profile(model, inputs, device=device, **kw)
    except Exception as e:   # (its reference compiles failed: no sketch, no order; said, not hidden)
        warnings.warn(f"spmdc plan --search: no sketch of the model ({type(e).__name__}: {e}); every candidate "
                      "is priced from its programs, whatever --search-budget", stacklevel=2)
        return []
    if profile is None:
        return []
    out = []
    for c in todo:
        step, peak = sketch(c, profile, device)
        for every in RECOMPUTE_EVERY:   # (over the cap: priced with blocks recomputed straight away)
            if fits_cap(peak, cap):
                break
            c = dataclasses.replace(c, checkpoint=every)
            step, peak = sketch(c, profile, device)
        out.append(Scored(c, step, int(peak), fits_cap(peak, cap), sketched=True))
    return rank(out)


def rank(scored: list[Scored]) -> list[Scored]:
    """Fitting candidates by predicted step time (those priced from their programs before those
    only sketched), then the others by peak memory, refused last (those not priced after them)."""
    return sorted(scored, key=lambda s: (not s.ok, s.refused.startswith(UNPRICED), not s.fits, s.sketched and s.fits,
                                         s.step_seconds if s.fits else s.peak_bytes, s.candidate.label()))

