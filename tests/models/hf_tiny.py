"""Tiny HuggingFace models at their default settings (SDPA attention, dropout as configured),
built from configs (nothing downloaded), as workloads: ``tests/models/hf_tiny.py:llama``.

Each factory returns ``(model, {"input_ids": ids, "labels": ids}, None)``: the model computes
its own loss (causal LM: labels = input ids; BERT's masked LM: every position predicts its own
token), as HuggingFace users train it. Models are in training mode (dropout on), as
``from_config`` leaves them.
"""

from __future__ import annotations

import torch
import transformers as T

VOCAB, SEQ, BATCH = 64, 8, 4


def _common(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                max_position_embeddings=64)
    base.update(kw)
    return base


CONFIGS = {
    "gpt2": lambda: T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                                 eos_token_id=0),
    "llama": lambda: T.LlamaConfig(**_common(num_key_value_heads=2)),
    "qwen2": lambda: T.Qwen2Config(**_common(num_key_value_heads=2)),
    "gemma": lambda: T.GemmaConfig(**_common(num_key_value_heads=2, head_dim=8)),
    "falcon": lambda: T.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4),
    "bloom": lambda: T.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4),
    "gptj": lambda: T.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64),
    "stablelm": lambda: T.StableLmConfig(**_common(num_key_value_heads=2)),
    "olmo": lambda: T.OlmoConfig(**_common(num_key_value_heads=2, eos_token_id=0, pad_token_id=1)),
    "mistral": lambda: T.MistralConfig(**_common(num_key_value_heads=2)),
    "phi": lambda: T.PhiConfig(**_common()),
    "phi3": lambda: T.Phi3Config(**_common(pad_token_id=0)),
    "gpt_neox": lambda: T.GPTNeoXConfig(**_common()),
    "opt": lambda: T.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                               max_position_embeddings=64, word_embed_proj_dim=32),
    "bert": lambda: T.BertConfig(**_common()),
    # mixtures of experts: Mixtral's top-2 of 4; Qwen2-MoE's top-4 of 8 with a gated shared expert;
    # DeepSeek-V3's multi-head latent attention, grouped top-2 of 8 (2 groups, 1 kept), a shared expert
    # and a dense first layer
    "mixtral": lambda: T.MixtralConfig(**_common(num_key_value_heads=2, num_local_experts=4)),
    "qwen2_moe": lambda: T.Qwen2MoeConfig(**_common(num_key_value_heads=2, num_experts=8, moe_intermediate_size=32,
                                                    shared_expert_intermediate_size=48)),
    "deepseek_v3": lambda: T.DeepseekV3Config(**_common(num_key_value_heads=4, n_routed_experts=8,
                                                        moe_intermediate_size=32, first_k_dense_replace=1, n_group=2,
                                                        topk_group=1, num_experts_per_tok=2, q_lora_rank=16,
                                                        kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8,
                                                        v_head_dim=8)),
}
MOE = {"mixtral", "qwen2_moe", "deepseek_v3"}
MASKED_LM = {"bert"}   # the others are causal LMs


def build(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = CONFIGS[name]()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):   # tiny vocab: keep special ids inside it
        if getattr(cfg, key, None) is not None and getattr(cfg, key) >= VOCAB:
            setattr(cfg, key, None)
    cls = T.AutoModelForMaskedLM if name in MASKED_LM else T.AutoModelForCausalLM
    return cls.from_config(cfg)


def batch(seed: int = 1, size: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (size, SEQ), generator=g)
    return ids, ids.clone()


def _factory(name: str):
    def factory(**kw: int):   # spmdc run --batch N passes batch=N
        ids, labels = batch(size=kw.pop("batch", BATCH))
        if kw:
            raise TypeError(f"unexpected arguments {sorted(kw)} (this factory takes batch=)")
        return build(name), {"input_ids": ids, "labels": labels}, None
    factory.__name__ = name
    return factory


for _name in CONFIGS:
    globals()[_name] = _factory(_name)
