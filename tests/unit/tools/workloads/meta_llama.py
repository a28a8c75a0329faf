"""A HuggingFace Llama built on the meta device (no parameter memory): the command-line tools take
it like any workload (tests/unit/tools/test_plan_predictions.py)."""

import torch
import transformers as T


def factory(batch: int = 4):
    cfg = T.LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
    with torch.device("meta"):
        model = T.LlamaForCausalLM(cfg)
    ids = torch.randint(0, 64, (batch, 8), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "labels": ids}, None


def meta_inputs(batch: int = 4):
    """The same model fed input ids built on meta too, as a user writes a real-size batch
    (``torch.randint(..., device="meta")``): torch's embedding backward met a CPU scalar there."""
    model, _, _ = factory(batch)
    ids = torch.randint(0, 64, (batch, 8), device="meta")
    return model, {"input_ids": ids, "labels": ids}, None
