"""The layout search (``spmdc plan --search``, ``spmdc run --plan auto``) against measured runs (issue 31).

    python bench/auto_plan.py [--ranks 4 8] [--models mlp gpt2-tiny ...] [--top 8] [--markdown FILE]

For each rank count: three launches calibrate the ``cpu`` profile on these ranks (each figure their
median, :mod:`spmdc.tools.calibrate`, as ``spmdc calibrate`` does); this process searches every model's
layouts with it (:func:`spmdc.api.auto_plan.search`, a memory cap of ``--cap-share`` of the largest
predicted peak among the candidates, so that the cap excludes some); a launch per model then measures
its top ``--top`` candidates that fit (:func:`spmdc.tools.plan_check.measure_cases`; one launch
for every model's candidates held all of them in each rank, and the larger heap slowed the
optimizer's update ~25-35 % and steps up to 10 %, against a job that holds one model:
every candidate compiled first, then ``--rounds`` rounds in which the candidates take turns, each
running ``--steps`` timed steps, so that a burst of other work on the machine slows every candidate
a little instead of one a lot (one candidate after another, measured steps moved by up to 40 %);
the median step of the slowest rank, the peak of two steps after the first). Each candidate's row
also sets the predicted parts of the slowest role's step (compute, collectives, update, a
pipeline's fill and drain) beside the measured ones (the program, forward and backward; the time
collectives held it, in spmdc's collective calls and waits and a pipeline stage's receives; the
optimizer's update).
Per model: the Spearman correlation of the predicted and the measured step times of those
candidates, the measurement's agreement with itself (the Spearman correlation of the rankings
measured by two random halves of the rounds, median and lowest of 40 splits: where candidates lie
closer than the machine's noise, no prediction can be confirmed above it), the chosen (predicted
best) candidate's measured time over the best measured one, whether every measured peak (stored
state + the step's peak) is within the cap, and the Spearman correlation of the measured step times
with the job's CPU time over the cores (every rank's process, all its threads, per step, summed, over
``os.cpu_count()``): where ranks share cores a step lasts about the CPU work the job does, and
time a rank waits for its peers costs nothing (hf-llama on 8 ranks sharing 2 cores, 22 candidates:
0.99-1.0, the step 1.05-1.15x the CPU time over the cores).

Models: the built-in mlp, gpt2-tiny and llama-tiny, and HuggingFace GPT-2, Llama and Mixtral at
small sizes and their default settings (bench/plan_accuracy.py's factories), a batch of 8.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plan_accuracy.py")
CORES = os.cpu_count() or 1
MODELS = {"mlp": "mlp", "gpt2-tiny": "gpt2-tiny", "llama-tiny": "llama-tiny", "hf-gpt2": f"{PA}:hf_gpt2",
          "hf-llama": f"{PA}:hf_llama", "hf-mixtral": f"{PA}:hf_mixtral"}


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); 1.0 for fewer than two points."""
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    if len(xs) < 2:
        return 1.0
    a, b = ranks(xs), ranks(ys)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va = sum((x - ma) ** 2 for x in a) ** 0.5
    vb = sum((y - mb) ** 2 for y in b) ** 0.5
    return cov / (va * vb) if va and vb else 0.0


def self_agreement(per_case: list[list[list[list[float]]]], draws: int = 40) -> tuple[float, float] | None:
    """How well the measurement ranks the candidates against itself: ``per_case[k][rank]`` holds
    candidate k's step times per round on that rank; the rounds are split into two random halves
    (``draws`` times, seeded), each half measures every candidate as the bench does (the slowest
    rank's median step), and the Spearman correlation of the two halves' rankings is taken.
    Returns (median, lowest) over the draws: a ranking predicted better than this cannot be
    confirmed by this measurement. None with fewer than two rounds or candidates."""
    import random
    import statistics

    n_rounds = min((len(r) for case in per_case for r in case), default=0)
    if n_rounds < 2 or len(per_case) < 2:
        return None
    rng = random.Random(0)

    def step(case: list[list[list[float]]], rounds: set[int]) -> float:
        return max(statistics.median(t for i, ts in enumerate(r) if i in rounds for t in ts) for r in case)

    rhos = []
    for _ in range(draws):
        half = set(rng.sample(range(n_rounds), n_rounds // 2))
        rest = set(range(n_rounds)) - half
        rhos.append(spearman([step(c, half) for c in per_case], [step(c, rest) for c in per_case]))
    return statistics.median(rhos), min(rhos)


def searched(model: str, n: int, device, cap_share: float, batch: int):
    """(ranked candidates, the cap in bytes, search seconds): a first search without a cap fixes it."""
    from spmdc.api.auto_plan import search
    from spmdc.frontend.workloads import load_workload

    w = load_workload(MODELS[model], batch=batch)
    kw = dict(nproc=n, device=device, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, kwargs=w.kwargs,
              optimizer="adamw")
    t = time.perf_counter()
    first = search(w.model, w.inputs, **kw)
    took = time.perf_counter() - t
    peaks = [s.peak_bytes for s in first if s.ok]
    cap = cap_share * max(peaks)
    from spmdc.api.auto_plan import fits_cap, rank

    for s in first:   # (the same predictions under the cap; over it, a search would try checkpointed blocks)
        s.fits = s.ok and fits_cap(s.peak_bytes, cap)
    return rank(first), cap, took


def main() -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--top", type=int, default=8, help="candidates measured per model (default 8)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per candidate and round")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds in which the candidates take turns (default 5; 1: one candidate after another)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--cap-share", type=float, default=0.9,
                    help="memory cap: this share of the largest predicted peak among a model's candidates")
    ap.add_argument("--markdown", default=None, metavar="FILE")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    from spmdc.runtime.launcher import launch
    from spmdc.tools.calibrate import calibrate, calibrated_profile
    from spmdc.tools.plan_check import measure_cases

    console = Console(width=220)
    md = []
    for n in args.ranks:
        device = calibrated_profile("cpu", calibrate(n))
        console.print(f"{n} ranks: calibrated {device.describe()}, launch {device.launch_us:.1f} us, latency "
                      f"{device.latency_us:.0f} us, overlap {device.overlap:.2f}, "
                      f"idle speedup {device.idle_speedup:.2f}, sync {device.sync_us / 1e3:.2f} ms")
        picks, caps, took = {}, {}, {}
        measured: dict[str, dict] = {}
        for model in args.models:
            ranked, caps[model], took[model] = searched(model, n, device, args.cap_share, args.batch)
            picks[model] = [s for s in ranked if s.ok and s.fits][:args.top]
            console.print(f"  {model}: {len(ranked)} candidates priced in {took[model]:.1f} s, "
                          f"{len(picks[model])} measured")
        for model in args.models:   # (a launch per model: each job holds one model, as a user's does)
            cases = [(MODELS[model], *s.candidate.plan(), "adamw", {"batch": args.batch}) for s in picks[model]]
            # (one after another, measure_cases' steps also hold the first step and the 2 profiled ones)
            steps = args.steps if args.rounds > 1 else args.steps + 3
            measured[model] = launch(measure_cases, n, (cases, steps, 0.01, 2, args.rounds), timeout_s=3000)
        summary = []
        cols = ["model", "#", "candidate", "predicted ms", "measured ms", "predicted peak KiB", "measured peak KiB",
                "within cap", "predicted compute/comm/update/bubble ms", "measured program/comm/update ms",
                "measured CPU / cores ms"]
        table = Table(title=f"search vs measured, {n} CPU ranks")
        for c in cols:
            table.add_column(c, justify="left" if c in ("model", "candidate") else "right")
        md += [f"\n**{n} ranks** (calibrated: launch {device.launch_us:.1f} us, latency {device.latency_us:.0f} us, "
               f"{device.intra_gbps:.2f} GB/s, overlap {device.overlap:.2f}, idle speedup {device.idle_speedup:.2f}, "
               f"sync {device.sync_us / 1e3:.2f} ms, "
               f"{args.rounds} rounds of {args.steps} steps)\n",
               "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for model in args.models:
            pred, meas, cpu, ok_cap = [], [], [], True
            for k, s in enumerate(picks[model]):
                per_rank = [measured[model][r][k] for r in measured[model]]
                ms = max(m["seconds"] for m in per_rank) * 1e3
                peak = max(m["stored"] + m["optimizer"] + m["peak"] for m in per_rank)
                within = peak <= caps[model]
                ok_cap &= within
                pred.append(s.step_seconds * 1e3)
                meas.append(ms)
                cpu.append(sum(m.get("cpu_seconds", 0.0) for m in per_rank) / CORES * 1e3)
                slow = max(per_rank, key=lambda m: m["seconds"])
                cells = [model, str(k + 1), s.candidate.label(), f"{s.step_seconds * 1e3:.1f}", f"{ms:.1f}",
                         f"{s.peak_bytes / 1024:,.1f}", f"{peak / 1024:,.1f}", "yes" if within else "NO",
                         "/".join(f"{x * 1e3:.1f}" for x in s.parts),
                         "/".join(f"{slow.get(x, float('nan')) * 1e3:.1f}"
                                  for x in ("program_seconds", "comm_seconds", "update_seconds")),
                         f"{cpu[-1]:.1f}"]
                table.add_row(*cells)
                md.append("| " + " | ".join(cells) + " |")
            rho = spearman(pred, meas)
            chosen = meas[0] / min(meas) if meas else float("nan")
            itself = self_agreement([[measured[model][r][k].get("round_seconds", []) for r in measured[model]]
                                     for k in range(len(picks[model]))])
            summary.append((model, len(pred), rho, itself, chosen, ok_cap, took[model], spearman(cpu, meas)))
        console.print(table)
        st = Table(title=f"per model, {n} ranks")
        scols = ["model", "measured", "Spearman", "measured vs itself: median / lowest", "chosen / best measured",
                 "peaks within cap", "search s", "measured vs CPU / cores: Spearman"]
        for c in scols:
            st.add_column(c, justify="left" if c == "model" else "right")
        md += ["", "| " + " | ".join(scols) + " |", "|" + "---|" * len(scols)]
        for model, k, rho, itself, chosen, ok_cap, secs, by_cpu in summary:
            agree = "-" if itself is None else f"{itself[0]:.2f} / {itself[1]:.2f}"
            cells = [model, str(k), f"{rho:.2f}", agree, f"{chosen:.2f}", "yes" if ok_cap else "NO", f"{secs:.1f}",
                     f"{by_cpu:.2f}"]
            st.add_row(*cells)
            md.append("| " + " | ".join(cells) + " |")
        console.print(st)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(f"\n## auto_plan ({datetime.date.today()})\n\nCommand: `python bench/auto_plan.py "
                    f"{' '.join(sys.argv[1:])}` on {platform.machine()}, {os.cpu_count()} CPUs (gloo ranks).\n"
                    + "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
