"""A model built on the meta device (full size costs no memory) goes through spmdc.capture,
compile_global and compile_rank with no private context (issue 29, first part): the programs are
those of the same model built on CPU."""

from __future__ import annotations

import torch
import transformers as T

from spmdc.compiler import compile_rank
from spmdc.compiler.driver import compile_global
from spmdc.ir.printer import print_module
from spmdc.sharding.mesh import Mesh


def _llama() -> torch.nn.Module:
    cfg = T.LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
    return T.AutoModelForCausalLM.from_config(cfg)


def test_a_meta_model_compiles_to_the_programs_of_the_real_one():
    ids = torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(0))
    with torch.device("meta"):
        meta = _llama()
    assert all(p.is_meta for p in meta.parameters())
    real = _llama()
    steps = [compile_global(m, (), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", train=True,
                            kwargs={"input_ids": ids, "labels": ids}, compile_cache=False) for m in (meta, real)]
    assert steps[0].global_ir == steps[1].global_ir
    ranks = [print_module(compile_rank(s, 3).module) for s in steps]
    assert ranks[0] == ranks[1]
    assert all(p.is_meta for p in meta.parameters())   # the meta parameters are back, untouched


def test_spmdc_capture_takes_a_meta_model():
    from spmdc.frontend.capture import capture

    ids = torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(0))
    with torch.device("meta"):
        meta = _llama()
    texts = [print_module(capture(m, (), train=True, example_kwargs={"input_ids": ids, "labels": ids}))
             for m in (meta, _llama())]
    assert texts[0] == texts[1]
