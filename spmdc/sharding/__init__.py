"""Sharding: meshes, placements, plans, factor rules, cost model, strategies, redistribution planner."""

from spmdc.dialects.shard import Partial, Replicate, Shard
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import ParamLayout, Plan, PlanError, preset

__all__ = ["Mesh", "Plan", "ParamLayout", "PlanError", "preset", "Replicate", "Shard", "Partial"]
