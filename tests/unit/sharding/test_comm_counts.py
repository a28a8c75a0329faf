"""Collective counts of partitioned programs (issue 4's "done when", counted in the IR).

Each case captures a built-in workload, applies a preset, runs the global sharding
pipeline and partitions rank 0; the collectives are counted per (op, mesh axes).
"""

from collections import Counter

import pytest

from spmdc.examples import mlp
from spmdc.runtime.engine import compile_step
from spmdc.sharding.mesh import Mesh


def counts(step, rank=0):
    module = step.rank_module(rank)
    c = Counter()
    for op in module.walk():
        if op.name.startswith("comm."):
            axes = op.attr_value("axes") or [op.attr_value("axis")]
            c[(op.name.split(".")[1], ",".join(axes))] += 1
    return dict(c)


def mlp_step(plan, mesh, train):
    model, ((x,), (y,)), loss_fn = mlp.factory()
    if train:
        return compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,))
    return compile_step(model, (x,), mesh=mesh, plan=plan)


def test_megatron_mlp_forward_is_one_all_reduce():
    assert counts(mlp_step("megatron", Mesh({"tp": 4}), False)) == {("all_reduce", "tp"): 1}


def test_megatron_mlp_training_adds_nothing_for_weight_gradients():
    # the input needs no gradient: the backward issues no collective at all
    assert counts(mlp_step("megatron", Mesh({"tp": 4}), True)) == {("all_reduce", "tp"): 1}


def test_sp_mlp_forward_is_one_all_gather_and_one_reduce_scatter():
    assert counts(mlp_step("sp", Mesh({"tp": 4}), False)) == {("all_gather", "tp"): 1, ("reduce_scatter", "tp"): 1}


def test_dp_training_all_reduces_each_gradient_and_the_loss():
    assert counts(mlp_step("dp", Mesh({"dp": 4}), True)) == {("all_reduce", "dp"): 4 + 1}


def test_fsdp_training_gathers_twice_and_reduce_scatters_each_gradient():
    # 4 parameters gathered in forward; fc2.weight again in backward (fc1.weight is not
    # needed there: the input needs no gradient, biases never are); 4 reduce-scatters; loss.
    got = counts(mlp_step("fsdp", Mesh({"dp": 4}), True))
    assert got == {("all_gather", "dp"): 4 + 1, ("reduce_scatter", "dp"): 4, ("all_reduce", "dp"): 1}


def test_fsdp_keeping_gathered_weights_has_no_backward_gather():
    from spmdc.dialects.func import FuncOp
    from spmdc.sharding.plan import preset

    model, ((x,), (y,)), loss_fn = mlp.factory()
    params = {n: tuple(p.shape) for n, p in model.named_parameters()}
    plan = preset("fsdp", Mesh({"dp": 4}), params, [2, 2], [], reshard_after_forward=False)
    step = compile_step(model, (x,), mesh=Mesh({"dp": 4}), plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,))
    assert counts(step) == {("all_gather", "dp"): 4, ("reduce_scatter", "dp"): 4, ("all_reduce", "dp"): 1}
    assert FuncOp  # imported for the type of rank modules


def test_every_rank_program_verifies_with_uneven_shards():
    # 8 rows of x over 3 ranks: 3, 3, 2
    step = mlp_step("fsdp", Mesh({"dp": 3}), True)
    shapes = set()
    for rank in range(3):
        module = step.rank_module(rank)   # partition + verify after every pass
        func = module.body.ops[-1]
        shapes.add(tuple(a.type.shape for a in func.args))
    assert len(shapes) == 2  # ranks 0/1 and rank 2 hold different pieces
