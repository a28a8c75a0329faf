"""Sharding: meshes, placements, plans, factor rules, cost model, strategies, redistribution planner."""
