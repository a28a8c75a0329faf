"""Resolving a plan against the captured program: a preset name (or a plan refining one) becomes
the layouts of this program's parameters and inputs.

    resolved = plan_for("fsdp+tp", Mesh({"dp": 2, "tp": 2}), main_function(module), model)

The model is read for what presets need beyond shapes: attention heads (``heads_of``), key/value
heads (``kv_heads_of``) and ``[in, out]`` weights (``conv1d_modules``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spmdc.dialects.attrs import BUFFER_ATTR, PARAM_ATTR
from spmdc.dialects.func import FuncOp
from spmdc.sharding.mesh import Mesh
from spmdc.sharding.plan import Plan, check_fsdp_shard, preset


def kv_heads_of(model: Any) -> dict[str, int]:
    """Attention module path → its number of key/value heads, for modules with a ``k_proj``
    (or ``key``) child that say it: ``num_key_value_heads`` / ``n_kv_head(s)`` /
    ``num_kv_heads``, or their ``config.num_key_value_heads`` (Hugging Face)."""
    out: dict[str, int] = {}
    if model is None or not hasattr(model, "named_modules"):
        return out
    for path, m in model.named_modules():
        if not any(hasattr(m, c) for c in ("k_proj", "key")):
            continue
        for name in ("num_key_value_heads", "n_kv_head", "n_kv_heads", "num_kv_heads"):
            v = getattr(m, name, None)
            if isinstance(v, int):
                out[path] = v
                break
        else:
            v = getattr(getattr(m, "config", None), "num_key_value_heads", None)
            if isinstance(v, int):
                out[path] = v
    return out


HEAD_COUNT_NAMES = ("num_heads", "n_head", "num_attention_heads", "n_heads", "nhead")


def heads_of(model: Any) -> dict[str, int]:
    """Module path → its number of attention heads, for modules that say it
    (``num_heads`` / ``n_head`` / ``num_attention_heads`` / ``n_heads``, or their ``config``)."""
    out: dict[str, int] = {}
    if model is None or not hasattr(model, "named_modules"):
        return out
    for path, m in model.named_modules():
        for name in HEAD_COUNT_NAMES:
            v = getattr(m, name, None)
            if isinstance(v, int) and v > 0:
                out[path] = v
                break
    return out


def conv1d_modules(model: Any) -> set[str]:
    """Paths of modules whose ``weight`` is ``[in, out]`` (HuggingFace's ``Conv1D``, GPT-2's
    ``c_attn``/``c_fc``/``c_proj``), so that presets transpose their column/row layouts."""
    if model is None or not hasattr(model, "named_modules"):
        return set()
    # HuggingFace's Conv1D, and stacked experts stored [E, in, out] (use_experts_implementation's is_transposed)
    return {path for path, m in model.named_modules()
            if type(m).__name__ == "Conv1D" or getattr(m, "is_transposed", False) is True}


def _preset(name: str, mesh: Mesh, params: dict, in_ranks: list, out_ranks: list, model: Any,
            fsdp_shard: str = "even") -> Plan:
    return preset(name, mesh, params, in_ranks, out_ranks, kv_heads=kv_heads_of(model), heads=heads_of(model),
                  transposed=conv1d_modules(model), fsdp_shard=fsdp_shard)


def plan_for(plan: str | Plan, mesh: Mesh, func: FuncOp, model: Any = None) -> Plan:
    """A preset name (or a plan refining a preset) resolved against the captured function's
    parameters and inputs (a :class:`~spmdc.sharding.device_groups.GroupPlan`: the group's preset on its
    virtual mesh, with the batch split across the groups)."""
    from spmdc.sharding.device_groups import GroupPlan

    if isinstance(plan, GroupPlan):
        base = plan_for(plan.base, mesh, func, model)
        users = [a for i, a in enumerate(func.args) if PARAM_ATTR not in func.arg_attrs(i)]
        return plan.extend(base, [a.type.shape for a in users],  # type: ignore[attr-defined]
                           [a.name_hint or f"arg{a.index}" for a in users])
    if isinstance(plan, Plan) and plan.preset is None:
        check_fsdp_shard(plan.fsdp_shard, None)
        return plan
    from spmdc.sharding.apply import is_model_output

    params, in_ranks = {}, []
    for i, a in enumerate(func.args):
        attrs = func.arg_attrs(i)
        p = attrs.get(PARAM_ATTR)
        if p is None:
            in_ranks.append(a.type.rank)  # type: ignore[attr-defined]
        elif BUFFER_ATTR not in attrs:  # buffers stay replicated (and are not inputs)
            params[p.value] = a.type.shape  # type: ignore[attr-defined]
    out_ranks = [v.type.rank for i, v in enumerate(func.return_op.operands)  # type: ignore[attr-defined]
                 if is_model_output(func, i)]
    if isinstance(plan, Plan):   # a preset with the plan's own buckets / resharding / checkpointing
        base = _preset(plan.preset, mesh, params, in_ranks, out_ranks, model, plan.fsdp_shard)
        return dataclasses.replace(base, reshard_after_forward=plan.reshard_after_forward, name=plan.name,
                                   checkpoint=plan.checkpoint, buckets=plan.buckets)
    return _preset(plan, mesh, params, in_ranks, out_ranks, model)
