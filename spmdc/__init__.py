"""spmdc — a sharding compiler toolchain for PyTorch.

The IR lives in :mod:`spmdc.ir`, dialects in :mod:`spmdc.dialects`, passes in
:mod:`spmdc.passes`, command-line tools in :mod:`spmdc.tools`.
"""

__version__ = "0.1.0"

_LAZY = {
    "capture": ("spmdc.frontend.capture", "capture"),
    "capture_program": ("spmdc.frontend.capture", "capture_program"),
    "load_workload": ("spmdc.frontend.workloads", "load_workload"),
    "compile": ("spmdc.runtime.api", "compile"),
    "CompiledModule": ("spmdc.runtime.api", "CompiledModule"),
    "Optimizer": ("spmdc.runtime.api", "Optimizer"),
    "Mesh": ("spmdc.sharding.mesh", "Mesh"),
    "Plan": ("spmdc.sharding.plan", "Plan"),
    "ParamLayout": ("spmdc.sharding.plan", "ParamLayout"),
    "preset": ("spmdc.sharding.plan", "preset"),
    "Replicate": ("spmdc.ir.sharding", "Replicate"),
    "Shard": ("spmdc.ir.sharding", "Shard"),
    "Partial": ("spmdc.ir.sharding", "Partial"),
    "compile_step": ("spmdc.runtime.engine", "compile_step"),
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
