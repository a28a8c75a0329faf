"""spmdc's SSA IR: core classes, types, attributes, text, verification, rewriting.

The core knows no dialect but ``builtin.module``; dialects register themselves by name
(:mod:`spmdc.ir.registry`). Names below are imported on first use, so importing a
submodule such as :mod:`spmdc.ir.registry` stays light.
"""

from __future__ import annotations

import importlib

_LAZY = {
    **{n: "spmdc.ir.attributes" for n in ("ArrayAttr", "Attribute", "BoolAttr", "DenseAttr", "DictAttr",
                                          "FloatAttr", "IntegerAttr", "StringAttr", "SymbolRefAttr", "TypeAttr",
                                          "UnitAttr")},
    **{n: "spmdc.ir.core" for n in ("Block", "BlockArgument", "InferError", "Operation", "OpResult", "Region",
                                    "Use", "Value")},
    **{n: "spmdc.ir.diagnostics" for n in ("Diagnostic", "DiagnosticError", "SourceManager")},
    **{n: "spmdc.ir.location" for n in ("FileLineColLoc", "Location", "NameLoc", "UnknownLoc")},
    **{n: "spmdc.ir.types" for n in ("FunctionType", "TensorType", "Type")},
    "ModuleOp": "spmdc.ir.module",
    "parse_module": "spmdc.ir.parser",
    "print_module": "spmdc.ir.printer",
    "verify": "spmdc.ir.verifier",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'spmdc.ir' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))
