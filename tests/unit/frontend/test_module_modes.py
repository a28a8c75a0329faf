"""Submodule train/eval modes: capture traces every module in its own mode and keeps every flag.

A model in training mode with frozen parts in eval mode (tests/models/frozen_parts.py: a frozen
encoder whose ``nn.Dropout(0.5)`` is in eval, a frozen BatchNorm, a HuggingFace GPT-2 backbone in
eval inside a wrapper): after a capture — forward, training step, or one that raises — every
module's flag is the one the user set; the captured program runs like eager PyTorch in those
modes (outputs rtol 1e-5, loss and gradients rtol 1e-4 via capture_helpers); the eval dropout
draws nothing and the eval BatchNorm updates no running statistic; two captures print the same IR.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))

import frozen_parts as FP  # noqa: E402
from capture_helpers import check_forward, check_train  # noqa: E402

from spmdc.frontend.capture import capture_program  # noqa: E402
from spmdc.frontend.export import ModuleModes, kept_modes, module_flags  # noqa: E402
from spmdc.frontend.program import ExportError  # noqa: E402
from spmdc.ir.printer import print_module  # noqa: E402


def flags(model) -> dict[str, bool]:
    return {name: m.training for name, m in model.named_modules()}


def test_frozen_parts_start_in_mixed_modes():
    """The premise of the other tests: the root trains, the frozen parts are in eval."""
    f = flags(FP.frozen_parts())
    assert f[""] and f["head"] and f["head.fc1"]
    assert not f["enc"] and not f["enc.drop"] and not f["bn"]


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_capture_keeps_every_flag(train):
    model = FP.frozen_parts()
    x, y = FP.batch()
    before = flags(model)
    kw = dict(train=True, loss_fn=F.mse_loss, loss_inputs=(y,)) if train else {}
    capture_program(model, (x,), **kw)
    assert flags(model) == before


def test_a_capture_that_raises_keeps_every_flag():
    model = FP.frozen_parts()
    x, y = FP.batch()
    before = flags(model)

    def bad_loss(out, target):
        raise RuntimeError("no loss today")

    with pytest.raises(ExportError, match="no loss today"):
        capture_program(model, (x,), train=True, loss_fn=bad_loss, loss_inputs=(y,))
    assert flags(model) == before


def test_kept_modes_restores_flags_a_body_changed_also_on_error():
    model = FP.frozen_parts()
    before = flags(model)
    with pytest.raises(ValueError, match="inside"):
        with kept_modes(model) as modes:
            model.train()
            model.head.eval()
            raise ValueError("inside")
    assert flags(model) == before
    assert modes == ModuleModes.of(model)
    assert modes.describe() == "train; enc=eval, bn=eval"
    model.eval()
    model.head.act.train()
    assert ModuleModes.of(model).describe() == "eval; head.act=train"
    assert ModuleModes.of(model) != modes
    assert module_flags(model) == ModuleModes.of(model).flags   # the cache key: the same flags, in order
    model.head.act.eval()
    assert module_flags(model) == ModuleModes.of(model).flags == (False,) * len(modes.flags)


def test_forward_capture_runs_like_eager_in_those_modes():
    model = FP.frozen_parts()
    x, _ = FP.batch()
    cap = capture_program(model, (x,))
    assert "tensor.random" not in print_module(cap.module)   # the eval dropout draws nothing
    check_forward(cap, model, (x,))


def test_training_capture_runs_like_eager_in_those_modes():
    model = FP.frozen_parts()
    x, y = FP.batch()
    running = (model.bn.running_mean.clone(), model.bn.running_var.clone())
    cap = capture_program(model, (x,), train=True, loss_fn=F.mse_loss, loss_inputs=(y,))
    text = print_module(cap.module)
    assert "tensor.random" not in text
    assert [o.fqn for o in cap.info.outputs if o.kind == "buffer_mutation"] == []   # running stats not updated
    grads = set(cap.info.gradient_outputs())
    assert grads == {"bn.weight", "bn.bias", "head.fc1.weight", "head.fc1.bias", "head.fc2.weight", "head.fc2.bias"}
    check_train(cap, model, (x,), F.mse_loss, (y,))
    torch.testing.assert_close(model.bn.running_mean, running[0], rtol=0, atol=0)
    torch.testing.assert_close(model.bn.running_var, running[1], rtol=0, atol=0)


def test_the_flags_decide_the_program():
    """Control: with every module in training mode the same model's capture draws dropout masks and
    updates the running statistics (so the tests above can tell the modes apart)."""
    model = FP.frozen_parts()
    x, y = FP.batch()
    model.train()
    cap = capture_program(model, (x,), train=True, loss_fn=F.mse_loss, loss_inputs=(y,))
    assert "tensor.random" in print_module(cap.module)
    assert {o.fqn for o in cap.info.outputs if o.kind == "buffer_mutation"} >= {"bn.running_mean",
                                                                                  "bn.running_var"}


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_two_captures_print_the_same_ir(train):
    model = FP.frozen_parts()
    x, y = FP.batch()
    kw = dict(train=True, loss_fn=F.mse_loss, loss_inputs=(y,)) if train else {}
    first = print_module(capture_program(model, (x,), **kw).module)
    second = print_module(capture_program(model, (x,), **kw).module)
    assert first == second


def test_hf_backbone_in_eval_inside_a_training_wrapper():
    model = FP.wrapped_gpt2()
    assert model.training and not model.backbone.training and model.backbone.config.resid_pdrop > 0
    before = flags(model)
    ids = torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(3))
    y = torch.randn(4, 4, generator=torch.Generator().manual_seed(4))
    cap = capture_program(model, (ids,), train=True, loss_fn=F.mse_loss, loss_inputs=(y,))
    assert flags(model) == before
    assert "tensor.random" not in print_module(cap.module)   # the backbone's dropout is off
    check_train(cap, model, (ids,), F.mse_loss, (y,))
    again = capture_program(model, (ids,), train=True, loss_fn=F.mse_loss, loss_inputs=(y,))
    assert print_module(again.module) == print_module(cap.module)
