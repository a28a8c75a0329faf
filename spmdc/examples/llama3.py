"""``llama3-8b``, ``llama3-70b``, ``llama3-1b``: HuggingFace ``LlamaForCausalLM`` at Llama-3's
shapes, built on the meta device (no parameter memory), for the dry run at real size::

    spmdc plan llama3-70b --mesh dp=512,tp=8 --plan fsdp+tp --batch 512 --device h100

The model is the transformers class at its default settings (sdpa attention, no dropout);
only the sizes are Llama-3's (Meta's published configs: rope theta 500000, 128256-token
vocabulary, grouped-query attention with 8 key/value heads). The inputs are real token ids
``[batch, seq]`` (labels = the ids: the model computes its own loss). Running such a workload
(``spmdc run``) materializes each rank's shards (:mod:`spmdc.frontend.deferred_init`).
"""

from __future__ import annotations

from typing import Any

SIZES: dict[str, dict[str, Any]] = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, tie_word_embeddings=True, seq=2048),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, tie_word_embeddings=False, seq=2048),
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, tie_word_embeddings=False, seq=4096),
}


def build(size: str = "8b", batch: int = 8, seq: int | None = None, layers: int | None = None,
          vocab_size: int = 128256) -> tuple[Any, dict[str, Any], None]:
    """``(model on meta, {"input_ids", "labels"}, None)`` for Llama-3 ``size`` (``layers`` overrides
    the depth, e.g. to time compilation against it)."""
    import torch
    import transformers as T

    if size not in SIZES:
        raise ValueError(f"unknown Llama-3 size '{size}' (sizes: {', '.join(SIZES)})")
    shape = dict(SIZES[size])
    seq = seq if seq is not None else shape.pop("seq")
    shape.pop("seq", None)
    if layers is not None:
        shape["num_hidden_layers"] = layers
    cfg = T.LlamaConfig(vocab_size=vocab_size, max_position_embeddings=max(8192, seq), rope_theta=500000.0,
                        rms_norm_eps=1e-5, **shape)
    with torch.device("meta"):
        model = T.LlamaForCausalLM(cfg)
    ids = torch.randint(0, vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "labels": ids}, None


def llama3_1b(batch: int = 8, seq: int | None = None, layers: int | None = None) -> Any:
    return build("1b", batch, seq, layers)


def llama3_8b(batch: int = 8, seq: int | None = None, layers: int | None = None) -> Any:
    return build("8b", batch, seq, layers)


def llama3_70b(batch: int = 8, seq: int | None = None, layers: int | None = None) -> Any:
    return build("70b", batch, seq, layers)
