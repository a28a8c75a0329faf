"""The one options object: defaults, validation by name, near matches, the pass pipeline's options
derived from it, and ``spmdc run``'s flags generated from its fields."""

from __future__ import annotations

import argparse
import dataclasses
import pickle

import pytest
import torch

from spmdc.compiler.options import CompileOptions, OptionError


def test_defaults_and_derived_pass_options():
    o = CompileOptions()
    assert (o.bucket, o.overlap, o.memory_cap, o.rng, o.grad_accum, o.inputs) == (True, True, 0, "eager", 1, "global")
    p = CompileOptions(bucket=False, memory_cap=1 << 20, fuse_collectives=False).passes(rank=3, target="torch")
    assert (p.rank, p.bucket, p.overlap, p.memory_cap, p.fuse, p.target) == (3, False, True, 1 << 20, False, "torch")
    assert CompileOptions().changed() == {}
    assert CompileOptions(clip_grad_norm=1).describe() == "clip_grad_norm=1.0"
    assert CompileOptions().autograd_activations == "saved" and CompileOptions().passes(0, "torch").suspend == ()
    assert CompileOptions(vjp_pause=[2, 1]).passes(0, "torch").suspend == (2, 1)


def test_frozen_and_picklable():
    o = CompileOptions(mixed_precision="bf16", clip_grad_norm=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.bucket = False  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(o))
    assert back == o and back.mixed_precision.param_dtype == torch.bfloat16


@pytest.mark.parametrize("kw, words", [
    (dict(grad_accum=0), ["grad_accum=0", "integer >= 1"]),
    (dict(grad_accum=2.5), ["grad_accum=2.5"]),
    (dict(memory_cap=-1), ["memory_cap=-1", "no cap"]),
    (dict(clip_grad_norm=0.0), ["clip_grad_norm=0.0", "positive"]),
    (dict(clip_grad_norm=float("inf")), ["clip_grad_norm=inf"]),
    (dict(rng="cuda"), ["rng='cuda'", "'eager', 'philox'"]),
    (dict(inputs="mine"), ["inputs='mine'", "'global', 'local'"]),
    (dict(target="cuda"), ["target='cuda'"]),
    (dict(checkpoint="all"), ["checkpoint='all'", "'blocks'", "'blocks/K'"]),
    (dict(checkpoint="blocks/0"), ["checkpoint='blocks/0'", "every K-th"]),
    (dict(bucket="yes"), ["bucket='yes'", "True or False"]),
    (dict(microbatches=0), ["microbatches=0"]),
    (dict(autograd_activations="keep"), ["autograd_activations='keep'", "'saved', 'recompute'"]),
    (dict(vjp_pause=(1,)), ["vjp_pause=(1,)", "(first, count)"]),
])
def test_bad_values_are_refused_by_name(kw, words):
    with pytest.raises(OptionError) as e:
        CompileOptions(**kw)
    for w in words:
        assert w in str(e.value)


def test_unknown_option_names_its_near_match():
    with pytest.raises(TypeError, match=r"spmdc.compile: unknown option 'clip_grad_nrom' \(did you mean "
                                        r"'clip_grad_norm'\?\)"):
        CompileOptions.of(clip_grad_nrom=1.0)
    base = CompileOptions(bucket=False)
    assert CompileOptions.of(base, overlap=False) == CompileOptions(bucket=False, overlap=False)
    with pytest.raises(TypeError, match="options= takes a spmdc.CompileOptions"):
        CompileOptions.of({"bucket": False})


def test_command_line_flags_come_from_the_fields():
    ap = argparse.ArgumentParser()
    CompileOptions.add_arguments(ap)
    o = CompileOptions.from_arguments(ap.parse_args(
        ["--no-bucket", "--memory-cap", "2MiB", "--mixed-precision", "bf16", "--clip-grad-norm", "0.5",
         "--grad-accum", "2", "--no-input-check", "--checkpoint", "blocks", "--pp-schedule", "gpipe"]))
    assert o == CompileOptions(bucket=False, memory_cap=2 << 20, mixed_precision="bf16", clip_grad_norm=0.5,
                               grad_accum=2, check_inputs=False, checkpoint="blocks", pp_schedule="gpipe")
    assert CompileOptions.from_arguments(ap.parse_args([])) == CompileOptions()
    assert CompileOptions.from_arguments(ap.parse_args(["--checkpoint", "blocks/2"])).checkpoint == "blocks/2"
    with pytest.raises(SystemExit):
        ap.parse_args(["--grad-accum", "0"])
