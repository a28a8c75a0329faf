"""The expert-parallel presets lay out a mixture of experts as documented (docs/plans.md): stacked
expert weights S(0) on ep (stored and computed: each rank holds and runs its experts), fsdp over
dp on the first dim no other axis takes, megatron inside every expert under fsdp+tp+ep, dense
parameters as their fsdp/megatron presets lay them, the batch split over dp and ep; an ep preset
without its axes, or on a model whose expert count ep does not divide, says so."""

from __future__ import annotations

import re

import pytest

from spmdc.dialects.shard.placements import Replicate, Shard, StridedShard
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import PlanError, is_expert_weight, preset

PARAMS = {
    "layers.0.attn.q_proj.weight": (32, 32),
    "layers.0.mlp.gate.weight": (8, 32),                  # the router
    "layers.0.mlp.experts.gate_up_proj": (8, 128, 32),    # [E, 2I, H]
    "layers.0.mlp.experts.down_proj": (8, 32, 64),        # [E, H, I]
    "norm.weight": (32,),
}
UP, DOWN = "layers.0.mlp.experts.gate_up_proj", "layers.0.mlp.experts.down_proj"


def test_ep_shards_the_experts_and_replicates_the_rest():
    plan = preset("ep", Mesh({"ep": 4}), PARAMS, input_ranks=[2])
    assert plan.params[UP].storage == {"ep": Shard(0)} and plan.params[DOWN].storage == {"ep": Shard(0)}
    assert plan.params[UP].compute is None                 # computed as stored: never gathered
    assert set(plan.params) == {UP, DOWN}                  # router, attention, norms replicated
    assert plan.inputs == [{"ep": Shard(0)}]               # the batch over ep


def test_fsdp_ep_adds_fsdp_on_another_dim():
    plan = preset("fsdp+ep", Mesh({"dp": 2, "ep": 2}), PARAMS, input_ranks=[2])
    up = plan.params[UP]
    assert up.storage == {"ep": Shard(0), "dp": Shard(1)} and up.compute == {"ep": Shard(0), "dp": Replicate()}
    assert plan.params["layers.0.attn.q_proj.weight"].storage == {"dp": Shard(0)}
    assert plan.params["layers.0.mlp.gate.weight"].storage == {"dp": Shard(0)}
    assert plan.inputs == [{"dp": Shard(0), "ep": Shard(0)}]


def test_fsdp_tp_ep_splits_inside_every_expert():
    plan = preset("fsdp+tp+ep", Mesh({"dp": 2, "tp": 2, "ep": 2}), PARAMS)
    up, down = plan.params[UP].storage, plan.params[DOWN].storage
    assert up == {"tp": StridedShard(1, 2), "ep": Shard(0), "dp": Shard(2)}
    assert down == {"tp": Shard(2), "ep": Shard(0), "dp": Shard(1)}
    assert plan.params["layers.0.attn.q_proj.weight"].storage == {"tp": Shard(0), "dp": Shard(1)}


def test_expert_weights_are_recognised_by_name_and_rank():
    assert is_expert_weight(UP, (8, 128, 32)) and is_expert_weight("e.w2", (4, 8, 8))
    assert not is_expert_weight("mlp.down_proj.weight", (32, 64))       # a dense linear
    assert not is_expert_weight("experts.gate_up_proj", (128, 32))      # not stacked


def test_an_expert_count_ep_does_not_divide_stays_replicated():
    plan = preset("ep", Mesh({"ep": 3}), PARAMS)
    assert UP not in plan.params


@pytest.mark.parametrize("name,mesh,axis", [("ep", Mesh({"dp": 4}), "ep"), ("fsdp+ep", Mesh({"ep": 4}), "dp"),
                                            ("fsdp+tp+ep", Mesh({"dp": 2, "ep": 2}), "tp")])
def test_an_ep_preset_without_its_axis_is_refused(name, mesh, axis):
    with pytest.raises(PlanError, match=re.escape(f"plan preset '{name}' needs mesh axis '{axis}'")):
        preset(name, mesh, PARAMS)


def test_a_misspelt_ep_preset_is_told_the_right_one():
    with pytest.raises(PlanError, match="did you mean 'fsdp\\+ep'"):
        preset("fsdp-ep", Mesh({"dp": 2, "ep": 2}), PARAMS)
