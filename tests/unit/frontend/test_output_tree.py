"""The model output's structure (spmdc.frontend.loss.output_tree / rebuild_output): what cm(x)
puts the program's results back into."""

from __future__ import annotations

import pickle
from collections import OrderedDict, namedtuple

import torch

from spmdc.frontend.loss import _tensor_leaves, output_tree, rebuild_output

Pair = namedtuple("Pair", "a b")


def roundtrip(out):
    leaves: list = []
    _tensor_leaves(out, "output", leaves, [])
    tree = pickle.loads(pickle.dumps(output_tree(out)))   # (it travels with the compiled program)
    return rebuild_output(tree, [t * 2 for t in leaves]), leaves


def test_tensors_tuples_dicts_and_named_tuples_come_back():
    a, b, c = torch.ones(2), torch.zeros(3), torch.full((1,), 5.0)
    got, leaves = roundtrip((a, {"x": b, "skip": None}, [c]))
    assert len(leaves) == 3
    assert isinstance(got, tuple) and isinstance(got[1], dict) and isinstance(got[2], list)
    assert torch.equal(got[0], a * 2) and torch.equal(got[1]["x"], b * 2) and got[1]["skip"] is None
    assert torch.equal(got[2][0], c * 2)
    got, _ = roundtrip(Pair(a, b))
    assert type(got) is Pair and torch.equal(got.b, b * 2)
    got, _ = roundtrip(OrderedDict(k=a))
    assert type(got) is OrderedDict and torch.equal(got["k"], a * 2)
    got, _ = roundtrip(a)
    assert torch.equal(got, a * 2)


def test_a_huggingface_model_output_keeps_its_class():
    from transformers.modeling_outputs import CausalLMOutput

    logits = torch.randn(2, 3)
    got, leaves = roundtrip(CausalLMOutput(logits=logits))
    assert type(got) is CausalLMOutput and torch.equal(got.logits, logits * 2) and len(leaves) == 1


def test_objects_that_are_not_tensors_become_none_and_local_classes_plain_containers():
    class Local(dict):
        pass

    got, leaves = roundtrip((torch.ones(1), object(), Local(v=torch.ones(2))))
    assert got[1] is None and type(got[2]) is dict and len(leaves) == 2
