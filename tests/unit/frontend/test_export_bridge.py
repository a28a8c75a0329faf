"""Tests for spmdc.frontend.export and spmdc.frontend.torch_mlir_bridge.

Tiny models only; every case runs in a few seconds on CPU.  HuggingFace cases are
skipped when ``transformers`` is not installed (test-only dependency).
"""

from __future__ import annotations

import math
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from spmdc.frontend.export import ExportedProgramInfo, export_program  # noqa: E402
from spmdc.frontend.torch_mlir_bridge import (  # noqa: E402
    import_to_torch_mlir,
    iter_ops,
    parse_vtensor_type,
    torch_op_names,
)

VOCAB, T, B = 64, 8, 2


# ----------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, d_in=8, d_hidden=16, d_out=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class GPTAttention(nn.Module):
    def __init__(self, d, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        mask = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        self.register_buffer("bias", mask)

    def forward(self, x):
        Bx, Tx, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.n_head
        q = q.view(Bx, Tx, self.n_head, hs).transpose(1, 2)
        k = k.view(Bx, Tx, self.n_head, hs).transpose(1, 2)
        v = v.view(Bx, Tx, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.bias[:, :, :Tx, :Tx] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bx, Tx, C)
        return self.c_proj(y)


class GPTBlock(nn.Module):
    def __init__(self, d, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = GPTAttention(d, n_head, block_size)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential()
        self.mlp.c_fc = nn.Linear(d, 4 * d)
        self.mlp.gelu = nn.GELU(approximate="tanh")
        self.mlp.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2-like: learned positions, pre-LN blocks, causal attention, tied LM head."""

    def __init__(self, vocab=VOCAB, block_size=16, d=32, n_head=4, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block_size, d)
        self.blocks = nn.ModuleList([GPTBlock(d, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx):
        pos = torch.arange(0, idx.shape[1], dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


# The Llama-like model (RMSNorm, RoPE from a non-persistent buffer, SwiGLU, GQA) is the
# built-in workload's; the GPT above keeps its own fused c_attn to cover split().
from spmdc.examples.llama_tiny import Llama  # noqa: E402


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _hf_gpt2():
    """Default settings: SDPA attention, dropout 0.1, training mode."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=4, use_cache=False,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def _hf_llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=None,
    )
    return transformers.LlamaForCausalLM(cfg)


# ----------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------


def _tokens(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (B, T), generator=g), torch.randint(0, VOCAB, (B, T), generator=g)


def _check_inputs_are_args(info: ExportedProgramInfo, model: nn.Module):
    params = dict(model.named_parameters())  # deduplicated: tied weights once
    p_inputs = {i.fqn for i in info.inputs if i.kind == "parameter"}
    assert p_inputs == set(params) - set(info.unused_parameters)
    for i in info.inputs:
        assert i.index == info.inputs.index(i)
        if i.kind != "user_input":
            assert i.fqn in info.state
            assert tuple(info.state[i.fqn].shape) == i.shape


def _check_mlir(info: ExportedProgramInfo):
    module, ctx, mapping = import_to_torch_mlir(info)
    text = str(module)
    assert "torch.vtensor.literal" not in text.replace("dense_resource", "")  # no baked-in weights
    func = module.body.operations[0]
    with ctx:
        from torch_mlir import ir

        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        assert len(ftype.inputs) == len(info.inputs) == len(mapping.args)
        assert len(ftype.results) == len(info.outputs) == len(mapping.results)
        for t, i in zip(ftype.inputs, info.inputs):
            shape, dtype = parse_vtensor_type(t)
            assert str(t).startswith("!torch.vtensor<"), t
            assert shape == i.shape
        arg_attrs = func.attributes["arg_attrs"]
        for k, i in enumerate(info.inputs):
            a = ir.DictAttr(arg_attrs[k])
            assert ir.StringAttr(a["spmdc.kind"]).value == i.kind
            if i.fqn:
                assert ir.StringAttr(a["spmdc.fqn"]).value == i.fqn
    names = torch_op_names(module)
    assert names and all(n.startswith(("torch.", "func.")) for n in names), names
    recs = list(iter_ops(module))
    aten = [r for r in recs if r.name.startswith("torch.aten.")]
    assert aten
    # every aten op can be traced back to an FX node and its module path
    assert all(r.fx_node in info.nodes for r in aten), [r.location for r in aten if r.fx_node not in info.nodes][:3]
    for r in aten:
        for shape, _dtype in r.result_types:
            if shape is not None:
                assert all(isinstance(s, int) for s in shape)
    return module, mapping, names


def _run_forward(model, args, rtol=1e-5):
    info = export_program(model, args)
    assert not info.train
    _check_inputs_are_args(info, model)
    torch.manual_seed(0)   # dropout (if the model is training) draws the same masks on both sides
    outs = info.run(*args)
    torch.manual_seed(0)
    with torch.no_grad():
        ref = model(*args)
    ref = getattr(ref, "logits", ref)
    model_outs = [o for o in info.outputs if o.kind == "model_output"]
    torch.testing.assert_close(outs[model_outs[0].index], ref, rtol=rtol, atol=1e-5)
    return info


def _run_train(model, args, loss_fn=None, loss_inputs=(), kwargs=None):
    info = export_program(model, args, train=True, loss_fn=loss_fn, loss_inputs=loss_inputs,
                          example_kwargs=kwargs)
    assert info.train
    _check_inputs_are_args(info, model)
    user = list(args) + list(loss_inputs) + list((kwargs or {}).values())
    torch.manual_seed(0)
    outs = info.run(*user)
    model.zero_grad()
    torch.manual_seed(0)
    out = model(*args, **(kwargs or {}))
    loss = loss_fn(out, *loss_inputs) if loss_fn else out.loss
    loss.backward()
    torch.testing.assert_close(outs[info.loss_output().index], loss.detach(), rtol=1e-5, atol=1e-5)
    grads = info.gradient_outputs()
    params = dict(model.named_parameters())
    assert set(grads) == {n for n, p in params.items() if p.requires_grad}
    for fqn, o in grads.items():
        assert o.shape == tuple(params[fqn].shape)
        torch.testing.assert_close(outs[o.index], params[fqn].grad, rtol=1e-4, atol=1e-5)
    return info


# ----------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------


def test_mlp_forward_and_mlir():
    torch.manual_seed(0)
    m = MLP()
    x = torch.randn(4, 8)
    info = _run_forward(m, (x,))
    assert [i.kind for i in info.inputs] == ["parameter"] * 4 + ["user_input"]
    assert info.inputs[0].fqn == "fc1.weight"
    assert [o.kind for o in info.outputs] == ["model_output"]
    mm = [n for n in info.nodes.values() if n.op == "aten.mm.default"]
    assert {n.module_path for n in mm} == {"fc1", "fc2"}
    module, mapping, names = _check_mlir(info)
    assert "torch.aten.mm" in names
    assert mapping.arg_index("fc2.bias") == 3
    # walker resolves constant operands (permute dims)
    perm = next(r for r in iter_ops(module) if r.name == "torch.aten.permute")
    assert perm.constant_operands[1] == [1, 0]
    assert perm.module_path == "fc1"


@pytest.mark.parametrize("loss", ["mse", "ce"])
def test_mlp_train(loss):
    torch.manual_seed(0)
    m = MLP()
    x = torch.randn(4, 8)
    if loss == "mse":
        y, fn = torch.randn(4, 4), F.mse_loss
    else:
        y, fn = torch.randint(0, 4, (4,)), F.cross_entropy
    info = _run_train(m, (x,), fn, (y,))
    kinds = [o.kind for o in info.outputs]
    assert kinds == ["loss"] + ["gradient"] * 4
    assert [o.fqn for o in info.outputs[1:]] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert all(i.requires_grad for i in info.inputs if i.kind == "parameter")
    # backward nodes exist and are attributed to modules
    bwd = [n for n in info.nodes.values() if n.is_backward]
    assert bwd and any(n.module_path == "fc1" for n in bwd)
    module, mapping, names = _check_mlir(info)
    assert mapping.result_index_of_gradient("fc2.weight") == 3


def test_train_requires_loss():
    from spmdc.frontend.export import ExportError

    with pytest.raises(ExportError):
        export_program(MLP(), (torch.randn(2, 8),), train=True)  # output is not a scalar
    with pytest.raises(ExportError):
        export_program(MLP(), (torch.randn(2, 8),), loss_fn=F.mse_loss)  # needs train=True


def test_gpt_forward_tied():
    torch.manual_seed(0)
    m = GPT()
    idx, _ = _tokens()
    info = _run_forward(m, (idx,))
    assert info.tied_parameters == {"lm_head.weight": "wte.weight"}
    assert sum(1 for i in info.inputs if i.fqn == "wte.weight") == 1
    assert info.input_by_fqn("lm_head.weight").fqn == "wte.weight"
    bufs = [i for i in info.inputs if i.kind == "buffer"]
    assert {b.fqn for b in bufs} == {"blocks.0.attn.bias", "blocks.1.attn.bias"}
    _check_mlir(info)


def test_gpt_train_tied():
    torch.manual_seed(0)
    m = GPT()
    idx, tgt = _tokens()
    info = _run_train(m, (idx,), lm_loss, (tgt,))
    assert "wte.weight" in info.gradient_outputs() and "lm_head.weight" not in info.gradient_outputs()
    _, _, names = _check_mlir(info)
    assert "torch.aten.embedding_dense_backward" not in names  # decomposed


def test_llama_forward_nonpersistent_buffer():
    torch.manual_seed(0)
    m = Llama()
    idx, _ = _tokens()
    info = _run_forward(m, (idx,))
    buf = info.input_by_fqn("inv_freq")
    assert buf.kind == "buffer" and buf.persistent is False
    assert torch.equal(info.state["inv_freq"], m.inv_freq)
    _check_mlir(info)


def test_llama_train():
    torch.manual_seed(0)
    m = Llama()
    idx, tgt = _tokens()
    info = _run_train(m, (idx,), lm_loss, (tgt,))
    paths = {n.module_path for n in info.nodes.values()}
    assert "layers.0.self_attn.q_proj" in paths and "layers.1.mlp.down_proj" in paths
    _check_mlir(info)


def test_state_override_changes_result():
    torch.manual_seed(0)
    m = MLP()
    x = torch.randn(4, 8)
    info = export_program(m, (x,))
    zero = {k: torch.zeros_like(v) for k, v in info.state.items()}
    out = info.run(x, state=zero)[0]
    assert torch.count_nonzero(out) == 0  # parameters really are inputs


def test_hf_gpt2_forward_and_train():
    m = _hf_gpt2()
    torch.manual_seed(0)
    idx, labels = _tokens()
    f = _run_forward(m, (idx,))
    _check_mlir(f)
    t = _run_train(m, (idx,), kwargs={"labels": labels})
    assert t.tied_parameters == {"lm_head.weight": "transformer.wte.weight"}
    _check_mlir(t)


def test_hf_llama_forward_and_train():
    m = _hf_llama()
    torch.manual_seed(0)
    idx, labels = _tokens()
    f = _run_forward(m, (idx,))
    assert any(i.kind == "buffer" and i.fqn.endswith("rotary_emb.inv_freq") for i in f.inputs)
    _check_mlir(f)
    t = _run_train(m, (idx,), kwargs={"labels": labels})
    _check_mlir(t)
