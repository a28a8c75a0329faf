"""The layout search (spmdc.api.auto_plan, spmdc plan --search, spmdc run --plan auto) and stored
device profiles (spmdc calibrate).

No ranks for the search itself: candidates are enumerated per mesh factorization, each compiled for
its whole world by the dry run and ranked by predicted step time under the memory cap; the chosen
plan is written as a plan file that loads back as the same plan (its mesh with it). A candidate
the compiler refuses keeps its reason; a cap no candidate fits is reported. ``spmdc run --plan
auto --check`` searches, runs the best layout on ranks and matches one device.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from spmdc.api.auto_plan import Candidate, Scored, candidates, rank, search
from spmdc.compiler.devices import DeviceProfile, device_profile, load_profile, save_profile
from spmdc.frontend.workloads import load_workload
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.pipeline_plan import PipelinePlan
from spmdc.sharding.plan import Plan, PlanError


def _meshes(cs):
    return {c.mesh_text for c in cs}


def test_candidates_cover_every_factorization_and_preset():
    cs = candidates(4, blocks=2)
    assert _meshes(cs) == {"dp=4", "tp=4", "dp=2,tp=2", "rep=2,dp=2", "pp=2,dp=2", "pp=2,tp=2"}
    by = {(c.mesh_text, c.preset, c.reshard_after_forward, c.microbatches) for c in cs}
    assert ("dp=4", "dp", True, 0) in by and ("dp=4", "fsdp", False, 0) in by    # keep gathered too
    assert ("tp=4", "megatron", True, 0) in by and ("dp=2,tp=2", "fsdp+tp", True, 0) in by
    assert {("pp=2,dp=2", "fsdp", True, 2), ("pp=2,dp=2", "fsdp", True, 4)} <= by   # micro-batches: 1x, 2x stages
    assert not any(c.pipeline and not c.reshard_after_forward for c in cs)   # (a stage keeps nothing F -> B)
    assert len(cs) == len(set(cs))
    # pp at most one stage per block, none without blocks; tp within a node; ep only with experts
    assert "pp=4" in _meshes(candidates(4, blocks=4)) and "pp=4" not in _meshes(cs)
    assert not any(c.pipeline for c in candidates(4, blocks=0))
    assert "tp=4" not in _meshes(candidates(4, blocks=2, max_tp=2))
    assert not any(a == "ep" for c in cs for a, _ in c.mesh)
    assert {"ep", "fsdp+ep"} <= {c.preset for c in candidates(4, blocks=2, experts=True)}
    assert _meshes(candidates(1)) == {"dp=1"}


def test_plan_files_load_back_as_the_same_plan(tmp_path):
    c = Candidate((("dp", 2), ("tp", 2)), "fsdp+tp", reshard_after_forward=False, checkpoint=True)
    path = tmp_path / "chosen.yaml"
    path.write_text(c.plan_file("a header\nsecond line"))
    loaded = Plan.load(str(path))
    assert (loaded.preset, loaded.mesh, loaded.reshard_after_forward, loaded.checkpoint) == \
        ("fsdp+tp", "dp=2,tp=2", False, "blocks")
    half = Candidate((("dp", 4),), "fsdp", checkpoint=2)
    path.write_text(half.plan_file())
    assert Plan.load(str(path)).checkpoint == "blocks/2" and "checkpoint blocks/2" in half.label()
    p = Candidate((("pp", 2), ("dp", 2)), "fsdp", microbatches=4)
    path.write_text(p.plan_file())
    pipe = Plan.load(str(path))
    want = p.plan()[1]
    assert isinstance(pipe, PipelinePlan) and pipe.microbatches == 4 == want.microbatches
    assert [(s.ranks, str(s.mesh)) for s in pipe.stages] == [(s.ranks, str(s.mesh)) for s in want.stages]
    path.write_text("preset: fsdp\nmesh: dp=two\n")
    with pytest.raises(PlanError, match=r"chosen.yaml:2:\d+: error: mesh: .*two"):
        Plan.load(str(path))


def test_rank_puts_fitting_candidates_first_by_time():
    c = [Candidate((("dp", k),), "dp") for k in (1, 2, 3, 4)]
    ranked = rank([Scored(c[0], 1.0, 10, True), Scored(c[1], 0.5, 99, False), Scored(c[2], refused="no"),
                   Scored(c[3], 2.0, 5, True)])
    assert [s.candidate for s in ranked] == [c[0], c[3], c[1], c[2]]


def test_search_prices_every_candidate_and_respects_the_cap():
    w = load_workload("gpt2-tiny")
    kw = dict(nproc=4, device=device_profile("cpu"), loss_fn=w.loss_fn, loss_inputs=w.loss_inputs,
              optimizer="adamw", only=lambda c: c.mesh_text in ("dp=4", "tp=4", "pp=2,tp=2"))
    ranked = search(w.model, w.inputs, **kw)
    assert {s.candidate.mesh_text for s in ranked} == {"dp=4", "tp=4", "pp=2,tp=2"}
    ok = [s for s in ranked if s.ok]
    assert ok and all(s.fits and s.step_seconds > 0 and s.peak_bytes > 0 for s in ok)
    assert [s.step_seconds for s in ok] == sorted(s.step_seconds for s in ok)
    refused = [s for s in ranked if not s.ok]   # 4 micro-batches of a batch of 2: the compiler's reason
    assert refused and all("micro-batches" in s.refused for s in refused)
    # a cap below every candidate's peak: none fits, each over the cap tried with checkpointed blocks
    low = search(w.model, w.inputs, memory_cap=1024, **kw)
    assert not any(s.fits for s in low)
    assert all(s.candidate.checkpoint for s in low if s.ok)


def test_over_the_cap_half_the_blocks_are_recomputed_first():
    """A cap the plain candidate's peak is over but every 2nd block recomputed (blocks/2: h.0 and h.2 of a
    4-block gpt2-tiny under fsdp on dp=4) fits: the search keeps blocks/2, not every block (less
    recomputation); a lower cap takes every block."""
    from spmdc.api.auto_plan import MARGIN, _score

    w = load_workload("gpt2-tiny", batch=8, n_layer=4)
    dev = device_profile("cpu")
    kw = dict(train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, kwargs=None, optimizer="adamw", options=None)
    c = Candidate((("dp", 4),), "fsdp")
    peaks = {k: _score(dataclasses.replace(c, checkpoint=k), w.model, w.inputs, dev, float("inf"), kw).peak_bytes
             for k in (0, 2, 1)}
    assert peaks[1] < peaks[2] < peaks[0], peaks
    only = dict(nproc=4, device=dev, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, optimizer="adamw",
                only=lambda x: x.label() == c.label())
    (s,) = search(w.model, w.inputs, memory_cap=peaks[2] * (1 + MARGIN) + 1, **only)
    assert s.fits and s.candidate.checkpoint == 2 and s.candidate.plan()[1].checkpoint == "blocks/2"
    (s,) = search(w.model, w.inputs, memory_cap=peaks[1] * (1 + MARGIN) + 1, **only)
    assert s.fits and s.candidate.checkpoint == 1


def test_the_best_fsdp_layout_is_priced_again_with_buckets_by_the_cost_model(tmp_path):
    """The issue's "FSDP bucketing": once the candidates are priced, the best one priced from its
    programs, when an fsdp layout bucketed per block, is priced again with its gathers bucketed by
    the cost model (``buckets: auto``) and ranked with the others; its plan file runs as written."""
    w = load_workload("gpt2-tiny")
    kw = dict(nproc=4, device=device_profile("cpu"), loss_fn=w.loss_fn, loss_inputs=w.loss_inputs,
              optimizer="adamw", only=lambda c: c.mesh_text == "dp=4" and c.preset == "fsdp")
    ranked = search(w.model, w.inputs, **kw)
    autos = [s for s in ranked if s.candidate.buckets]
    parent = rank([s for s in ranked if not s.candidate.buckets])[0]   # (the best before the refinement)
    assert len(autos) == 1 and len(ranked) == 3, [s.candidate.label() for s in ranked]
    auto = autos[0]
    assert auto.candidate == dataclasses.replace(parent.candidate, buckets="auto")
    assert auto.candidate.label() == parent.candidate.label() + ", buckets auto"
    assert auto.ok and not auto.sketched and auto.collectives < parent.collectives, (auto, parent)
    assert [s.step_seconds for s in ranked if s.fits] == sorted(s.step_seconds for s in ranked if s.fits)
    path = tmp_path / "auto.yaml"
    path.write_text(auto.candidate.plan_file())
    assert "buckets: auto" in path.read_text() and Plan.load(str(path)).buckets == "auto"
    assert auto.candidate.plan()[1].buckets == "auto"
    # a pipeline's stages carry it too; a filter that leaves it out is kept
    pipe = Candidate((("pp", 2), ("dp", 2)), "fsdp", microbatches=2, buckets="auto")
    assert all(s.plan.buckets == "auto" for s in pipe.plan()[1].stages)
    only = search(w.model, w.inputs, **{**kw, "only": lambda c: c.label() == "fsdp on dp=4"})
    assert [s.candidate.label() for s in only] == ["fsdp on dp=4"]


def _cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "spmdc.tools.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_plan_search_writes_the_chosen_plan_and_run_takes_it(tmp_path):
    out, js = tmp_path / "chosen.yaml", tmp_path / "ranked.json"
    r = _cli("plan", "mlp", "--search", "--nproc", "2", "--device", "cpu", "--write-plan", str(out),
             "--json", str(js))
    assert r.returncode == 0, r.stdout + r.stderr
    ranked = json.loads(js.read_text())["candidates"]
    assert {c["mesh"] for c in ranked} == {"dp=2", "tp=2"}
    best = ranked[0]
    assert f"chosen: {best['plan']}" in r.stdout and best["fits"]
    assert Plan.load(str(out)).mesh == best["mesh"]
    r = _cli("run", "mlp", "--plan", str(out), "--check", "--steps", "2")
    assert r.returncode == 0 and "check passed" in r.stdout, r.stdout + r.stderr
    assert f"mesh {best['mesh']}" in r.stdout
    other = "tp=2" if best["mesh"] == "dp=2" else "dp=2"
    r = _cli("run", "mlp", "--plan", str(out), "--mesh", other)
    assert r.returncode == 1 and f"is for mesh {best['mesh']} (its 'mesh' key)" in r.stderr, r.stderr


def test_search_refuses_what_it_chooses_and_bad_files(tmp_path):
    for args, msg in ((("--fsdp-shard", "whole"), "--fsdp-shard with --plan auto / --search"),
                      (("--microbatches", "2"), "--microbatches with --plan auto / --search"),
                      (("--write-plan", str(tmp_path / "x.txt")), "expected a .yaml file"),
                      (("--mesh", "dp=2,xx=2"), "no candidate layout for 4 ranks on mesh dp=2,xx=2: mesh axis 'xx' "
                                                "is not one the search lays out (pp, rep, dp, tp, ep)")):
        r = _cli("plan", "mlp", "--search", "--device", "cpu", *args)
        assert r.returncode == 1 and msg in r.stderr, r.stderr
    r = _cli("plan", "mlp", "--write-plan", str(tmp_path / "x.yaml"), "--device", "cpu")
    assert r.returncode == 1 and "--write-plan is for --search" in r.stderr


def test_a_model_refused_under_every_layout_ends_the_search_with_its_budget():
    """Each refusal is a capture attempt (a user's Llama-70B refused 181 candidates in 15 minutes
    under a 20 s budget): once the budget is spent with none priced, the rest are not priced."""
    import torch

    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            raise ValueError("this model cannot be traced")

    ranked = search(Broken(), (torch.randn(4, 8),), nproc=4, device=device_profile("cpu"), train=False,
                    budget_s=1e-3)
    assert len(ranked) > 2 and not any(s.ok for s in ranked)
    tried = [s for s in ranked if not s.refused.startswith("not priced")]
    assert tried == ranked[:1] and "this model cannot be traced" in tried[0].refused, tried   # (its reason first)
    assert all("budget (0.001 s) is spent and every candidate priced before it (1) was refused" in s.refused
               for s in ranked if s not in tried)


def test_a_forward_search_has_no_pipeline_candidates():
    """A pipeline plan runs training steps: a forward search lists none (it listed each refused)."""
    w = load_workload("gpt2-tiny")
    assert any(c.pipeline for c in candidates(4, blocks=2))   # (what a training search has)
    ranked = search(w.model, w.inputs, nproc=4, device=device_profile("cpu"), train=False,
                    only=lambda c: c.pipeline or c.mesh_text == "tp=4")
    assert [s.candidate.label() for s in ranked] == ["megatron on tp=4"] and ranked[0].ok


def test_a_mesh_the_search_has_no_candidate_on_is_explained():
    from spmdc.tools.search_cmd import _why_none

    for mesh, msg in (("dp=2,tpp=2", "mesh axis 'tpp' is not one the search lays out (pp, rep, dp, tp, ep); did "
                                     "you mean 'tp' or 'pp'?"),
                      ("rep=4", "the search lays out 'rep' (hsdp's replicas) only beside 'dp'"),
                      ("tp=16", "the search lays out tp of at most 8 (one node), not tp=16"),
                      ("ep=4", "the search lays out 'ep' only for a model with experts"),
                      ("pp=4", "the search lays out pp=4 only for training steps of a model with at least 4 "
                               "repeated blocks")):
        assert msg in _why_none(Mesh.parse(mesh)), mesh


def test_run_plan_auto_runs_the_best_layout_and_matches_one_device(tmp_path):
    r = _cli("run", "mlp", "--nproc", "2", "--plan", "auto", "--check", "--steps", "2",
             env={"SPMDC_DEVICE_DIR": str(tmp_path)})
    assert r.returncode == 0 and "check passed" in r.stdout, r.stdout + r.stderr
    assert "--plan auto chose" in r.stdout and "pricing every layout on cpu" in r.stdout
    r = _cli("run", "mlp", "--nproc", "2", "--plan", "auto", "--memory-cap", "1K",
             env={"SPMDC_DEVICE_DIR": str(tmp_path)})
    assert r.returncode == 1 and "--plan auto: no layout for 2 ranks fits --memory-cap of 1.0 KiB per rank: " \
        "the smallest predicted peak is" in r.stderr and "raise the cap, or give more ranks" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_stored_profiles_round_trip_and_are_found_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("SPMDC_DEVICE_DIR", str(tmp_path / "devices"))
    p = DeviceProfile("mybox", 1e11, 15, 6, 0.5, 0.5, node_size=4, latency_us=900.0,
                      collectives=(("all_gather", 2, 100.0, 0.5),), bucket_members=(("all_gather", 2, 40.0),))
    path = save_profile(p)
    assert path == tmp_path / "devices" / "mybox.json"
    assert device_profile("mybox") == p == load_profile(path) == device_profile(str(path))
    assert device_profile("mybox", "latency_us=5").latency_us == 5
    with pytest.raises(ValueError, match=r"unknown device 'mybx' \(did you mean mybox"):
        device_profile("mybx")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "flop": 1}))
    with pytest.raises(ValueError, match=r"bad.json': unknown field 'flop'"):
        load_profile(bad)
    good = json.loads(path.read_text())
    for table, row in (("bucket_members", ["all_gather", 2]), ("bucket_members", ["all_gathr", 2, 3.0]),
                       ("collectives", ["all_reduce", 1, 10.0, 1.0])):
        bad.write_text(json.dumps({**good, table: [row]}))   # (a measured table's row malformed: named)
        with pytest.raises(ValueError, match=rf"bad.json': '{table}' row 0 is .*; expected \(kind, group size"):
            load_profile(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"device profile '.*bad.json'"):
        load_profile(bad)


def test_calibrate_stores_a_profile_that_plan_uses(tmp_path):
    env = {"SPMDC_DEVICE_DIR": str(tmp_path)}
    r = _cli("calibrate", "--nproc", "2", "--reps", "3", "--launches", "2", "--name", "box", env=env)
    assert r.returncode == 0 and "measuring on 2 ranks, 2 launches" in r.stdout, r.stdout + r.stderr
    stored = load_profile(tmp_path / "box.json")
    assert stored.name == "box" and not stored.rough and stored.node_size == 2 and stored.latency_us > 0
    r = _cli("plan", "mlp", "--mesh", "dp=2", "--device", "box", env=env)
    assert r.returncode == 0 and "box:" in r.stdout, r.stdout + r.stderr
    for args, msg in ((("--name", "h100"), "names a built-in profile"), (("--name", "a/b"), "letters, digits"),
                      (("--out", str(tmp_path / "p.txt")), "expected a .json file")):
        r = _cli("calibrate", *args, env=env)
        assert r.returncode == 1 and msg in r.stderr, r.stderr
    r = _cli("calibrate", "--launches", "0", env=env)   # (argparse's own exit status)
    assert r.returncode == 2 and "argument --launches: must be positive, got 0" in r.stderr, r.stderr


def test_a_plan_file_mesh_is_the_run_mesh():
    assert Mesh.parse(Plan.from_dict({"preset": "fsdp", "mesh": "dp=4"}).mesh).size == 4


def test_captures_are_reused_inside_the_search_only():
    from spmdc.frontend.capture import capture_program, reusing_captures
    from spmdc.ir.printer import print_module as text

    w = load_workload("mlp")
    kw = dict(train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
    with reusing_captures():
        a = capture_program(w.model, w.inputs, **kw)
        b = capture_program(w.model, w.inputs, **kw)
        c = capture_program(w.model, w.inputs, train=False)   # another setting: captured anew
    d = capture_program(w.model, w.inputs, **kw)              # outside: always anew
    assert b.module is not a.module and text(b.module) == text(a.module) == text(d.module)
    assert b.timings.get("reused") and not a.timings.get("reused") and not c.timings.get("reused")
    assert not d.timings.get("reused") and text(c.module) != text(a.module)


def test_pipelines_refuse_optimizers_they_cannot_run_before_ranks_start():
    from spmdc.api.auto_plan import _score

    r = _cli("run", "gpt2-tiny", "--mesh", "pp=2,tp=2", "--plan", "megatron", "--optimizer", "adafactor",
             "--batch", "4")
    assert r.returncode == 1 and "Adafactor is neither an elementwise nor a per-tensor optimizer" in r.stderr
    assert "rank" not in r.stderr.split("error:", 1)[1].split("optimizer")[0]   # (refused, not a rank's failure)
    r = _cli("run", "gpt2-tiny", "--mesh", "pp=2,tp=2", "--plan", "megatron", "--optimizer", "muon", "--batch", "4")
    assert r.returncode == 1 and "Muon updates whole parameters and stage 0 stores them sharded" in r.stderr
    # the search never chooses such a candidate: refused with the same reason, no dry run
    w = load_workload("gpt2-tiny")
    s = _score(Candidate((("pp", 2), ("tp", 2)), "megatron", microbatches=2), w.model, w.inputs,
               device_profile("cpu"), 1e12, dict(train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs,
                                                 kwargs=w.kwargs, optimizer="adafactor", options=None))
    assert not s.ok and "neither an elementwise nor a per-tensor" in s.refused


def test_the_bench_measures_how_well_its_measurement_agrees_with_itself():
    """bench/auto_plan.py's split-half agreement: candidates far apart rank the same in any two halves
    of the rounds (1.0); candidates whose differences are inside the round-to-round noise do not."""
    import importlib.util
    import random

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "auto_plan.py")
    spec = importlib.util.spec_from_file_location("bench_auto_plan", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = random.Random(1)

    def case(ms: float, noise: float):   # 2 ranks x 8 rounds x 3 steps
        return [[[ms * (1 + rng.uniform(-noise, noise)) for _ in range(3)] for _ in range(8)] for _ in range(2)]

    apart = [case(ms, 0.05) for ms in (100, 150, 200, 250, 300)]
    assert bench.self_agreement(apart) == pytest.approx((1.0, 1.0))
    close = [case(ms, 0.30) for ms in (100, 101, 102, 103, 104, 105, 106, 107)]
    median, lowest = bench.self_agreement(close)
    assert lowest <= median < 0.8
    assert bench.self_agreement([[[[1.0]]], [[[2.0]]]]) is None   # one round (or --rounds 1: none kept)
    assert bench.self_agreement([[[], []], [[], []]]) is None
