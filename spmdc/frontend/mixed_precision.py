"""Mixed precision as FSDP2's ``MixedPrecisionPolicy``: parameters cast to ``param_dtype``
where they are used, compute in that dtype, gradients back in float32.

The cast is part of the captured program: the model runs with its floating-point parameters
replaced by ``p.to(param_dtype)`` (``torch.func.functional_call``) and its floating-point
inputs cast likewise, so the program reads::

    %w16 = tensor.cast %h.0.fc.weight : (tensor<64x16xf32>) -> tensor<64x16xbf16>   // on the shard
    ...                                                                              // bf16 compute
    %g = tensor.cast %grad16 : (tensor<64x16xbf16>) -> tensor<64x16xf32>             // then reduced

Sharding propagation keeps the cast on the stored shard (``S(0)`` in, ``S(0)`` out), so FSDP's
all-gather moves bf16 (half the bytes), and the gradient's ``P(sum)`` passes through the cast
back to float32 before its reduce-scatter (``reduce_dtype`` float32). Master weights and
optimizer state stay float32: the program's parameters and gradients are float32.

    policy = MixedPrecision.parse("bf16")          # or a torch.distributed.fsdp.MixedPrecisionPolicy
    out = call_model(model, args, kwargs, policy)  # what the capture wrappers run
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

__all__ = ["MixedPrecision", "MixedPrecisionError", "call_model"]

_NAMES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "half": torch.float16}


class MixedPrecisionError(ValueError):
    """A mixed-precision policy spmdc cannot run exactly."""


@dataclass(frozen=True)
class MixedPrecision:
    """``param_dtype``: the dtype parameters are gathered and used in; ``reduce_dtype``: the dtype
    gradients are reduced in (float32 only: spmdc casts a gradient back to float32 before its
    reduction); ``cast_forward_inputs``: floating-point model inputs are cast to ``param_dtype``."""

    param_dtype: torch.dtype = torch.bfloat16
    reduce_dtype: torch.dtype = torch.float32
    cast_forward_inputs: bool = True

    def __post_init__(self) -> None:
        if self.param_dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise MixedPrecisionError(f"param_dtype {self.param_dtype} is not a floating-point compute dtype "
                                      "(bfloat16, float16 or float32)")
        if self.reduce_dtype != torch.float32:
            raise MixedPrecisionError(
                f"reduce_dtype {self.reduce_dtype}: spmdc reduces gradients in float32 (it casts each gradient "
                "back to the float32 parameter's dtype before its reduce-scatter/all-reduce); use "
                "reduce_dtype=torch.float32 or leave it unset")

    @property
    def name(self) -> str:
        return str(self.param_dtype).removeprefix("torch.")

    @classmethod
    def parse(cls, spec: Any) -> MixedPrecision | None:
        """``None``/``"none"``/``"fp32"`` → None; ``"bf16"``, ``"fp16"``, a :class:`MixedPrecision`
        or FSDP2's ``MixedPrecisionPolicy`` (its ``reduce_dtype=None`` means float32 here)."""
        if spec is None or isinstance(spec, cls):
            return spec
        if isinstance(spec, str):
            key = spec.strip().lower()
            if key in ("", "none", "fp32", "float32", "no"):
                return None
            if key not in _NAMES:
                raise MixedPrecisionError(f"unknown mixed precision '{spec}' (choices: bf16, fp16, none)")
            return cls(_NAMES[key])
        if hasattr(spec, "param_dtype") and hasattr(spec, "reduce_dtype"):   # FSDP2's policy
            if getattr(spec, "output_dtype", None) is not None:
                raise MixedPrecisionError("MixedPrecisionPolicy.output_dtype is not supported by spmdc "
                                          "(outputs keep param_dtype); leave it unset")
            if spec.param_dtype is None:
                return None
            return cls(spec.param_dtype, spec.reduce_dtype or torch.float32,
                       bool(getattr(spec, "cast_forward_inputs", True)))
        raise MixedPrecisionError(f"mixed_precision must be 'bf16', 'fp16', None, a spmdc MixedPrecision or a "
                                  f"torch MixedPrecisionPolicy; got {type(spec).__name__}")


def _cast(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(dtype)
    if isinstance(x, (tuple, list)):
        return type(x)(_cast(v, dtype) for v in x)
    if isinstance(x, dict):
        return {k: _cast(v, dtype) for k, v in x.items()}
    return x


def call_model(model: nn.Module, args: tuple, kwargs: dict[str, Any], policy: MixedPrecision | None) -> Any:
    """``model(*args, **kwargs)``, under ``policy`` when given: floating-point parameters used
    as ``p.to(param_dtype)`` (tied parameters stay tied), inputs cast when ``cast_forward_inputs``."""
    if policy is None:
        return model(*args, **kwargs)
    dtype = policy.param_dtype
    params = {n: p.to(dtype) if p.is_floating_point() else p for n, p in model.named_parameters()}
    if policy.cast_forward_inputs:
        args, kwargs = _cast(tuple(args), dtype), _cast(dict(kwargs), dtype)
    return torch.func.functional_call(model, params, tuple(args), kwargs, tie_weights=True, strict=False)


class MixedPrecisionModule(nn.Module):
    """An eager module running ``model`` under ``policy`` (the single-device reference of a
    mixed-precision run): its parameters are ``model``'s, in float32."""

    def __init__(self, model: nn.Module, policy: MixedPrecision):
        super().__init__()
        self.model = model
        self.policy = policy

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return call_model(self.model, args, kwargs, self.policy)
