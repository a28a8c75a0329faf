"""spmdc — a sharding compiler toolchain for PyTorch.

The IR lives in :mod:`spmdc.ir`, dialects in :mod:`spmdc.dialects`, passes in
:mod:`spmdc.passes`, command-line tools in :mod:`spmdc.tools`.
"""

from spmdc.dialects import register_all as _register_dialects

__version__ = "0.1.0"

_register_dialects()  # spmdc's dialects, by name (imported on first use), as mlir-opt registers all

_LAZY = {
    "capture": ("spmdc.frontend.capture", "capture"),
    "capture_program": ("spmdc.frontend.capture", "capture_program"),
    "load_workload": ("spmdc.frontend.workloads", "load_workload"),
    "compile": ("spmdc.api.entry", "compile"),
    "eager": ("spmdc.api.entry", "eager"),
    "sampler_args": ("spmdc.api.entry", "sampler_args"),
    "CompiledModule": ("spmdc.api.entry", "CompiledModule"),
    "Optimizer": ("spmdc.api.entry", "Optimizer"),
    "StepMetrics": ("spmdc.api.metrics", "StepMetrics"),
    "flops_per_token": ("spmdc.api.metrics", "flops_per_token"),
    "count_params": ("spmdc.api.metrics", "count_params"),
    "Mesh": ("spmdc.sharding.mesh", "Mesh"),
    "Plan": ("spmdc.sharding.plan", "Plan"),
    "HeteroPlan": ("spmdc.sharding.device_groups", "HeteroPlan"),
    "ParamLayout": ("spmdc.sharding.plan", "ParamLayout"),
    "preset": ("spmdc.sharding.plan", "preset"),
    "Replicate": ("spmdc.dialects.shard", "Replicate"),
    "Shard": ("spmdc.dialects.shard", "Shard"),
    "Partial": ("spmdc.dialects.shard", "Partial"),
    "compile_step": ("spmdc.compiler", "compile_step"),
    "CompileOptions": ("spmdc.compiler.options", "CompileOptions"),
    "deferred_init": ("spmdc.frontend.deferred_init", "deferred_init"),
    "materialize": ("spmdc.frontend.deferred_init", "materialize"),
}


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


def __getattr__(name: str):
    """``spmdc.capture``, ``spmdc.compile`` etc. import torch only when first used (``import spmdc`` stays light)."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'spmdc' has no attribute {name!r}")
