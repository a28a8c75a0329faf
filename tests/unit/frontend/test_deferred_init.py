"""``spmdc.deferred_init``: a model built on the meta device, initialized later by replaying how
it was built, bitwise equal to building it on one device (same generator state before and after)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).parents[2] / "models"))
import hf_tiny  # noqa: E402

from spmdc.frontend.deferred_init import ReplayError, deferred_init, fake_parameters, kept_storages, materialize, replay  # noqa: E402


class Tricky(nn.Module):
    """Init patterns users write: .data, views, trunc_normal_, a seed inside the constructor,
    tied weights, computed buffers, a real constant, an overwritten default init."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6, padding_idx=0)
        self.proj = nn.Linear(6, 10, bias=False)
        self.proj.weight = self.emb.weight   # tied
        self.fc = nn.Linear(6, 6)
        torch.manual_seed(123)   # a constructor that seeds: replayed at this point
        self.fc2 = nn.Linear(6, 3)
        nn.init.trunc_normal_(self.fc2.weight, std=0.02)    # these two return early on meta tensors:
        self.rot = nn.Linear(4, 4, bias=False)              # spmdc records the call itself
        nn.init.orthogonal_(self.rot.weight)
        self.fc.weight.data.normal_(0.0, 0.5)
        self.fc.weight.data[0].zero_()              # a view of a parameter
        self.fc.bias.data.view(2, 3)[1].fill_(0.25)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 6, 2).float() / 6)), persistent=False)
        self.register_buffer("scale", torch.tensor(math.sqrt(6.0)))   # a real constant
        self.ln = nn.LayerNorm(6)

    def forward(self, idx):
        return self.fc2(self.ln(self.fc(self.emb(idx)) * self.scale)).sum() + self.proj(self.emb(idx)).sum()


def _both(build, seed=7):
    torch.manual_seed(seed)
    ref = build()
    after_ref = torch.rand(4)
    torch.manual_seed(seed)
    meta = deferred_init(build)
    assert all(t.device.type == "meta" for t in meta.parameters())
    got = materialize(meta)
    return ref, got, torch.equal(torch.rand(4), after_ref)


def _assert_bitwise(ref, got):
    want = dict(ref.named_parameters(remove_duplicate=False)) | dict(ref.named_buffers(remove_duplicate=False))
    assert set(got) == set(want)
    for k, v in want.items():
        assert torch.equal(got[k], v.detach()), k


def test_init_patterns_replay_bitwise():
    ref, got, rng_ok = _both(Tricky)
    _assert_bitwise(ref, got)
    assert rng_ok


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2", "bert", "gemma", "falcon", "opt", "phi"])
def test_hf_models_at_their_defaults_replay_bitwise(name):
    ref, got, rng_ok = _both(lambda: hf_tiny.build(name))   # build seeds inside, as from_config users do
    _assert_bitwise(ref, got)
    assert rng_ok


def test_replay_holds_one_full_parameter_at_a_time():
    """A Linear's kaiming init, overwritten by a model-wide normal_ init: the first draw only
    advances the generator (a scratch tensor); a parameter is handed over and freed when the tape
    is done with it. The high-water mark is the largest parameter, not the model."""
    def build():
        m = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
        for layer in m:
            nn.init.normal_(layer.weight, std=0.02)
        return m
    torch.manual_seed(0)
    meta = deferred_init(build)
    tape = meta._spmdc_init_tape
    seen = []
    peak = replay(tape, kept_storages(meta, tape), lambda n, t, rows: seen.append((n, rows)))
    assert len(seen) == 16 and all(rows is None for _, rows in seen)   # no rows asked for: full tensors
    assert peak == 64 * 64 * 4   # one weight (or its scratch draw) at a time; the model is 8x that plus biases
    ref, got, rng_ok = _both(build)
    _assert_bitwise(ref, got)
    assert rng_ok


def test_fake_parameters_keep_ties_and_come_back():
    meta = deferred_init(Tricky)
    with fake_parameters(meta) as m:
        assert m.proj.weight is m.emb.weight and m.emb.weight.device.type == "cpu"
        assert type(m.emb.weight.data).__name__ == "FakeTensor"
    assert meta.proj.weight is meta.emb.weight and meta.emb.weight.device.type == "meta"


def test_a_parameter_the_tape_never_wrote_is_named():
    meta = deferred_init(nn.Linear, 3, 2)
    with torch.device("meta"):
        meta.extra = nn.Parameter(torch.empty(4))   # made outside the recorded construction
    with pytest.raises(ReplayError, match="'extra' is never initialized"):
        materialize(meta)


def test_cpu_examples_give_one_meta_tensor_one_cpu_tensor():
    """A meta example input becomes a CPU tensor of its shape, the same one each time (a search's
    captures are reused by their inputs' identity) and one for one tensor passed twice."""
    from spmdc.frontend.deferred_init import cpu_examples

    ids = torch.randint(0, 10, (2, 3), device="meta")
    first = cpu_examples({"input_ids": ids, "labels": ids, "n": 3})
    again = cpu_examples(((ids,), ()))
    assert first["input_ids"].device.type == "cpu" and first["input_ids"].shape == (2, 3)
    assert first["input_ids"] is first["labels"] is again[0][0] and first["n"] == 3
    other = torch.empty(2, 3, device="meta", requires_grad=True)
    got = cpu_examples([other])[0]
    assert got is not first["input_ids"] and got.requires_grad
