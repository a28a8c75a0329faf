"""plan="auto" inside a job: what optimizer the search prices (spmdc.api.auto_choice)."""

import torch

from spmdc.api.auto_choice import UNKNOWN_OPTIMIZER, priced_optimizer
from spmdc.runtime.optimizers import Optimizer


def test_an_optimizer_the_search_is_not_told_is_priced_as_the_largest_common_state():
    """FSDP2 users build their optimizer over cm.parameters() after compile: the search cannot see
    it, so a training step without a named optimizer is priced with AdamW's two states (a layout
    chosen so fits whichever they build); a named one is priced as named; a forward has none."""
    assert priced_optimizer(None, train=True) == UNKNOWN_OPTIMIZER == "adamw"
    assert priced_optimizer(lambda ps: torch.optim.SGD(ps, lr=0.1), train=True) == "adamw"   # a factory
    assert priced_optimizer("sgd", train=True) == "sgd"
    assert priced_optimizer(("adagrad", {"lr": 0.1}), train=True) == "adagrad"
    assert priced_optimizer(Optimizer("sgd", lr=0.1), train=True) == "sgd"
    assert priced_optimizer(None, train=False) is None and priced_optimizer("adamw", train=False) is None
