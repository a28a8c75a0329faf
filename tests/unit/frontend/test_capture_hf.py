"""Models people bring: HuggingFace families at their default settings (SDPA attention, dropout
as configured; tiny configs from tests/models/hf_tiny.py, nothing downloaded).

Forward (eval mode) and training step (training mode: dropout on where the family's config
has it) capture and interpret like eager PyTorch: logits rtol 1e-5; loss and gradients rtol
1e-4, atol 1e-5, with the same seed on both sides (dropout masks are the same draws). One
test keeps checking the eager-attention path (``attn_implementation="eager"``).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))

import hf_tiny  # noqa: E402
from capture_helpers import check_ir, check_params_are_args, main_func  # noqa: E402

from spmdc.frontend.capture import capture_program  # noqa: E402
from spmdc.ir.printer import print_module  # noqa: E402
from spmdc.runtime.interpreter import interpret  # noqa: E402

FAMILIES = list(hf_tiny.CONFIGS)
WITH_DROPOUT = {"gpt2", "opt", "bert"}   # families whose default config has dropout > 0


def _forward(model, ids):
    model.eval()
    cap = capture_program(model, (), example_kwargs={"input_ids": ids})
    with torch.no_grad():
        want = model(input_ids=ids).logits
    return cap, want


def _train(model, ids, labels, seed=3):
    model.train()
    cap = capture_program(model, (), train=True, example_kwargs={"input_ids": ids, "labels": labels})
    torch.manual_seed(seed)
    got = interpret(cap.module, cap.arguments(ids, labels))
    torch.manual_seed(seed)
    model.zero_grad()
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return cap, got, loss.detach()


@pytest.mark.parametrize("name", FAMILIES)
def test_forward_and_training_step_match_eager(name):
    model = hf_tiny.build(name)
    ids, labels = hf_tiny.batch()
    fwd, want = _forward(model, ids)
    check_ir(fwd.module)
    check_params_are_args(fwd, model)
    (logits, *_) = interpret(fwd.module, fwd.arguments(ids))
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-6)

    train, got, loss = _train(model, ids, labels)
    check_ir(train.module)
    params = dict(model.named_parameters())
    seen = set()
    for out, value in zip(train.info.outputs, got, strict=True):
        if out.kind == "loss":
            torch.testing.assert_close(value, loss, rtol=1e-4, atol=1e-5)
        elif out.kind == "gradient":
            seen.add(out.fqn)
            torch.testing.assert_close(value, params[out.fqn].grad, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, f=out.fqn: f"{name} {f}: {m}")
    assert seen == {n for n, p in params.items() if p.grad is not None}
    assert main_func(train.module).args[-1].name_hint == "labels"
    has_dropout = "tensor.random" in print_module(train.module)
    assert has_dropout == (name in WITH_DROPOUT), "dropout in the program iff the config has it"


def test_dropout_really_drops_and_the_seed_decides_the_masks():
    model = hf_tiny.build("gpt2")
    ids, labels = hf_tiny.batch()
    cap, a, _ = _train(model, ids, labels, seed=3)
    torch.manual_seed(4)
    b = interpret(cap.module, cap.arguments(ids, labels))
    assert a[0].item() != b[0].item()
    model.eval()
    assert abs(model(input_ids=ids, labels=labels).loss.item() - a[0].item()) > 1e-5


def test_eager_attention_path_still_captures():
    model = hf_tiny.build("llama")
    model.config._attn_implementation = "eager"
    model.set_attn_implementation("eager")
    ids, labels = hf_tiny.batch()
    fwd, want = _forward(model, ids)
    assert "tensor.attention" not in print_module(fwd.module)
    torch.testing.assert_close(interpret(fwd.module, fwd.arguments(ids))[0], want, rtol=1e-5, atol=1e-6)


def test_sdpa_becomes_one_attention_op():
    model = hf_tiny.build("llama")
    ids, labels = hf_tiny.batch()
    fwd, _ = _forward(model, ids)
    text = print_module(fwd.module)
    assert text.count("tensor.attention ") == model.config.num_hidden_layers
    train, _, _ = _train(model, ids, labels)
    assert print_module(train.module).count("tensor.attention_grad ") == model.config.num_hidden_layers


def test_use_cache_on_captures_the_logits():
    model = hf_tiny.build("llama")
    model.config.use_cache = True
    ids, _ = hf_tiny.batch()
    fwd, want = _forward(model, ids)
    outs = interpret(fwd.module, fwd.arguments(ids))
    assert len(outs) == 1
    torch.testing.assert_close(outs[0], want, rtol=1e-5, atol=1e-6)


class _Cache:
    """Stands for a cache object (not a tensor) in a model's output."""


class _WithCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return {"logits": self.fc(x), "cache": _Cache(), "hidden": (x * 2, None)}


def test_outputs_as_users_return_them_and_non_tensors_left_out_with_a_warning():
    from spmdc.frontend.loss import OutputLeftOutWarning

    x = torch.randn(2, 4)
    model = _WithCache()
    with pytest.warns(OutputLeftOutWarning, match=r"'cache' \(_Cache\)"):
        cap = capture_program(model, (x,))
    logits, hidden = interpret(cap.module, cap.arguments(x))
    torch.testing.assert_close(logits, model(x)["logits"])
    torch.testing.assert_close(hidden, x * 2)
