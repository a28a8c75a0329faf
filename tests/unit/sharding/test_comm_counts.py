"""Collective counts of partitioned programs (issue 4's "done when", counted in the IR).

Each case captures a built-in workload, applies a preset, runs the global sharding
pipeline and partitions rank 0; the collectives are counted per (op, mesh axes), one per
parameter, synchronous (``bucket=False, overlap=False``: the analytic counts; bucketing and
scheduling are tested on their own).
"""

from collections import Counter

from spmdc.compiler import compile_step
from spmdc.dialects.comm import collective_kind
from spmdc.examples import mlp
from spmdc.sharding.mesh import Mesh


def counts(step, rank=0):
    module = step.rank_module(rank)
    c = Counter()
    for op in module.walk():
        if collective_kind(op) is not None:   # (comm.keep_at_origin moves nothing)
            axes = op.attr_value("axes") or [op.attr_value("axis")]
            c[(op.name.split(".")[1], ",".join(axes))] += 1
    return dict(c)


def mlp_step(plan, mesh, train):
    model, ((x,), (y,)), loss_fn = mlp.factory()
    if train:
        return compile_step(model, (x,), mesh=mesh, plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                            bucket=False, overlap=False)
    return compile_step(model, (x,), mesh=mesh, plan=plan, bucket=False, overlap=False)


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
    step = compile_step(model, (x,), mesh=Mesh({"dp": 4}), plan=plan, train=True, loss_fn=loss_fn, loss_inputs=(y,),
                        bucket=False, overlap=False)
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


def _owners(module):
    """Per collective: (kind, axes, owner) with owner 'param:<fqn>[:fwd|bwd]', 'grad:<fqn>' or 'act:<loc>'."""
    from spmdc.dialects.func import FuncOp

    func = next(op for op in module.body.ops if isinstance(op, FuncOp))
    params = {a: func.arg_attrs(i)["spmdc.param"].value for i, a in enumerate(func.args)
              if "spmdc.param" in func.arg_attrs(i)}
    grads = {}
    for i, v in enumerate(func.return_op.operands):
        g = func.res_attrs(i).get("spmdc.grad_of")
        if g is not None:
            grads[id(v)] = g.value
    out = []
    for op in func.body.ops:
        if not op.name.startswith("comm."):
            continue
        axes = ",".join(op.attr_value("axes") or [op.attr_value("axis")])
        src, res = op.operand(0), op.result
        if src in params:
            phase = "bwd" if (res.name_hint or "").endswith("_bwd") else "fwd"
            owner = f"param:{params[src]}:{phase}"
        elif id(res) in grads:
            owner = f"grad:{grads[id(res)]}"
        else:
            owner = f"act:{getattr(op.location, 'name', '')}"
        out.append((op.name.split(".")[1], axes, owner))
    return out


def test_gpt2_fsdp_tp_training_matches_the_analytic_per_block_table():
    """docs/passes.md: per block, tp 2+2 all_reduces; dp one all_gather per dp-sharded block
    parameter in forward and one per parameter the backward reads; one reduce_scatter per
    dp-sharded gradient; one all_reduce per dp-replicated (tp-sharded 1-D) gradient."""
    from spmdc.examples import gpt2_tiny

    model, ((tok,), (tgt,)), loss_fn = gpt2_tiny.factory()
    step = compile_step(model, (tok,), mesh=Mesh({"dp": 2, "tp": 2}), plan="fsdp+tp", train=True,
                        loss_fn=loss_fn, loss_inputs=(tgt,), bucket=False, overlap=False)
    rows = _owners(step.rank_module(0))
    n_layer = len(model.h)
    # tp: only the Megatron reductions, 2 forward + 2 backward per block, on activations
    tp = [r for r in rows if r[1] == "tp"]
    assert len(tp) == 4 * n_layer and all(k == "all_reduce" and o.startswith("act:h.") for k, _, o in tp)
    block_params = [n for n, _ in model.named_parameters() if n.startswith("h.0.")]
    tp_sharded_1d = [n for n in block_params
                     if n.endswith(".bias") and n.split(".")[-2] in ("q_proj", "k_proj", "v_proj", "c_fc")]
    dp_sharded = [n for n in block_params if n not in tp_sharded_1d]
    read_in_backward = [n for n in dp_sharded if n.endswith(".weight")]  # linear and LayerNorm weights
    b0 = [r for r in rows if "h.0." in r[2]]
    count = Counter((k, a, o.split(":")[0] + (":" + o.split(":")[2] if o.startswith("param") else ""))
                    for k, a, o in b0)
    assert count[("all_gather", "dp", "param:fwd")] == len(dp_sharded) == 12
    assert count[("all_gather", "dp", "param:bwd")] == len(read_in_backward) == 8
    assert count[("reduce_scatter", "dp", "grad")] == len(dp_sharded)
    assert count[("all_reduce", "dp", "grad")] == len(tp_sharded_1d) == 4
    assert count[("all_reduce", "tp", "act")] == 4
    assert sum(count.values()) == 12 + 8 + 12 + 4 + 4   # nothing else touches block 0


class _PreMLP(__import__("torch").nn.Module):
    """A replicated linear before a Megatron MLP: the MLP's input needs a gradient."""

    def __init__(self):
        import torch.nn as nn

        super().__init__()
        self.pre = nn.Linear(16, 16)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)

    def forward(self, x):
        import torch.nn.functional as F

        return self.fc2(F.gelu(self.fc1(self.pre(x))))


def test_megatron_mlp_input_gradient_adds_exactly_one_all_reduce():
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model, x, y = _PreMLP(), torch.randn(8, 16), torch.randn(8, 16)
    fwd = compile_step(model, (x,), mesh=Mesh({"tp": 2}), plan="megatron", bucket=False, overlap=False)
    train = compile_step(model, (x,), mesh=Mesh({"tp": 2}), plan="megatron", train=True, loss_fn=F.mse_loss,
                         loss_inputs=(y,), bucket=False, overlap=False)
    assert counts(fwd) == {("all_reduce", "tp"): 1}
    assert counts(train) == {("all_reduce", "tp"): 2}


class _TwoBranch(__import__("torch").nn.Module):
    """Two row-parallel projections with biases summed (a parallel attention+MLP block)."""

    def __init__(self):
        import torch.nn as nn

        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.o_proj = nn.Linear(32, 16)
        self.down_proj = nn.Linear(32, 16)

    def forward(self, x):
        import torch.nn.functional as F

        h = F.gelu(self.fc1(x))
        return self.o_proj(h) + self.down_proj(h * 2)


def test_partial_bias_adds_merge_into_one_all_reduce_and_stay_exact():
    import torch

    from spmdc.api.worker import run_steps
    from spmdc.runtime.launcher import launch

    torch.manual_seed(0)
    model, x = _TwoBranch(), torch.randn(8, 16)
    step = compile_step(model, (x,), mesh=Mesh({"tp": 2}), plan="megatron", bucket=False, overlap=False)
    assert counts(step, 0) == counts(step, 1) == {("all_reduce", "tp"): 1}
    results = launch(run_steps, 2, ([step],))
    for rank in (0, 1):
        torch.testing.assert_close(results[rank][0]["outputs"][0], model(x).detach(), rtol=1e-5, atol=1e-6)
