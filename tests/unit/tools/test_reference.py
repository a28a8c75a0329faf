"""``--check``'s reference: eager replay of the run's settings, and the float64 second opinion."""

import torch

from spmdc.tools.reference import TrainSettings, compare, eager_reference, judge_by_float32, judge_by_float64


def _run(value: float, w: list[float]) -> dict:
    return {"losses": [value], "state": {"w": torch.tensor(w)}}


def test_float64_second_opinion_tells_noise_from_a_bug():
    exact = _run(1.0, [1.0, 2.0])
    eager = _run(1.0, [1.0 + 3e-4, 2.0])   # float32 eager is itself 3e-4 off the float64 run
    noisy = _run(1.0, [1.0 - 5e-4, 2.0])   # spmdc: over rtol against eager, but as far from exact
    ok, rows = compare(eager, noisy, rtol=1e-4, atol=1e-5)
    assert not ok and [r.name for r in rows if not r.ok] == ["w"]
    assert judge_by_float64(rows, eager, exact, noisy, atol=1e-5)
    assert rows[1].ok and rows[1].noise == "5.0e-04 vs 3.0e-04"

    wrong = _run(1.0, [1.0 - 5e-3, 2.0])   # 17x eager's own error: a bug, not rounding
    ok, rows = compare(eager, wrong, rtol=1e-4, atol=1e-5)
    assert not judge_by_float64(rows, eager, exact, wrong, atol=1e-5) and not rows[1].ok


def test_float64_second_opinion_counts_flipped_adam_steps_across_parameters():
    """AdamW: an element with a near-zero gradient moves lr·sign(rounding); such a flip lands in one
    parameter or another by chance (eager float32 off float64 in ``b``, spmdc in ``a``, where eager's
    own error is tiny): noise. Many elements off, or one far, are a bug."""
    lr, n = 1e-3, 100
    base = [1e-3 * k for k in range(n)]

    def run(a_flips: list[int] = (), b_flips: list[int] = (), by: float = 2 * lr) -> dict:
        def w(flips):
            return torch.tensor([v + (by if k in flips else 0.0) for k, v in enumerate(base)], dtype=torch.float64)
        return {"losses": [1.0], "state": {"a": w(a_flips) + 1e-7, "b": w(b_flips)}}
    exact, eager = run(), run(b_flips=[5, 9])
    flipped = run(a_flips=[3])
    ok, rows = compare(eager, flipped, rtol=1e-4, atol=1e-5)
    assert not ok and judge_by_float64(rows, eager, exact, flipped, atol=1e-5, rtol=1e-4)
    assert [r.name for r in rows if r.noise] == ["a", "b"] and all(r.ok for r in rows)   # (b: eager's flips)
    for bug in (run(a_flips=list(range(10))), run(a_flips=[3], by=20 * lr)):   # many elements; one far
        ok, rows = compare(eager, bug, rtol=1e-4, atol=1e-5)
        assert not judge_by_float64(rows, eager, exact, bug, atol=1e-5, rtol=1e-4)
        assert not next(r for r in rows if r.name == "a").ok


def test_float64_second_opinion_asks_another_summation_order():
    """Eager float32 can sit near float64 by chance where one rounding more moves an element far (HF
    Falcon under AdamW: 8.6e-6 from float64, 1.3e-4 with the batch split in 2): with that split run
    as another opinion, spmdc's 1.8e-4 is noise; 40x the split's error is still a bug."""
    exact = _run(1.0, [1.0, 2.0])
    eager = _run(1.0, [1.0 + 8.6e-6, 2.0])
    split = _run(1.0, [1.0 - 1.3e-4, 2.0])
    spmdc = _run(1.0, [1.0 + 1.8e-4, 2.0])
    ok, rows = compare(eager, spmdc, rtol=1e-4, atol=1e-6)
    assert not ok and not judge_by_float64(rows, eager, exact, spmdc, atol=1e-6)   # eager alone: a bug
    ok, rows = compare(eager, spmdc, rtol=1e-4, atol=1e-6)
    assert judge_by_float64(rows, eager, exact, spmdc, atol=1e-6, split=split)
    assert rows[1].noise == "1.8e-04 vs 1.3e-04"
    bug = _run(1.0, [1.0 + 5.2e-3, 2.0])
    ok, rows = compare(eager, bug, rtol=1e-4, atol=1e-6)
    assert not judge_by_float64(rows, eager, exact, bug, atol=1e-6, split=split) and not rows[1].ok


def test_float32_second_opinion_under_mixed_precision_counts_flipped_adam_steps():
    """bf16 + AdamW: an element with a near-zero gradient moves lr·sign(rounding) per step, so spmdc and
    eager bf16 sit 2·lr apart there, as eager float32 does elsewhere; many such elements are a bug."""
    lr, n = 1e-3, 100
    base = [1e-3 * k for k in range(n)]

    def run(flipped: list[int], by: float = 2 * lr) -> dict:
        return {"losses": [1.0], "state": {"w": torch.tensor([v + (by if k in flipped else 0.0)
                                                              for k, v in enumerate(base)])}}
    bf16, fp32 = run([]), run([3, 50])
    ok, rows = compare(bf16, run([7, 8, 9]), rtol=2e-2, atol=1e-3)
    assert not ok and judge_by_float32(rows, bf16, fp32, run([7, 8, 9]), rtol=2e-2, atol=1e-3)
    assert rows[1].noise == "3 vs 2 of 100" and rows[1].ok
    many = run(list(range(10)))   # 10 elements off: more than 2x eager float32's + 2
    ok, rows = compare(bf16, many, rtol=2e-2, atol=1e-3)
    assert not judge_by_float32(rows, bf16, fp32, many, rtol=2e-2, atol=1e-3) and not rows[1].ok
    far = run([0], by=20 * lr)    # one element 10x further than eager float32's largest difference
    ok, rows = compare(bf16, far, rtol=2e-2, atol=1e-3)
    assert not judge_by_float32(rows, bf16, fp32, far, rtol=2e-2, atol=1e-3)
    off = {"losses": [1.1], "state": bf16["state"]}   # losses are never excused
    ok, rows = compare(bf16, off, rtol=2e-2, atol=1e-3)
    assert not judge_by_float32(rows, bf16, fp32, off, rtol=2e-2, atol=1e-3)


def test_the_batch_split_as_the_ranks_split_it_counts_as_eager_noise():
    """Data-parallel ranks round each piece's low-precision gradient and sum them in float32: where the
    pieces cancel (a near-zero gradient) that rounds further from the whole batch's, and eager low
    precision with the batch in those pieces (``split``) flips as many elements; spmdc is judged
    against the larger of its and eager float32's counts, and a bug beyond both still fails."""
    lr, n = 1e-3, 100
    base = [1e-3 * k for k in range(n)]

    def run(flipped: list[int], by: float = 2 * lr) -> dict:
        return {"losses": [1.0], "state": {"w": torch.tensor([v + (by if k in flipped else 0.0)
                                                              for k, v in enumerate(base)])}}
    bf16, fp32, split = run([]), run([3]), run(list(range(20, 30)))
    got = run(list(range(0, 15)))   # 15 flipped: over 2x eager float32's + 2, within 2x the split's + 2
    ok, rows = compare(bf16, got, rtol=2e-2, atol=1e-3)
    assert not ok and not judge_by_float32(rows, bf16, fp32, got, rtol=2e-2, atol=1e-3)
    ok, rows = compare(bf16, got, rtol=2e-2, atol=1e-3)
    assert judge_by_float32(rows, bf16, fp32, got, rtol=2e-2, atol=1e-3, split=split)
    assert rows[1].noise == "15 vs 10 of 100"
    many = run(list(range(0, 30)))   # 30: beyond the split's count too
    ok, rows = compare(bf16, many, rtol=2e-2, atol=1e-3)
    assert not judge_by_float32(rows, bf16, fp32, many, rtol=2e-2, atol=1e-3, split=split)


def test_reference_with_micro_batches_and_clipping_is_one_big_batch():
    one = eager_reference("mlp", 3, True, 0, TrainSettings("adamw", 0.01, clip_grad_norm=0.1))
    four = eager_reference("mlp", 3, True, 0, TrainSettings("adamw", 0.01, clip_grad_norm=0.1, grad_accum=4))
    torch.testing.assert_close(torch.tensor(four["losses"]), torch.tensor(one["losses"]), rtol=1e-5, atol=1e-6)
    for k, v in one["state"].items():
        torch.testing.assert_close(four["state"][k], v, rtol=1e-4, atol=1e-5)


def test_resumed_reference_replays_the_saved_steps_first():
    whole = eager_reference("mlp", 4, True, 0, TrainSettings("sgd", 0.05))
    tail = eager_reference("mlp", 2, True, 0, TrainSettings("sgd", 0.05), before=(2, TrainSettings("sgd", 0.05)))
    assert tail["losses"] == whole["losses"][2:]
    changed = eager_reference("mlp", 2, True, 0, TrainSettings("sgd", 0.5), before=(2, TrainSettings("sgd", 0.05)))
    assert changed["losses"][0] == whole["losses"][2] and changed["losses"][1] != whole["losses"][3]


def test_the_split_is_replayed_only_for_models_that_draw_no_random_numbers(tmp_path):
    """batch_pieces: gpt2-tiny on dp=4 (batch 2: two pieces) is replayed split; a model with dropout on
    (several per step, drawn layer by layer) is not — eager PyTorch piece by piece would draw other
    masks than the ranks, so its differences would excuse anything; the same model in eval draws none."""
    from spmdc.sharding.mesh import Mesh
    from spmdc.tools.run_cmd import RunConfig
    from spmdc.tools.run_report import batch_pieces

    dp4 = Mesh({"dp": 4})
    assert batch_pieces(RunConfig(workload="gpt2-tiny", mesh="dp=4", plan="dp"), dp4, "dp") == 2
    path = tmp_path / "drop.py"
    path.write_text("import torch, torch.nn as nn\n"
                    "def factory(train: bool = True):\n"
                    "    torch.manual_seed(0)\n"
                    "    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.Linear(8, 8), nn.Dropout(0.1))\n"
                    "    m.train(train)\n"
                    "    return m, (torch.randn(4, 8),), None\n"
                    "def frozen():\n"
                    "    return factory(train=False)\n")
    assert batch_pieces(RunConfig(workload=f"{path}:factory", mesh="dp=4", plan="dp"), dp4, "dp") == 1
    assert batch_pieces(RunConfig(workload=f"{path}:frozen", mesh="dp=4", plan="dp"), dp4, "dp") == 4
    # a model fed by keyword (a Hugging Face model's input_ids=...): its first tensor input counts
    path.write_text("import torch, torch.nn as nn\n"
                    "class M(nn.Module):\n"
                    "    def __init__(self):\n"
                    "        super().__init__()\n"
                    "        self.fc = nn.Linear(8, 8)\n"
                    "    def forward(self, x=None):\n"
                    "        return self.fc(x).sum()\n"
                    "def factory():\n"
                    "    torch.manual_seed(0)\n"
                    "    return M(), {'x': torch.randn(4, 8)}, None\n")
    assert batch_pieces(RunConfig(workload=f"{path}:factory", mesh="dp=4", plan="dp"), dp4, "dp") == 4


def test_pipelines_and_device_groups_replay_their_replicas_pieces():
    """batch_pieces for the other layout kinds (resolved as ``spmdc run`` resolves them): a pipeline
    over pp=2,dp=2 holds 2 replicas (its micro-batches are the reference's accumulation already), so
    batch 8 in 2 micro-batches splits in 2; device groups whose replicas hold equal rows (shares 2:1
    over dp=2 and dp=1) in 3; shares that give replicas unequal rows replay no split."""
    from spmdc.tools.run_cmd import RunConfig, resolve_mesh_and_plan
    from spmdc.tools.run_report import batch_pieces

    cfg = RunConfig(workload="gpt2-tiny", mesh="pp=2,dp=2", plan="dp", batch=8)
    mesh, plan = resolve_mesh_and_plan(cfg)
    assert plan.microbatches == 2 and batch_pieces(cfg, mesh, plan) == 2
    cfg = RunConfig(workload="gpt2-tiny", mesh="pp=2,dp=2", plan="dp", batch=2)   # 2 rows in 2 micro-batches
    assert batch_pieces(cfg, *resolve_mesh_and_plan(cfg)) == 1
    from spmdc.sharding.device_groups import HeteroPlan

    def groups(share0: int, share1: int) -> HeteroPlan:
        return HeteroPlan.from_dict({"groups": [
            {"ranks": [0, 1], "mesh": "dp=2", "plan": "dp", "share": share0},
            {"ranks": [2], "mesh": "dp=1", "plan": "dp", "share": share1}]})
    cfg = RunConfig(workload="gpt2-tiny", batch=6)
    assert batch_pieces(cfg, None, groups(2, 1)) == 3
    assert batch_pieces(cfg, None, groups(1, 1)) == 1


def test_without_a_float64_run_the_ranks_split_is_the_second_opinion(monkeypatch):
    """A model float64 cannot run (an op without float64 kernels: HF Mixtral's grouped_mm) was an
    internal error of --check; now eager float32 with the batch split as the ranks split it judges
    the values over tolerance, and where the ranks do not split the batch they stand, said so."""
    import io

    import torch
    from rich.console import Console

    import spmdc.tools.reference as reference
    from spmdc.tools.run_cmd import RunConfig
    from spmdc.tools.run_report import _judged_without_float64

    want = {"losses": [1.0], "state": {"w": torch.zeros(100)}}
    got = {"losses": [1.0], "state": {"w": torch.zeros(100)}}
    got["state"]["w"][:3] = 1e-3   # 3 elements over tolerance
    split = {"losses": [1.0], "state": {"w": torch.zeros(100)}}
    split["state"]["w"][:2] = 2e-3   # rounding alone moves 2 elements as far
    asked = []
    monkeypatch.setattr(reference, "eager_reference", lambda *a, **k: asked.append(a[4].grad_accum) or split)
    cfg = RunConfig(workload="mlp", mesh="dp=4", plan="dp")
    settings = reference.TrainSettings("adamw", 0.01)
    err = RuntimeError("Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double")
    for pieces, verdict, said in ((4, True, "judged against eager float32 with the batch split in the ranks' 4 pieces"),
                                  (1, False, "the values over tolerance stand")):
        _, rows = reference.compare(want, got, 1e-4, 1e-5)
        assert not all(r.ok for r in rows)
        out = io.StringIO()
        ok = _judged_without_float64(Console(file=out, width=300), err, cfg, 0, settings, None, rows, want, got,
                                     1e-4, 1e-5, pieces)
        text = " ".join(out.getvalue().split())
        assert ok is verdict and "cannot run this model (RuntimeError: Expected mat_a" in text and said in text, text
    assert asked == [4]   # (the replay: grad_accum x the ranks' pieces; none where there is one piece)


def test_a_resumed_runs_history_is_replayed_on_the_batch_it_trained_on():
    """A checkpoint saved by a run on another batch (a pipeline plan's ``batch: 8`` and 8 micro-batches)
    resumed under the workload's default batch (2): --check replays the saved steps on batch 8 (no
    IndexError splitting 2 rows into 8), then the new step on 2 — the same as training the two stretches
    by hand; an old checkpoint without a batch replays on the current one, as before."""
    from spmdc.frontend.workloads import load_workload

    now = TrainSettings(optimizer="sgd", lr=0.1)
    saved = TrainSettings(optimizer="sgd", lr=0.1, grad_accum=8, batch=8)
    got = eager_reference("gpt2-tiny", 1, True, 0, now, before=(1, saved))
    torch.manual_seed(0)
    model = load_workload("gpt2-tiny").model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for w, n in ((load_workload("gpt2-tiny", batch=8), 8), (load_workload("gpt2-tiny"), 1)):
        opt.zero_grad()
        for ids, tgt in zip(w.inputs[0].chunk(n), w.loss_inputs[0].chunk(n)):
            (w.loss_fn(model(ids), tgt) / n).backward()
        opt.step()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(got["state"][k], v, rtol=1e-5, atol=1e-6)
    old = eager_reference("gpt2-tiny", 1, True, 0, now, before=(1, TrainSettings(optimizer="sgd", lr=0.1)))
    assert any(not torch.equal(old["state"][k], got["state"][k]) for k in got["state"])


def test_a_history_trained_in_low_precision_is_judged_as_low_precision():
    """A float32 run resumed from a bf16 run's checkpoint: eager replays the history in bf16 (in
    another order than the ranks), so the compared steps carry bf16 rounding; ``--check`` takes the
    mixed-precision tolerances for it (the user's --rtol/--atol still win)."""
    from spmdc.tools.run_cmd import RunConfig

    cfg = RunConfig(workload="gpt2-tiny", mesh="dp=4", plan="fsdp")
    assert cfg.tolerances == cfg.tolerances_for(False) == (1e-4, 1e-5)
    assert cfg.tolerances_for(True) == (2e-2, 1e-3)
    own = RunConfig(workload="gpt2-tiny", mesh="dp=4", plan="fsdp", rtol=1e-6, atol=1e-7)
    assert own.tolerances_for(True) == (1e-6, 1e-7)



def _recorded_run(trail, settings, steps, bug=None):
    """A "run" as eager PyTorch makes it (with the batch in 2 pieces: another summation order), its
    state before each step recorded as the ranks record it; ``bug(k, model, before)`` after step k."""
    import dataclasses

    class Record:
        def before(self, k, model, opt):   # (as a checkpoint holds them: the model's keys, the optimizer's)
            import torch.distributed.checkpoint as dcp

            self.state = {n: v.clone() for n, v in model.state_dict().items()}
            saved = {f"model.{n}": v for n, v in self.state.items()}
            for n, p in model.named_parameters():
                saved |= {f"optim.state.{n}.{slot}": v.clone() for slot, v in opt.state.get(p, {}).items()}
            dcp.save(saved, checkpoint_id=trail.path("run", k), no_dist=True)

        def after(self, k, loss, model):
            if bug is not None:
                bug(k, model, self.state)

    run = eager_reference("gpt2-tiny", steps, True, 0, dataclasses.replace(settings, grad_accum=2), replay=Record())
    return {"losses": run["losses"], "state": run["state"], "start_step": 0}


def test_step_by_step_replay_tells_amplified_rounding_from_a_wrong_step():
    """Under bf16 + AdamW at lr 0.05 the trajectories of two correct runs part; --check's step-by-step
    opinion replays each step from the run's own state: a run that sums its batch in 2 pieces passes
    every step (judged by eager float32's noise alone, no split opinion); a run whose third update is
    10 % too long in one parameter, or whose second reported loss is 5 % off, fails at that step (the
    parameter named)."""
    import io

    from rich.console import Console

    from spmdc.compiler.options import CompileOptions
    from spmdc.tools.run_cmd import RunConfig
    from spmdc.tools.step_replay import StateTrail, judge_step_by_step

    cfg = RunConfig(workload="gpt2-tiny", mesh="dp=2", plan="dp", optimizer="adamw", steps=4,
                    options=CompileOptions(mixed_precision="bf16"))
    settings = TrainSettings("adamw", 0.05, mixed_precision="bf16")
    rtol, atol = cfg.tolerances
    name = "h.0.mlp.c_fc.weight"

    def judged(r0, trail):
        out = io.StringIO()
        ok = judge_step_by_step(Console(file=out, width=300), cfg, 0, settings, None, r0, rtol, atol, 1, trail)
        return ok, " ".join(out.getvalue().split())

    def longer(k, model, before):
        if k == 2:
            with torch.no_grad():
                w = model.get_parameter(name)
                w.add_(0.1 * (w - before[name]))

    trail = StateTrail.create()
    try:
        ok, text = judged(_recorded_run(trail, settings, 4), trail)
        assert ok and "step by step" in text and "NO" not in text, text
        ok, text = judged(_recorded_run(trail, settings, 4, bug=longer), trail)
        assert not ok and name in text, text
        off = _recorded_run(trail, settings, 4)
        off["losses"][1] *= 1.05
        ok, text = judged(off, trail)
        assert not ok and "NO" in text, text
    finally:
        trail.remove()
