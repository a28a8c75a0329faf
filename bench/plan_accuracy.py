"""The dry run's predictions (``spmdc plan``) against measured runs on CPU ranks (issue 29).

    python bench/plan_accuracy.py [--ranks 4 8] [--quick] [--markdown FILE]

For each rank count, three launches calibrate the ``cpu`` device profile on these ranks (each figure
their median, :mod:`spmdc.tools.calibrate`: op launch, collective latency and bandwidth, matmul FLOP/s, copy
bandwidth, overlap; a few seconds of micro-benchmarks, nothing of the cases), then one launch
(gloo, CPU) runs ``--steps`` training steps of every case (:func:`spmdc.tools.plan_check.measure_cases`)
and this process predicts the same cases with :func:`spmdc.api.dry_run.dry_run` on the calibrated
profile.
Per case (the role with the largest predicted peak):

* collectives and bytes: whether every rank issued exactly its role's predicted collectives and
  bytes (by kind);
* memory: predicted peak per rank (stored parameters and buffers + optimizer state + the step's
  peak) vs measured (the same stored bytes + the step's peak above them, torch.profiler's memory
  events), median of the role's ranks, and the ratio;
* time: predicted vs measured step (the median of the steps between the first and the last two,
  slowest rank), and per model (and batch) whether the
  plans' predicted order matches the measured one (on 2 shared CPU cores the measured times are
  noisy; a tie within 15 % counts as either order).

Models: the built-in gpt2-tiny, llama-tiny and mlp, and HuggingFace GPT-2, Llama and Mixtral at
small sizes and their default settings (factories below); plans fsdp, megatron (or dp for the
MLP), fsdp+tp, plus device groups on 4 ranks and three pipelines (batch 8) on 4 and 8 ranks.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.abspath(__file__)


def hf_gpt2(batch: int = 4):
    import torch
    import transformers as T

    torch.manual_seed(0)
    model = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4))
    ids = torch.randint(0, 256, (batch, 32), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "labels": ids}, None


def hf_llama(batch: int = 4):
    import torch
    import transformers as T

    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
    ids = torch.randint(0, 256, (batch, 32), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "labels": ids}, None


def hf_mixtral(batch: int = 4):
    import torch
    import transformers as T

    torch.manual_seed(0)
    model = T.MixtralForCausalLM(T.MixtralConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                 num_local_experts=4, num_experts_per_tok=2))
    ids = torch.randint(0, 256, (batch, 32), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "labels": ids}, None


def cases(n: int, quick: bool) -> list[tuple]:
    from spmdc.sharding.mesh import Mesh

    half = {"dp": n // 2, "tp": 2}
    models = ["gpt2-tiny", "llama-tiny", "mlp", f"{HERE}:hf_gpt2", f"{HERE}:hf_llama", f"{HERE}:hf_mixtral"]
    if quick:
        models = models[:2]
    out = []
    for w in models:
        tp_plan = ("dp", Mesh({"dp": n})) if w == "mlp" else ("megatron", Mesh({"tp": min(n, 4)} if n <= 4 else
                                                                                 {"dp": n // 4, "tp": 4}))
        if tp_plan[0] == "megatron" and n > 4:
            tp_plan = ("fsdp+tp", Mesh({"dp": n // 4, "tp": 4}))
        for plan, mesh in (("fsdp", Mesh({"dp": n})), tp_plan, ("fsdp+tp", Mesh(half))):
            out.append((w, mesh, plan, "adamw"))
    if n == 4:
        out.append(("gpt2-tiny", None, _groups(), "adamw"))
    from spmdc.sharding.pipeline_plan import PipelinePlan

    pp = PipelinePlan.from_mesh   # pipeline stages (1f1b, 2 micro-batches), a batch of 8
    if n == 4:
        out += [("gpt2-tiny", None, pp("pp=2,dp=2", "fsdp"), "adamw", {"batch": 8}),
                ("llama-tiny", None, pp("pp=2,tp=2", "megatron"), "adamw", {"batch": 8}),
                ("gpt2-tiny", None, pp("pp=4", "dp"), "adamw", {"batch": 8, "n_layer": 4})]
    elif n == 8 and not quick:
        out += [("gpt2-tiny", None, pp("pp=2,dp=2,tp=2", "fsdp+tp"), "adamw", {"batch": 8}),
                ("llama-tiny", None, pp("pp=2,dp=4", "fsdp"), "adamw", {"batch": 8}),
                ("gpt2-tiny", None, pp("pp=4,dp=2", "dp"), "adamw", {"batch": 8, "n_layer": 4})]
    return out


def _groups():
    from spmdc.sharding.plan import Plan

    text = ("name: two-groups\ngroups:\n  - name: a\n    ranks: [0, 1]\n    mesh: dp=2\n    plan: fsdp\n"
            "  - name: b\n    ranks: [2, 3]\n    mesh: dp=2\n    plan: fsdp\n")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        return Plan.load(f.name)
    finally:
        os.remove(f.name)


def _label(w: str) -> str:
    return w.rsplit(":", 1)[-1] if ":" in w else w


def predict(case: tuple, device):
    from spmdc.api.dry_run import dry_run
    from spmdc.frontend.workloads import load_workload

    w, mesh, plan, optimizer, *kw = case
    wl = load_workload(w, **(kw[0] if kw else {}))
    return dry_run(wl.model, wl.inputs, mesh=mesh, plan=plan, device=device, train=True,
                   loss_fn=wl.loss_fn, loss_inputs=wl.loss_inputs, kwargs=wl.kwargs, optimizer=optimizer)


def compare(case: tuple, report, measured: dict[int, list], i: int) -> dict:
    exact = True
    rows = []
    for role in report.roles:
        p = role.prediction
        counts, nbytes = p.by_kind()
        totals = []
        for rank in role.ranks:
            m = measured[rank][i]
            exact &= m["counts"] == counts and m["bytes"] == nbytes and m["stored"] == p.memory.parameters \
                and m["optimizer"] == p.memory.optimizer
            totals.append(m["stored"] + m["optimizer"] + m["peak"])
        rows.append((p.memory.total, statistics.median(totals)))
    pred, meas = max(rows)
    step = max(r.prediction.step_seconds for r in report.roles)
    seconds = max(measured[r][i]["seconds"] for r in measured)
    plan = case[2] if isinstance(case[2], str) else case[2].name
    where = str(case[1]) if case[1] is not None else "stages" if hasattr(case[2], "stages") else "groups"
    model = _label(case[0]) + ("".join(f", {k} {v}" for k, v in case[4].items()) if len(case) > 4 else "")
    return {"model": model, "plan": plan, "mesh": where,
            "exact": exact, "pred": pred, "meas": meas, "ratio": pred / meas, "pred_ms": step * 1000,
            "meas_ms": seconds * 1000, "roles": len(report.roles)}


def ranked(rows: list[dict]) -> dict[str, bool]:
    """Per model: every pair of its plans is predicted in the measured order (or measured within 15 %)."""
    out = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        ok = True
        for a in mine:
            for b in mine:
                if a["meas_ms"] < b["meas_ms"] / 1.15 and not a["pred_ms"] <= b["pred_ms"]:
                    ok = False
        out[model] = ok
    return out


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--quick", action="store_true", help="two models")
    ap.add_argument("--markdown", default=None, metavar="FILE")
    ap.add_argument("--steps", type=int, default=8, help="steps per case: the first warms up, the last two "
                    "measure the peak, the median of the others is the step time")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    from spmdc.runtime.launcher import launch
    from spmdc.tools.calibrate import calibrate, calibrated_profile
    from spmdc.tools.plan_check import measure_cases

    console = Console(width=200)
    md = []
    for n in args.ranks:
        cs = cases(n, args.quick)
        device = calibrated_profile("cpu", calibrate(n))
        console.print(f"{n} ranks, calibrated profile {device.describe()}, launch {device.launch_us:.1f} us, "
                      f"latency {device.latency_us:.0f} us, overlap {device.overlap:.2f}")
        measured = launch(measure_cases, n, (cs, args.steps), timeout_s=3000)
        rows = [compare(c, predict(c, device), measured, i) for i, c in enumerate(cs)]
        order = ranked(rows)
        cols = ["model", "plan", "mesh", "roles", "collectives + bytes + stored exact", "predicted peak KiB",
                "measured peak KiB", "ratio", "predicted step ms", "measured step ms", "plans ranked"]
        table = Table(title=f"dry run vs measured, {n} CPU ranks")
        for c in cols:
            table.add_column(c, justify="left" if c in ("model", "plan", "mesh") else "right")
        md += [f"\n**{n} ranks** (device: {device.describe()}, launch {device.launch_us:.1f} us, latency "
               f"{device.latency_us:.0f} us, overlap {device.overlap:.2f}: measured by spmdc.tools.calibrate in "
               "its own launch)\n", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            cells = [r["model"], r["plan"], r["mesh"], str(r["roles"]), "yes" if r["exact"] else "NO",
                     f"{r['pred'] / 1024:,.1f}", f"{r['meas'] / 1024:,.1f}", f"{r['ratio']:.3f}", f"{r['pred_ms']:.1f}",
                     f"{r['meas_ms']:.1f}", "yes" if order[r["model"]] else "no"]
            table.add_row(*cells)
            md.append("| " + " | ".join(cells) + " |")
        console.print(table)
        worst = max(abs(r["ratio"] - 1) for r in rows)
        line = (f"{n} ranks: {sum(r['exact'] for r in rows)}/{len(rows)} cases exact in collectives, bytes and stored "
                f"state; peak memory within {100 * worst:.1f} % (worst case); plans ranked as measured for "
                f"{sum(order.values())}/{len(order)} models")
        console.print(line)
        md.append("\n" + line + "\n")
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(f"\n## plan_accuracy ({datetime.date.today()})\n\nCommand: `python bench/plan_accuracy.py "
                    f"{' '.join(sys.argv[1:])}` on {platform.machine()}, {os.cpu_count()} CPUs (gloo ranks).\n"
                    + "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
