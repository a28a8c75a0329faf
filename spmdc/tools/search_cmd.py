"""``spmdc plan --search`` and ``spmdc run --plan auto``: the layout search on the command line.

    spmdc calibrate                                          # once: this machine's profile, 'local'
    spmdc plan gpt2-tiny --search --nproc 4 --device local --write-plan chosen.yaml
    spmdc run gpt2-tiny --plan chosen.yaml --check           # the file holds its mesh
    spmdc run gpt2-tiny --nproc 4 --plan auto --check        # search, then run the best

The search (:func:`spmdc.api.auto_plan.search`) prices every candidate with the dry run;
``--mesh`` restricts it to that mesh's plans, ``--memory-cap`` sets the cap (default the device's
memory). ``spmdc run --plan auto`` prices with the stored profile ``local`` when ``spmdc
calibrate`` wrote one, else the table's ``cpu`` (``h100`` with CUDA).
"""

from __future__ import annotations

import json
import time
from typing import Any

from spmdc.api.auto_choice import SEARCH_BUDGET  # (the default, declared once)
from spmdc.tools.errors import UserError

__all__ = ["print_ranked", "search_device", "search_for_run", "search_main"]


def search_device() -> Any:
    """The profile ``spmdc run --plan auto`` prices with (see the module doc)."""
    from spmdc.api.auto_choice import default_device

    return default_device()


def _refuse_fixed(cfg: Any) -> None:
    """What the search chooses itself cannot be given too."""
    for option, given in (("--fsdp-shard", cfg.fsdp_shard != "even"), ("--pp-schedule", cfg.options.pp_schedule),
                          ("--microbatches", cfg.options.microbatches)):
        if given:
            raise UserError(f"{option} with --plan auto / --search: the search chooses the plan and its "
                            "micro-batches; give a plan (or a plan file) to set it")
    if cfg.eager:
        raise UserError("--eager with --plan auto / --search: the search prices compiled programs, and eager "
                        "execution (op by op) is not predicted; give a plan to run eagerly")


def add_budget_argument(ap: Any) -> None:
    """``--search-budget SECONDS`` (``spmdc plan --search``, ``spmdc run --plan auto``)."""
    from spmdc.compiler.options import positive

    ap.add_argument("--search-budget", type=positive(float), default=None, metavar="SECONDS",
                    help="--search / --plan auto: seconds for the search; candidates are compiled and priced in "
                         "the order of a sketch of their cost (spmdc.api.plan_sketch) until they are spent, the "
                         f"rest shown with their sketch (default {SEARCH_BUDGET:g}; a large number prices every "
                         "candidate)")


def _search(cfg: Any, device: Any, console: Any) -> tuple[list[Any], float, int]:
    from spmdc.api.auto_plan import search
    from spmdc.frontend.workloads import load_workload
    from spmdc.sharding.mesh import Mesh
    from spmdc.tools.run_cmd import workload_args

    _refuse_fixed(cfg)
    only, nproc = None, cfg.nproc
    if cfg.mesh is not None:
        try:
            mesh = Mesh.parse(cfg.mesh)
        except ValueError as e:
            raise UserError(f"--mesh: {e}") from None
        if nproc and nproc != mesh.size:
            raise UserError(f"mesh {mesh} has {mesh.size} devices but --nproc is {nproc}")
        nproc = mesh.size
        only = (lambda c: c.mesh_text == str(mesh))  # noqa: E731
    nproc = nproc or 4
    t0 = time.perf_counter()
    w = load_workload(cfg.workload, **workload_args(cfg))
    ranked = search(w.model, w.inputs, nproc=nproc, device=device, memory_cap=cfg.options.memory_cap or None,
                    train=cfg.train, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, kwargs=w.kwargs,
                    optimizer=cfg.optimizer, options=cfg.options, only=only,
                    budget_s=cfg.search_budget or SEARCH_BUDGET,
                    progress=lambda s, i, n: console.print(f"  [{i}/{n}] {s.candidate.label()}: " + (
                        f"refused ({s.refused})" if s.refused else
                        f"{s.step_seconds * 1e3:,.2f} ms, {s.peak_bytes / 2 ** 20:,.2f} MiB"), highlight=False))
    if not ranked:
        raise UserError(f"no candidate layout for {nproc} ranks" + (f" on mesh {cfg.mesh}: {_why_none(mesh)}"
                                                                     if cfg.mesh else ""))
    return ranked, time.perf_counter() - t0, nproc


def _why_none(mesh: Any) -> str:
    """Why the search has no candidate on ``mesh`` (``--mesh``; :func:`spmdc.api.auto_choice.why_none`)."""
    from spmdc.api.auto_choice import why_none

    return f"{why_none(mesh)}; give a preset with --plan to run on this mesh"


def print_ranked(console: Any, ranked: list[Any], top: int, cap: float, device: Any) -> None:
    """The ranked candidates, ``top`` of them, best first."""
    from rich.table import Table

    table = Table(title=f"candidates, best first (predicted on {device.name}; memory cap "
                        f"{cap / 2 ** 20:,.1f} MiB per rank)")
    for col in ("#", "plan", "mesh", "step ms", "peak MiB", "fits", "collectives", "priced", "note"):
        table.add_column(col, justify="right" if col in ("#", "step ms", "peak MiB", "collectives") else "left")
    for i, s in enumerate(ranked[:top]):
        c = s.candidate
        table.add_row(str(i + 1), c.plan_label, c.mesh_text, "" if s.refused else f"{s.step_seconds * 1e3:,.2f}",
                      "" if s.refused else f"{s.peak_bytes / 2 ** 20:,.2f}",
                      "" if s.refused else ("yes" if s.fits else "no"),
                      "" if s.refused or s.sketched else str(s.collectives),
                      "" if s.refused else "sketch" if s.sketched else "programs", s.refused)
    console.print(table)


def search_main(cfg: Any, device: Any, top: int, write_plan: str | None, json_path: str | None) -> int:
    """``spmdc plan --search``: rank, print, write the chosen plan."""
    from spmdc.tools.show import plain_console

    if write_plan is not None and not write_plan.endswith((".yaml", ".yml")):
        raise UserError(f"--write-plan '{write_plan}': expected a .yaml file")
    console = plain_console()
    console.print(f"spmdc plan --search {cfg.workload}: pricing every layout on {device.describe()}")
    ranked, took, nproc = _search(cfg, device, console)
    cap = cfg.options.memory_cap or device.memory_gib * 2 ** 30
    print_ranked(console, ranked, top, cap, device)
    best = ranked[0]
    if best.refused or not best.fits:
        console.print("no candidate fits the memory cap" if not best.refused else "every candidate was refused")
    else:
        priced = sum(1 for s in ranked if not s.sketched)
        console.print(f"chosen: {best.candidate.label()} ({best.step_seconds * 1e3:,.2f} ms predicted); "
                      f"{len(ranked)} candidates for {nproc} ranks, {priced} priced from their programs, in "
                      f"{took:.1f} s" + (f" (the other {len(ranked) - priced} sketched only: --search-budget "
                                         "SECONDS to price more)" if priced < len(ranked) else ""))
    if write_plan and best.ok:
        from spmdc.tools.errors import write_text

        write_text(write_plan, best.candidate.plan_file(
            f"spmdc plan --search {cfg.workload}: {nproc} ranks, predicted {best.step_seconds * 1e3:,.2f} ms per "
            f"step and {best.peak_bytes / 2 ** 20:,.2f} MiB per rank on {device.name}\n"
            f"run it: spmdc run {cfg.workload} --plan {write_plan}"))
        console.print(f"wrote {write_plan}")
    if json_path:
        from spmdc.tools.errors import write_text

        write_text(json_path, json.dumps({"workload": cfg.workload, "nproc": nproc, "device": device.name,
                                          "seconds": took, "candidates": [
                                              {"plan": s.candidate.label(), "mesh": s.candidate.mesh_text,
                                               "preset": s.candidate.preset, "step_seconds": s.step_seconds
                                               if s.ok else None, "peak_bytes": s.peak_bytes, "fits": s.fits,
                                               "refused": s.refused, "sketched": s.sketched}
                                              for s in ranked]}, indent=1) + "\n")
        console.print(f"wrote {json_path}")
    return 0 if best.ok and best.fits else 1


def _mib(nbytes: float) -> str:
    """``nbytes`` as MiB, or KiB below 0.1 MiB (a tiny cap reads as what it is)."""
    return f"{nbytes / 2 ** 20:,.1f} MiB" if nbytes >= 0.1 * 2 ** 20 else f"{nbytes / 2 ** 10:,.1f} KiB"


def search_for_run(cfg: Any, console: Any) -> Any:
    """``spmdc run --plan auto``: the best candidate (a :class:`~spmdc.api.auto_plan.Candidate`),
    after printing the ranked ones; refused when none fits."""
    device = search_device()
    console.print(f"--plan auto: pricing every layout on {device.describe()}")
    ranked, took, nproc = _search(cfg, device, console)
    cap = cfg.options.memory_cap or device.memory_gib * 2 ** 30
    print_ranked(console, ranked, 8, cap, device)
    best = ranked[0]
    if not best.ok or not best.fits:
        least = min((s for s in ranked if s.ok), key=lambda s: s.peak_bytes, default=best)
        where = "--memory-cap" if cfg.options.memory_cap else f"the {device.name} profile's memory"
        raise UserError(f"--plan auto: no layout for {nproc} ranks fits {where} of {_mib(cap)} per rank: the "
                        f"smallest predicted peak is {_mib(least.peak_bytes)} ({least.candidate.label()}); raise "
                        "the cap, or give more ranks" if best.ok else
                        f"--plan auto: every layout for {nproc} ranks was refused "
                        f"(first: {best.candidate.label()}: {best.refused})")
    sketched = sum(1 for s in ranked if s.sketched)
    console.print(f"--plan auto chose {best.candidate.label()} ({best.step_seconds * 1e3:,.2f} ms predicted, "
                  f"{len(ranked)} candidates in {took:.1f} s" + (f", {sketched} of them sketched only: "
                                                                "--search-budget SECONDS to price more" if sketched
                                                                else "") + ")")
    return best.candidate
