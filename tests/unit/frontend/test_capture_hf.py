"""Models people bring: HuggingFace GPT-2 and Llama from small configs (random weights, nothing
downloaded) capture forward and training step and interpret like eager PyTorch."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import transformers

sys.path.insert(0, os.path.dirname(__file__))

from capture_helpers import check_forward, check_ir, check_params_are_args, check_train, main_func  # noqa: E402

from spmdc.frontend.capture import capture_program  # noqa: E402

VOCAB, B, T = 64, 2, 8


def _eager(model):
    model.config._attn_implementation = "eager"
    try:
        model.set_attn_implementation("eager")
    except Exception:  # older transformers
        pass
    return model.eval()


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=4, use_cache=False,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return _eager(transformers.GPT2LMHeadModel(cfg))


def llama():
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                   use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=None)
    return _eager(transformers.LlamaForCausalLM(cfg))


@pytest.fixture(scope="module", params=[gpt2, llama], ids=["gpt2", "llama"])
def hf(request):
    torch.manual_seed(0)
    model = request.param()
    g = torch.Generator().manual_seed(0)
    ids, labels = torch.randint(0, VOCAB, (B, T), generator=g), torch.randint(0, VOCAB, (B, T), generator=g)
    fwd = capture_program(model, (ids,))
    train = capture_program(model, (ids,), train=True, example_kwargs={"labels": labels})
    return model, ids, labels, fwd, train


def test_hf_forward(hf):
    model, ids, _, fwd, _ = hf
    check_ir(fwd.module)
    check_params_are_args(fwd, model)
    check_forward(fwd, model, (ids,))


def test_hf_training_step(hf):
    model, ids, labels, _, train = hf
    check_ir(train.module)
    check_params_are_args(train, model)
    check_train(train, model, (ids,), None, kwargs={"labels": labels})
    func = main_func(train.module)
    assert func.args[-1].name_hint == "labels"
