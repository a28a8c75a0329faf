"""The layout search at real size (spmdc.api.auto_plan, spmdc.api.plan_sketch).

A deep model's candidate is priced from its programs compiled with 4, 5 and 6 blocks per stage and
extended block by block: the figures must equal those of the whole model's programs. When pricing
every candidate would outlast ``--search-budget``, the rest are sketched from one profile of the
model and priced in the sketch's order while the budget lasts; what was only sketched says so.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

import spmdc.api.auto_plan as auto_plan
from spmdc.api.auto_plan import Candidate, candidates, search
from spmdc.api.plan_sketch import model_profile, sketch
from spmdc.compiler.devices import device_profile
from spmdc.frontend.capture import capture_program, reusing_captures
from spmdc.frontend.repeated import find_block_stack, keep_blocks
from spmdc.frontend.workloads import load_workload

H100 = device_profile("h100")


def _deep(n_layer: int = 12):
    w = load_workload("gpt2-tiny", n_layer=n_layer, batch=8)
    return w, dict(train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs, kwargs=w.kwargs, optimizer="adamw",
                   options=None)


def test_captures_reused_in_a_search_follow_the_cut_model():
    w, kw = _deep(4)
    stack = find_block_stack(w.model)[0]
    with reusing_captures():
        whole = capture_program(w.model, w.inputs, train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
        with keep_blocks(w.model, stack, [0, 1]):
            cut = capture_program(w.model, w.inputs, train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
        again = capture_program(w.model, w.inputs, train=True, loss_fn=w.loss_fn, loss_inputs=w.loss_inputs)
    ops = [sum(1 for _ in c.module.walk()) for c in (whole, cut, again)]
    assert not cut.timings.get("reused") and again.timings.get("reused")
    assert ops[1] < ops[0] == ops[2]


def _priced_both_ways(c, monkeypatch, n_layer, priced=None):
    """``c`` priced from the whole model and from cut ones, and the depths compiled for the latter;
    ``priced`` (a dict) gets the programs' figures per depth."""
    w, kw = _deep(n_layer)
    stack = find_block_stack(w.model)[0]
    depths: list[int] = []
    real = auto_plan._price
    priced = {} if priced is None else priced

    def spy(cand, model, *args):
        depths.append(len(model.get_submodule(stack.path)))
        priced[depths[-1]] = real(cand, model, *args)
        return priced[depths[-1]]

    monkeypatch.setattr(auto_plan, "_price", spy)
    whole = auto_plan._score(c, w.model, w.inputs, H100, 1e12, kw, None)
    assert depths == [n_layer]
    depths.clear()
    deep = auto_plan._score(c, w.model, w.inputs, H100, 1e12, kw, stack)
    assert whole.ok and deep.ok, (whole.refused, deep.refused)
    assert deep.step_seconds == pytest.approx(whole.step_seconds, rel=1e-9), c.label()
    assert (deep.peak_bytes, deep.collectives, deep.roles) == (whole.peak_bytes, whole.collectives, whole.roles)
    return depths


def test_a_deep_model_is_priced_from_cut_compiles_as_from_the_whole(monkeypatch):
    with reusing_captures():
        for c in (Candidate((("tp", 2), ("dp", 2)), "fsdp+tp", reshard_after_forward=False),
                  Candidate((("rep", 2), ("dp", 2)), "hsdp", checkpoint=True)):
            assert _priced_both_ways(c, monkeypatch, 12) == [4, 5, 6]


def test_a_deep_pipeline_is_priced_from_cut_compiles_as_from_the_whole(monkeypatch):
    c = Candidate((("pp", 2), ("dp", 2)), "fsdp", microbatches=4)
    monkeypatch.setattr(auto_plan, "DEPTHS", (3, 4, 5))   # (its last stage's compute is a line from 4 blocks on)
    priced: dict = {}
    with reusing_captures():
        assert _priced_both_ways(c, monkeypatch, 24, priced) == [6, 8, 10, 12]   # the window moved a block deeper
        monkeypatch.setattr(auto_plan, "MOVES", 0)   # not allowed to: priced whole
        w, kw = _deep(24)
        stack = find_block_stack(w.model)[0]
        depths: list[int] = []
        # (the same candidate's programs at these depths were compiled above: their figures are reused)
        monkeypatch.setattr(auto_plan, "_price", lambda cand, model, *a: priced[depths.append(
            len(model.get_submodule(stack.path))) or depths[-1]])
        whole = auto_plan._score(c, w.model, w.inputs, H100, 1e12, kw, stack)
        assert depths == [6, 8, 10, 24] and whole.ok


def test_the_sketch_follows_the_profile_and_the_layouts():
    w, kw = _deep()
    with reusing_captures():
        profile = model_profile(w.model, w.inputs, device=H100, **kw)
        one = auto_plan._score(Candidate((("dp", 1),), "dp"), w.model, w.inputs, H100, 1e12, kw, None)
        eight = auto_plan._score(Candidate((("dp", 8),), "fsdp"), w.model, w.inputs, H100, 1e12, kw,
                                 find_block_stack(w.model)[0])
    assert (profile.blocks, profile.batch, profile.boundary) == (12, 8, 8 * 8 * 32 * 4)   # (batch, seq, d_model) fp32
    block = w.model.h[0]   # (what a rank stores per block: its parameters and buffers)
    assert profile.block.params == sum(t.numel() * t.element_size() for t in [*block.parameters(), *block.buffers()])
    assert profile.block.gathers >= 1 and profile.block.tp_calls >= 1
    step, _ = sketch(Candidate((("dp", 1),), "dp"), profile, H100)
    assert step == pytest.approx(one.step_seconds, rel=0.02)   # one rank: no collectives, all linear
    # a model this small is priced by its update's host cost per op, which sharding does not divide
    step, peak = sketch(Candidate((("dp", 8),), "fsdp"), profile, H100)
    assert step == pytest.approx(eight.step_seconds, rel=0.05) and peak == pytest.approx(eight.peak_bytes, rel=0.3)

    # ranks sharing cores (sync_us): each wait on peers after computing alone, none without peers
    plain = dataclasses.replace(H100, overlap=0.0)
    skewed = dataclasses.replace(plain, sync_us=1000.0)
    cases = [((("dp", 1),), "dp", 0), ((("dp", 8),), "dp", 1), ((("dp", 8),), "fsdp", 2),
             ((("pp", 2), ("dp", 2)), "fsdp", 4)]
    for mesh, preset, least in cases:
        c = Candidate(mesh, preset, microbatches=2 if len(mesh) > 1 else 0)
        extra = sketch(c, profile, skewed)[0] - sketch(c, profile, plain)[0]
        assert extra >= least * 1e-3 - 1e-9 and (extra > 0) == (least > 0), (c.label(), extra)

    def peak(*mesh, preset="fsdp", **kw):
        return sketch(Candidate(tuple(mesh), preset, **kw), profile, H100)[1]

    assert peak(("dp", 8)) < peak(("dp", 4)) < peak(("dp", 4), preset="dp")
    assert peak(("dp", 4), checkpoint=True) < peak(("dp", 4))
    assert peak(("dp", 4), reshard_after_forward=False) > peak(("dp", 4))
    assert peak(("pp", 2), ("dp", 2), microbatches=2) < peak(("dp", 2))
    # collectives cost time: the same ranks split over tp pay its all-reduces, a pipeline its bubble
    alone = sketch(Candidate((("dp", 1),), "dp"), profile, H100)[0]
    assert sketch(Candidate((("tp", 2),), "megatron"), profile, H100)[0] > alone / 2
    assert sketch(Candidate((("pp", 2),), "dp", microbatches=2), profile, H100)[0] > alone / 2


def test_a_search_over_budget_prices_in_the_sketch_order_and_marks_the_rest():
    w, kw = _deep()
    priced: list[str] = []
    with reusing_captures():
        ranked = search(w.model, w.inputs, nproc=8, device=H100, budget_s=3.0,
                        progress=lambda s, i, n: priced.append(s.candidate.label()), **kw)
    everything = candidates(8, blocks=12, max_tp=H100.node_size)
    assert len(ranked) == len(everything)
    assert {s.candidate.label().replace(", checkpoint blocks", "") for s in ranked} == \
        {c.label() for c in everything}
    sketched = [s for s in ranked if s.sketched]
    assert sketched and len(sketched) < len(ranked) and len(priced) == len(ranked) - len(sketched)
    assert not ranked[0].sketched and ranked[0].fits and ranked[0].ok
    assert all(s.step_seconds > 0 and s.peak_bytes > 0 and not s.refused for s in sketched)
    first_sketched = next(i for i, s in enumerate(ranked) if s.sketched)   # (priced ones that fit come first)
    assert all(not s.sketched for s in ranked[:first_sketched]) and all(s.fits for s in ranked[:first_sketched])
    # no budget: every candidate priced from its programs
    ranked = search(w.model, w.inputs, nproc=8, device=H100, only=lambda c: c.mesh_text == "dp=8", **kw)
    assert ranked and not any(s.sketched for s in ranked)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spmdc.tools.cli", *args], capture_output=True, text=True, timeout=600)


def test_plan_search_budget_on_a_real_size_model(tmp_path):
    js = tmp_path / "ranked.json"
    r = _cli("plan", "llama3-1b", "--nproc", "64", "--search", "--search-budget", "6", "--batch", "64",
             "--optimizer", "adamw", "--json", str(js))
    assert r.returncode == 0, r.stdout + r.stderr
    said = " ".join(r.stdout.split())   # (the console wraps long lines)
    assert "priced from their programs" in said and "sketched only: --search-budget SECONDS" in said
    ranked = json.loads(js.read_text())["candidates"]
    assert not ranked[0]["sketched"] and any(c["sketched"] for c in ranked)
    assert f"chosen: {ranked[0]['plan']}" in said and "programs" in said and "sketch" in said
    r = _cli("plan", "llama3-1b", "--search", "--search-budget", "0")
    assert r.returncode == 2 and "--search-budget: must be positive" in r.stderr, r.stderr
    r = _cli("run", "mlp", "--plan", "auto", "--eager")   # (refused before any search: eager is not predicted)
    assert r.returncode == 1 and "--eager with --plan auto / --search" in r.stderr, r.stderr
    r = _cli("run", "mlp", "--search-budget", "5")   # (no search to bound)
    assert r.returncode == 1 and "--search-budget is for --plan auto / --search" in r.stderr, r.stderr
